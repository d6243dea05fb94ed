"""Command-mode overhead: a trial of the user's own script against a recipe trial of the same model.

    .venv/bin/python bench/bench_command.py [--batch 4] [--steps 2] [--repeats 3] [--runs-dir DIR]

The same model, batch and step (examples/train_ddp.py; bench/train_ddp_recipe.py wraps its
model as a recipe), no config, CPU. Each repetition runs, in alternation, a recipe trial
(memopt's child process) and command trials of ``python examples/train_ddp.py`` and of
``torchrun --nproc_per_node 2`` on it, each in a fresh runs folder. Prints a markdown table:
median wall time per trial (start to the last process gone), median warm-up and measured
step time, and the peak (the highest rank's).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from memopt.backends.ort.trials import TrialSpec, run_trial, stack_versions
from memopt.core import command_target, parse_runnable
from memopt.core.trial import TrialResult
from memopt.run.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
RECIPE = str(ROOT / "bench" / "train_ddp_recipe.py")
SCRIPT = f"{ROOT / 'examples' / 'train_ddp.py'} --batch-size {{batch}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-command-"))
    versions = stack_versions()
    targets = {
        "recipe (child process)": parse_runnable(RECIPE),
        "command: python": command_target(f"{sys.executable} {SCRIPT}"),
        "command: torchrun, 2 ranks": command_target(
            f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 {SCRIPT}"
        ),
    }
    results: dict[str, list[TrialResult]] = {name: [] for name in targets}
    for repeat in range(args.repeats):
        for name, target in targets.items():
            folder = runs / f"{repeat}-{''.join(c if c.isalnum() else '-' for c in name)}"
            result = run_trial(
                TrialSpec(RunSettings(target=target, steps=args.steps, device="cpu"), args.batch),
                folder,
                versions=versions,
            )
            if not result.ran:
                raise SystemExit(f"{name}: {result.outcome}: {result.error}")
            results[name].append(result)
            print(f"# {name}: {result.wall_s:.1f} s", file=sys.stderr, flush=True)
    print(f"`{shlex.join(['.venv/bin/python', 'bench/bench_command.py', *sys.argv[1:]])}`\n")
    print("| target | wall per trial (median) | warm-up step | measured step | peak (highest rank) |")
    print("|---|---|---|---|---|")
    for name, done in results.items():
        wall = statistics.median(r.wall_s for r in done)
        warm = statistics.median(r.step_times_s[0] for r in done)
        step = statistics.median(r.median_step_s or 0.0 for r in done)
        peak = statistics.median(r.memory.peak_bytes or 0 for r in done) / 2**20
        print(f"| {name} | {wall:.1f} s | {warm:.2f} s | {step:.3f} s | {peak:.0f} MiB |")


if __name__ == "__main__":
    main()
