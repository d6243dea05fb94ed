"""Back-to-back 2-rank torchrun trials: is any process of a job alive when memopt returns?

    .venv/bin/python bench/bench_torchrun_leftovers.py [--trials 20] [--runs-dir DIR]

Each trial is the real command line, ``memopt trial --cmd "torchrun --nproc_per_node 2
examples/train_ddp.py …" --batch 2 --steps 1`` (gloo on CPU, a small model), run one after
the other. The moment memopt exits, /proc is searched for any live process whose
environment carries a run folder of this benchmark (``MEMOPT_RUN_DIR``): torchrun, its
workers, memopt's guard. Prints a markdown table; exits 1 if any trial failed or left a process.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memopt.child import RUN_DIR_VAR

ROOT = Path(__file__).resolve().parent.parent
JOB = (
    f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 "
    f"{ROOT / 'examples' / 'train_ddp.py'} --batch-size {{batch}} --seq 32 --width 32 --layers 1 --heads 2 --vocab 64"
)


def live_processes_of(runs: Path) -> list[str]:
    """Command lines of live processes (zombies are not) whose run folder lies under ``runs``."""
    prefix = f"{RUN_DIR_VAR}={runs.resolve()}/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if any(item.startswith(prefix) for item in environ):
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # gone meanwhile
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-torchrun-"))
    walls, failed, leftovers = [], 0, 0
    for number in range(1, args.trials + 1):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "memopt", "trial", "--cmd", JOB, "--batch", "2", "--steps", "1"]
            + ["--device", "cpu", "--runs-dir", str(runs)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        left = live_processes_of(runs)  # at the moment memopt returned
        walls.append(time.monotonic() - started)
        failed += done.returncode != 0
        leftovers += bool(left)
        print(f"# trial {number}: exit {done.returncode}, {walls[-1]:.1f} s, {len(left)} left", file=sys.stderr)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
        for line in left:
            print(f"#   left: {line}", file=sys.stderr)
    print(f"`{shlex.join(['.venv/bin/python', 'bench/bench_torchrun_leftovers.py', *sys.argv[1:]])}`\n")
    print("| trials | failed | with a process left at return | wall per trial (median) |")
    print("|---|---|---|---|")
    print(f"| {args.trials} | {failed} | {leftovers} | {statistics.median(walls):.1f} s |")
    sys.exit(1 if failed or leftovers else 0)


if __name__ == "__main__":
    main()
