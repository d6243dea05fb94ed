"""memopt's own planning time over depth, against the training runs it plans for.

    .venv/bin/python bench/bench_planning.py [--cases gpt:n_layer=8,…,hf:llama:num_hidden_layers=32]
        [--batch 32] [--seq 64] [--fraction 0.8] [--source DIR] [--label NAME] [--replan LABEL]
        [--runs-dir runs/bench_planning]

Per case (a tiny-width model at some depth: the node count of a deep model, little compute):
a no-config trial at the target batch (one training run: its CPU time is the yardstick, its
peak sets the budget at ``--fraction`` of it), then ``memopt plan <target> --target-batch B
--seq S --budget <fraction of that peak> --json`` in a fresh runs folder, as its own process,
measured from inside it: its own CPU time (graph load, scan, memory model, planner; the
interpreter's start-up and imports included), its children's (the graph probe and the
calibration run: two training runs) and its peak RSS. ``--source DIR`` runs ``memopt plan``
from another copy of the sources (``git archive <commit> memopt tui | tar -x -C DIR``: the
code before a change) so both sides are measured alike. Two runs of the bench plan for models
fitted on two calibration runs, and the planner's path (its rounds, the configs it tries)
moves with them: ``--replan LABEL`` plans instead in a copy of the folder the run labelled
LABEL left, its calibration trial reused from the journal, so that sides compared (``--source``
or not) plan for the same model. Prints a markdown table and one JSON line per case (the
plan's choice included, to compare before and after).

A case is ``recipe:key=value[:key=value…]`` (``-o`` options; ``hf:`` recipes keep their prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memopt.backends.ort.trials import TrialSpec, run_trial
from memopt.core import parse_runnable
from memopt.recipes import parse_option_value
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings

DEPTHS = (8, 16, 32, 48, 96)  # both families at each: 32 and 96 are the issue's goals' depths
DEFAULT_CASES = ",".join(
    [*(f"gpt:n_layer={depth}" for depth in DEPTHS), *(f"hf:llama:num_hidden_layers={depth}" for depth in DEPTHS)]
)
MiB = 1 << 20

# Runs memopt's CLI in this process and writes its own and its children's rusage to argv[1].
_MEASURED = """
import json, resource, runpy, sys
out = sys.argv[1]
sys.argv = ["memopt", *sys.argv[2:]]
code = 0
try:
    runpy.run_module("memopt", run_name="__main__")
except SystemExit as exit:
    code = exit.code if isinstance(exit.code, int) else 1
own = resource.getrusage(resource.RUSAGE_SELF)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as f:
    json.dump({"code": code, "own_s": own.ru_utime + own.ru_stime, "children_s": children.ru_utime + children.ru_stime,
               "rss_kib": own.ru_maxrss}, f)
sys.exit(code)
"""


def parse_case(item: str) -> tuple[str, dict[str, Any]]:
    parts = item.split(":")
    if parts[0] == "hf":
        parts = [f"hf:{parts[1]}", *parts[2:]]
    recipe, *pairs = parts
    return recipe, {key: parse_option_value(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_case(
    recipe: str, extra: dict[str, Any], args: argparse.Namespace, folder: Path, label: str
) -> dict[str, Any]:
    options: dict[str, Any] = {"size": "tiny", "seq_len": args.seq, **extra}
    # The reference run is kept (journal and its CPU time) across runs of the bench: both sides
    # of a comparison plan for the same budget.
    reference_dir = folder / "reference"
    recorded = folder / "reference_cpu.json"
    before = children_cpu()
    reference = run_trial(
        TrialSpec(RunSettings(target=parse_runnable(recipe), options=options, steps=args.steps), args.batch),
        reference_dir,
        journal=Journal.in_folder(reference_dir),
        resume=recorded.exists(),
    )
    assert reference.ran and reference.memory.peak_bytes, reference.error
    if not recorded.exists():
        recorded.write_text(json.dumps({"cpu_s": children_cpu() - before}))
    reference_cpu = float(json.loads(recorded.read_text())["cpu_s"])
    budget = int(args.fraction * reference.memory.peak_bytes)
    plan_dir = folder / f"plan-{label}"
    shutil.rmtree(plan_dir, ignore_errors=True)
    if args.replan:
        shutil.copytree(folder / f"plan-{args.replan}", plan_dir)
        for written in plan_dir.glob("plan-*.json"):
            written.unlink()
    pairs = [arg for key, value in extra.items() for arg in ("-o", f"{key}={value}")]
    command = [
        *("plan", recipe, "--size", "tiny", "--seq", str(args.seq), *pairs),
        *("--target-batch", str(args.batch), "--budget", f"{budget}B", "--steps", str(args.steps)),
        *("--json", "--runs-dir", str(plan_dir.resolve())),
    ]
    env = dict(os.environ)
    cwd = None
    if args.source:
        env["PYTHONPATH"] = str(args.source.resolve())
        cwd = tempfile.gettempdir()  # not this checkout: its memopt would come first on the path
    with tempfile.NamedTemporaryFile("r", suffix=".json") as usage_file:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURED, usage_file.name, *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            check=False,
        )
        usage = json.loads(Path(usage_file.name).read_text() or "{}")
    if done.returncode not in (0, 3) or not usage:
        raise RuntimeError(f"memopt plan failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    plan = json.loads(done.stdout)
    return {
        "case": f"{recipe} {' '.join(f'{k}={v}' for k, v in extra.items())}",
        "label": label,
        "own_s": usage["own_s"],
        "children_s": usage["children_s"],
        "rss_mib": usage["rss_kib"] / 1024,
        "reference_cpu_s": reference_cpu,
        "reference_wall_s": reference.wall_s,
        "budget": budget,
        "plans": [p["key"] for p in plan.get("plans", [])],
        "predicted_bytes": plan.get("predicted_bytes"),
        "feasible": plan.get("feasible"),
        "max_batch": [plan.get("max_batch_all_plans"), plan.get("max_batch_no_plans")],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="recipe:key=value[:…], comma-separated")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--fraction", type=float, default=0.8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--source", type=Path, default=None, help="run memopt plan from these sources")
    parser.add_argument("--label", default=None, help="names this side in the output (default: this or --source)")
    parser.add_argument("--replan", default=None, help="plan in a copy of the plan folder of the run labelled so")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/bench_planning"))
    args = parser.parse_args()
    label = args.label or (args.source.name if args.source else "this")
    rows = []
    for item in args.cases.split(","):
        recipe, extra = parse_case(item)
        folder = args.runs_dir / item.replace(":", "-").replace("=", "")
        folder.mkdir(parents=True, exist_ok=True)
        rows.append(bench_case(recipe, extra, args, folder, label))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"Command: `{' '.join(shlex.quote(a) for a in ['.venv/bin/python', *sys.argv])}`\n")
    print(
        "| target | code | memopt itself, CPU s | its training runs (probe + calibration), CPU s "
        "| one training run at the target batch, CPU s (wall s) | memopt ÷ one run | memopt's peak RSS MiB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['case']} | {r['label']} | {r['own_s']:.1f} | {r['children_s']:.1f} "
            f"| {r['reference_cpu_s']:.1f} ({r['reference_wall_s']:.1f}) | {100 * r['own_s'] / r['reference_cpu_s']:.0f}% "
            f"| {r['rss_mib']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
