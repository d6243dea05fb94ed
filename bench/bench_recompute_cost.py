"""Does the recompute-cost estimate match what a config adds to a training step?

For each case memopt calibrates as ``memopt plan`` does (one no-config run at half the
batch, its kernels profiled) and estimates each plan's recompute cost at the case's batch.
The measured increase comes from one child process that builds the model under ORTModule
once without a config and once per config (same weights, same batch: ORT reads its config
when a module is built) and runs their steps interleaved: no config, config 1, no config,
config 2, …, the order reversed every round. A config's increase in a round is its step
time less the mean of the no-config steps on either side; the figure is the median over the
rounds. Across separate processes, step time on these shared cores drifts by more than a
whole plan's recompute; inside one round it hits both sides alike.

Every session runs under ORT's profiler, so each config also gets two measurements from
its kernels: the increase in the kernel time of a step (the sum of each node's median
kernel time, config less no config: the recomputed nodes and whatever the config's
execution order changes elsewhere), and the kernel time of the recomputed nodes alone (ORT
names them ``…_recompute``), which resolves even a plan the step time does not. The
profiler's events cost a few microseconds a node (the recomputed ones on the config's side
only).

Table columns: each "error %" compares the estimate with the measurement to its left, the
last one the work-only estimate with the recomputed kernels.

Configs: the planner's at 80, 90 and 95% of the no-config peak and every plan at once, the
cases of ``bench_memory_model``'s grid; ``--each-plan`` adds each plan alone. Reports
estimate vs measured increase per config and the median |estimate − measured| / measured,
and the same for the estimate memopt falls back to where no node time was measured (a
`--cmd` job, CUDA): the graph's work through the calibration step's time.

    .venv/bin/python bench/bench_recompute_cost.py [--cases gpt:tiny:64:128:n_layer=8,…] [--rounds 20] [--each-plan]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_memory_model import DEFAULT_CASES, FRACTIONS, parse_case

from memopt.backends.ort.calibrate import calibrate
from memopt.backends.ort.config import ENV_VAR
from memopt.backends.ort.predict.liveness import RECOMPUTED_SUFFIX
from memopt.backends.ort.predict.planner import DEFAULT_MARGIN, choose_plans
from memopt.backends.ort.target import load_target
from memopt.core import RecipeTarget, parse_runnable, parse_target
from memopt.run import RunSettings

WARMUP_STEPS = 3


def measure(recipe: str, options: dict[str, Any], batch: int, configs: list[list[str]], rounds: int) -> dict[str, Any]:
    """In this process: the no-config median step time; each config's median step-time
    increase over it with that median's standard error, its kernel-time increase and its
    recomputed nodes' kernel time (see the module's doc)."""
    # The raw profiles (the short-lived export sessions' too) and the configs go in here.
    with tempfile.TemporaryDirectory(prefix="memopt-bench-cost-") as scratch:
        return _measure(Path(scratch), recipe, options, batch, configs, rounds)


def _measure(
    scratch: Path,
    recipe: str,
    options: dict[str, Any],
    batch: int,
    configs: list[list[str]],
    rounds: int,
) -> dict[str, Any]:
    from memopt.backends.ort.child import OrtSteps
    from memopt.backends.ort.profile import end_profile, profile_sessions
    from memopt.child.steps import TrainingStep

    target = parse_target(recipe)
    assert isinstance(target, RecipeTarget), f"{recipe} is not a recipe"
    loaded = target.load(options)
    if not profile_sessions(scratch):
        raise RuntimeError("this ORT release's sessions cannot be profiled from memopt")

    def build(entries: list[str]) -> TrainingStep:
        import torch

        torch.manual_seed(0)
        os.environ.pop(ENV_VAR, None)
        if entries:
            path = Path(tempfile.mkdtemp(dir=scratch)) / "config.json"
            path.write_text(json.dumps(entries))
            os.environ[ENV_VAR] = str(path)
        step = TrainingStep(loaded, batch, "cpu", lambda model: OrtSteps().wrap(model, "WARNING", False))
        for _ in range(WARMUP_STEPS):  # the first builds the session, with the config in the environment
            step()
        return step

    baseline, steps = build([]), [build(entries) for entries in configs]

    def timed(step: TrainingStep) -> float:
        started = time.perf_counter()
        step()
        return time.perf_counter() - started

    baseline_times: list[float] = []
    increases: list[list[float]] = [[] for _ in configs]
    for index in range(rounds):
        order = list(range(len(configs)))
        if index % 2:
            order.reverse()
        before = timed(baseline)
        for k in order:
            with_config = timed(steps[k])
            after = timed(baseline)
            increases[k].append(with_config - (before + after) / 2)
            baseline_times.append(after)
            before = after
    baseline_kernels = sum(end_profile(baseline.model).values())
    kernels = [end_profile(step.model) for step in steps]
    if not baseline_kernels or not all(kernels):
        raise RuntimeError("ORT's profiler recorded no kernels for a session")
    return {
        "baseline_s": statistics.median(baseline_times),
        # The median's standard error: 1.2533·σ/√n for roughly normal samples.
        "increases": [
            (statistics.median(values), 1.2533 * statistics.stdev(values) / len(values) ** 0.5) for values in increases
        ],
        "kernel_increases": [sum(seconds.values()) - baseline_kernels for seconds in kernels],
        "recomputed": [
            sum(t for node, t in seconds.items() if node.endswith(RECOMPUTED_SUFFIX)) for seconds in kernels
        ],
    }


def measure_in_child(
    recipe: str, options: dict[str, Any], batch: int, configs: list[list[str]], rounds: int
) -> dict[str, Any]:
    """``measure`` in a fresh process (ORT reads its config from the environment of the process)."""
    request = json.dumps({"recipe": recipe, "options": options, "batch": batch, "configs": configs, "rounds": rounds})
    done = subprocess.run([sys.executable, __file__, "--measure", request], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measuring {recipe} failed: {done.stderr.strip()[-800:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def bench_case(item: str, runs_dir: Path, rounds: int, each_plan: bool) -> list[dict[str, Any]]:
    recipe, size, seq, batch, extra = parse_case(item)
    options: dict[str, Any] = {"size": size, "seq_len": seq, **extra}
    name = f"{recipe.replace(':', '-')}-{size}-s{seq}-b{batch}"
    target = parse_runnable(recipe)
    loaded = load_target(target, options=options, runs_dir=runs_dir / name)  # one graph probe for both estimates
    settings = RunSettings(target=target, options=options, runs_dir=runs_dir / name)
    cal = calibrate(settings, batch, loaded=loaded)
    costs = cal.costs_s
    # The estimate where no node time was measured (a `--cmd` job, CUDA): the same trials, without their node times.
    work_costs = calibrate(settings, batch, loaded=loaded, node_times=False).costs_s
    keys = tuple(p.key for p in cal.model.plans if p.key in costs)
    chosen: dict[tuple[str, ...], str] = {}
    for fraction in FRACTIONS:  # the planner's configs, as in bench_memory_model's grid
        budget = int(fraction * cal.model.baseline(batch))
        plan = choose_plans(cal.model, costs, batch, budget, cal.ort_version, margin=DEFAULT_MARGIN)
        if plan.plans:
            named = " ".join(key.short for key in plan.plans) if len(plan.plans) <= 2 else f"{len(plan.plans)} plans"
            chosen.setdefault(tuple(sorted(plan.plans)), f"planner at {fraction:.0%}: {named}")
    for key in keys if each_plan else ():
        chosen.setdefault((key,), key.short)
    chosen.setdefault(tuple(sorted(keys)), f"all {len(keys)} plans")
    selections = [(what, selection) for selection, what in chosen.items()]
    configs = [[cell for key in selection for cell in key.split(",")] for _, selection in selections]
    measured = measure_in_child(recipe, options, batch, configs, rounds)
    label = f"{recipe} {size} seq {seq} {' '.join(f'{k}={v}' for k, v in extra.items())}".strip()
    rows = []
    for (what, selection), (increase, error), kernels, recomputed in zip(
        selections, measured["increases"], measured["kernel_increases"], measured["recomputed"]
    ):
        rows.append(
            {
                "case": label,
                "batch": batch,
                "config": what,
                "estimate_s": sum(costs[key] for key in selection),
                "work_estimate_s": sum(work_costs[key] for key in selection),
                "measured_s": increase,
                "standard_error_s": error,
                "kernel_increase_s": kernels,
                "recomputed_s": recomputed,
                "step_s": measured["baseline_s"],
            }
        )
    return rows


def _error(estimate: float, measured: float) -> str:
    return f"{100 * (estimate - measured) / measured:+.0f}" if measured > 0 else "-"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | batch | config | estimated s | step increase s | ± s | error % "
        "| kernel increase s | error % | recomputed kernels s | error % | work-only estimate s | error % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        estimate = r["estimate_s"]
        lines.append(
            f"| {r['case']} | {r['batch']} | {r['config']} | {estimate:.4f} | {r['measured_s']:.4f} "
            f"| {r['standard_error_s']:.4f} | {_error(estimate, r['measured_s'])} "
            f"| {r['kernel_increase_s']:.4f} | {_error(estimate, r['kernel_increase_s'])} "
            f"| {r['recomputed_s']:.4f} | {_error(estimate, r['recomputed_s'])} "
            f"| {r['work_estimate_s']:.4f} | {_error(r['work_estimate_s'], r['recomputed_s'])} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """Median relative error against each measurement: the step-time increase over the
    configs it resolves (over twice its standard error) and over every config that measured
    an increase at all; the kernel-time increase; the recomputed nodes' kernel time. Then the
    work-only estimate against the last and the first."""
    resolved = [r for r in rows if r["measured_s"] > 2 * r["standard_error_s"]]
    recomputed = [r for r in rows if r["recomputed_s"] > 0]
    lines = []
    for what, estimate, measured, kept in (
        ("step-time increase, resolved (> 2 standard errors)", "estimate_s", "measured_s", resolved),
        (
            "step-time increase, every config that measured one",
            "estimate_s",
            "measured_s",
            [r for r in rows if r["measured_s"] > 0],
        ),
        ("kernel-time increase", "estimate_s", "kernel_increase_s", [r for r in rows if r["kernel_increase_s"] > 0]),
        ("recomputed nodes' kernel time", "estimate_s", "recomputed_s", recomputed),
        ("work-only estimate, recomputed nodes' kernel time", "work_estimate_s", "recomputed_s", recomputed),
        ("work-only estimate, step-time increase resolved", "work_estimate_s", "measured_s", resolved),
    ):
        if kept:
            error = statistics.median(abs(r[estimate] - r[measured]) / r[measured] for r in kept)
            lines.append(
                f"{what}: median |estimate − measured| {100 * error:.0f}% of the measured ({len(kept)} configs)"
            )
    lines.append(f"{sum(r['measured_s'] <= 0 for r in rows)} of {len(rows)} configs measured no step-time increase")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--each-plan", action="store_true", help="also measure each plan alone")
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child side: a JSON request
    args = parser.parse_args()
    if args.measure:
        request = json.loads(args.measure)
        measured = measure(
            request["recipe"], request["options"], request["batch"], request["configs"], request["rounds"]
        )
        print(json.dumps(measured))
        return
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="memopt-bench-cost-"))
    rows = []
    for item in args.cases.split(","):
        rows.extend(bench_case(item, runs_dir, args.rounds, args.each_plan))
        print(f"{item}: done", file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
