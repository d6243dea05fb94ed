"""memopt's plain-PyTorch peak model against real training steps on a GPU.

    python3 bench/gpu/check_plain_torch.py --out "$OUT"

The torch back end's tune predicts a step's peak at the target batch from a line through two
runs without recompute (a quarter and a half of the target batch) less what a policy's plans
save there (``memopt.backends.torch.predict``, the scan's savings). This script does exactly
that for a recipe (``examples/train_plain_torch.py`` by default), then measures the target
batch without recompute and under three policies (the whole-module plan that saves most, every
op plan, the op plan that saves most), each run in memopt's own child process
(``python -m memopt.child``, as ``memopt trial --backend torch`` runs it). On CUDA each figure
is predicted and measured separately: ``max_memory_allocated``, ``max_memory_reserved``, and
reserved + outside the allocator (what memopt judges a CUDA run on: what runs out on the card).

``--device cpu`` runs the same on this machine's CPU, where the one figure is the process's peak
RSS: the CPU self-test (``tests/gpu/test_gpu_check.py``) and nothing more: it says nothing of CUDA.

Writes ``plain_torch_check.json`` and ``plain_torch_check.md`` (a table for BENCHMARKS.md) under
``--out``; exits 1 where a run failed. Imports torch and, of memopt, the scan, the peak model,
the recipes and the child (no onnx, onnxruntime, pydantic, textual, scipy or psutil), so it runs
on a device image that has torch and numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from memopt.backends.torch.predict import PeakLine, policy_saving, probe_batches  # noqa: E402
from memopt.backends.torch.scan import TorchScan, scan_recipe  # noqa: E402
from memopt.child import PARENT_PID_VAR, TIMEOUT_VAR, ChildRequest  # noqa: E402
from memopt.recipes import load_recipe, parse_option_value  # noqa: E402
from memopt.recompute import POLICY_ENV, RecomputePolicy  # noqa: E402

RUN_TIMEOUT_S = 300
SCAN_BATCH = 2
# The figures of a run, by device: what the child's step report names each.
FIGURES: dict[str, dict[str, tuple[str, ...]]] = {
    "cuda": {
        "allocated": ("peak_bytes",),
        "reserved": ("cuda_reserved_bytes",),
        "reserved + outside": ("cuda_reserved_bytes", "cuda_outside_bytes"),
    },
    "cpu": {"rss": ("peak_bytes",)},
}


@dataclass(frozen=True)
class Run:
    batch: int
    policy: str
    status: str
    figures: dict[str, int]  # figure name -> bytes (empty where the run failed)
    step_s: float | None
    error: str | None


@dataclass(frozen=True)
class Row:
    policy: str
    figure: str
    predicted_bytes: float
    measured_bytes: int

    @property
    def error(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def policies(scanned: TorchScan, batch: int) -> dict[str, RecomputePolicy]:
    """No recompute, the whole-module plan that saves most, every op plan, and the op plan that saves most."""
    ops = [row.plan for row in scanned.rows if not row.plan.whole_module]
    regions = [row.plan for row in scanned.rows if row.plan.whole_module]
    chosen = {"no recompute": RecomputePolicy(())}
    if regions:
        best = max(regions, key=lambda plan: policy_saving(RecomputePolicy((plan,)), scanned, batch))
        chosen[str(best)] = RecomputePolicy((best,))
    if ops:
        chosen["every op plan"] = RecomputePolicy(tuple(ops))
        best_op = max(ops, key=lambda plan: policy_saving(RecomputePolicy((plan,)), scanned, batch))
        chosen[str(best_op)] = RecomputePolicy((best_op,))
    return chosen


def run(
    spec: str,
    options: dict[str, Any],
    batch: int,
    name: str,
    policy: RecomputePolicy,
    device: str,
    steps: int,
    scratch: Path,
) -> Run:
    """One training run in memopt's child process, with ``policy`` where the user's script finds it."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    policy.write(folder / "recompute-policy.json")
    request = ChildRequest(
        spec, batch, steps, device, log_level="WARNING", save_onnx=False, options=options, backend="torch"
    )
    (folder / "request.json").write_text(json.dumps(asdict(request)))
    env = {
        **os.environ,
        # The child's watchdog: it ends itself when this script is gone or the run is past its time.
        PARENT_PID_VAR: str(os.getpid()),
        TIMEOUT_VAR: str(RUN_TIMEOUT_S),
        POLICY_ENV: str(folder / "recompute-policy.json"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    command = [sys.executable, "-m", "memopt.child", str(folder / "request.json"), str(folder / "result.json")]
    with open(folder / "child.log", "w") as log:
        try:
            subprocess.run(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # killed by subprocess.run; the runs before it still make the report
            return Run(batch, name, "timed_out", {}, None, f"no result after {RUN_TIMEOUT_S} s")
    written = folder / "result.json"  # the child writes it first thing: absent, it died on start
    result: dict[str, Any] = json.loads(written.read_text()) if written.exists() else {"status": "crashed"}
    report: dict[str, Any] = result.get("steps") or {}
    figures: dict[str, int] = {}
    if result.get("status") == "ok":
        for figure, fields in FIGURES[device].items():
            if all(report.get(field) is not None for field in fields):
                figures[figure] = sum(report[field] for field in fields)
    times = report.get("step_times_s") or []
    error = result.get("error") or (None if figures else (folder / "child.log").read_text()[-2000:])
    return Run(batch, name, str(result.get("status")), figures, statistics.median(times) if times else None, error)


def predicted_rows(
    scanned: TorchScan, chosen: dict[str, RecomputePolicy], target: int, probes: tuple[Run, Run], measured: list[Run]
) -> list[Row]:
    """Each figure of each run at the target batch against the peak model's prediction of it."""
    rows = []
    for figure in probes[0].figures:
        line = PeakLine(probes[0].batch, probes[0].figures[figure], probes[1].batch, probes[1].figures[figure])
        for done in measured:
            if figure not in done.figures:
                continue
            predicted = line.at(target) - policy_saving(chosen[done.policy], scanned, target)
            rows.append(Row(done.policy, figure, predicted, done.figures[figure]))
    return rows


def report(rows: list[Row], runs: list[Run], facts: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plain_torch_check.json").write_text(
        json.dumps(
            {
                "device": facts,
                "runs": [asdict(r) for r in runs],
                "rows": [{**asdict(r), "error": r.error} for r in rows],
            },
            indent=1,
        )
    )
    mib = 1 << 20
    lines = [
        f"Device: {facts['name']}, torch {facts['torch']}, CUDA {facts['cuda']}; recipe {facts['recipe']}, "
        f"target batch {facts['target_batch']}, probes at {facts['probes']}; "
        f"`{facts['command']}`, {facts['seconds']:.0f} s.",
        "",
        "| policy | figure | predicted (MiB) | measured (MiB) | error |",
        "| --- | --- | ---: | ---: | ---: |",
        *(
            f"| {r.policy} | {r.figure} | {r.predicted_bytes / mib:,.1f} | {r.measured_bytes / mib:,.1f} | {r.error:+.1%} |"
            for r in rows
        ),
    ]
    failed = [r for r in runs if not r.figures]
    if failed:
        lines += ["", *(f"Run failed: batch {r.batch}, {r.policy}: {r.status}: {r.error}" for r in failed)]
    for figure in dict.fromkeys(r.figure for r in rows):
        errors = [abs(r.error) for r in rows if r.figure == figure]
        lines.append(f"\n{figure}: median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%}.")
    (out / "plain_torch_check.md").write_text("\n".join(lines) + "\n")


def device_facts(device: str) -> dict[str, Any]:
    import torch

    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (self-test: no CUDA figure)"
    return {"name": name, "torch": torch.__version__, "cuda": torch.version.cuda}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--recipe", default=str(ROOT / "examples" / "train_plain_torch.py"))
    parser.add_argument("--target-batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("-o", dest="options", action="append", default=[], metavar="KEY=VALUE", help="a recipe option")
    args = parser.parse_args()
    options = {key: parse_option_value(value) for key, _, value in (o.partition("=") for o in args.options)}
    started = time.monotonic()
    recipe = load_recipe(args.recipe, options)
    print(f"scanning {args.recipe} at batch {SCAN_BATCH}", flush=True)
    scanned = scan_recipe(recipe, SCAN_BATCH)
    chosen = policies(scanned, args.target_batch)
    small, larger = probe_batches(args.target_batch)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as scratch:
        planned = [(small, "no recompute"), (larger, "no recompute")]
        planned += [(args.target_batch, name) for name in chosen]
        for batch, name in planned:
            done = run(args.recipe, options, batch, name, chosen[name], args.device, args.steps, Path(scratch))
            runs.append(done)
            figures = ", ".join(f"{k} {v / (1 << 20):,.1f} MiB" for k, v in done.figures.items()) or done.status
            print(f"batch {batch}, {name}: {figures}", flush=True)
    probes, measured = (runs[0], runs[1]), runs[2:]
    rows = (
        predicted_rows(scanned, chosen, args.target_batch, probes, measured) if all(p.figures for p in probes) else []
    )
    facts = {
        **device_facts(args.device),
        "recipe": " ".join([Path(args.recipe).name, *(f"-o {o}" for o in args.options)]),
        "target_batch": args.target_batch,
        "probes": [small, larger],
        "seconds": time.monotonic() - started,
        "command": shlex.join(["python3", "bench/gpu/check_plain_torch.py", *sys.argv[1:]]),
    }
    report(rows, runs, facts, args.out)
    print((args.out / "plain_torch_check.md").read_text())
    sys.exit(0 if all(r.figures for r in runs) else 1)


if __name__ == "__main__":
    main()
