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

Configs: each plan alone, and every plan at once. Reports estimate vs measured increase per
config and the median |estimate − measured| / measured.

    .venv/bin/python bench/bench_recompute_cost.py [--cases gpt:tiny:64:128:n_layer=8,…] [--rounds 20]
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

from bench_memory_model import FRACTIONS, parse_case

from memopt.ort.config import ENV_VAR, short_key
from memopt.predict.calibrate import calibrate
from memopt.predict.planner import DEFAULT_MARGIN, choose_plans

DEFAULT_CASES = "gpt:tiny:64:128:n_layer=8,bert:tiny:64:128:n_layer=8,hf:llama:tiny:64:32:num_hidden_layers=8"
WARMUP_STEPS = 3


def measure(recipe: str, options: dict[str, Any], batch: int, configs: list[list[str]], rounds: int) -> dict[str, Any]:
    """In this process: the no-config median step time, and each config's median step-time
    increase over it with that median's standard error (see the module's doc)."""
    from onnxruntime.training.ortmodule import DebugOptions, LogLevel

    from memopt.child.steps import TrainingStep
    from memopt.recipes import load_recipe

    loaded = load_recipe(recipe, options)

    def build(entries: list[str]) -> TrainingStep:
        import torch

        torch.manual_seed(0)
        os.environ.pop(ENV_VAR, None)
        if entries:
            path = Path(tempfile.mkdtemp()) / "config.json"
            path.write_text(json.dumps(entries))
            os.environ[ENV_VAR] = str(path)
        step = TrainingStep(loaded, batch, "cpu", DebugOptions(log_level=LogLevel.WARNING))
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
    return {
        "baseline_s": statistics.median(baseline_times),
        # The median's standard error: 1.2533·σ/√n for roughly normal samples.
        "increases": [
            (statistics.median(values), 1.2533 * statistics.stdev(values) / len(values) ** 0.5) for values in increases
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


def bench_case(item: str, runs_dir: Path, rounds: int) -> list[dict[str, Any]]:
    recipe, size, seq, batch, extra = parse_case(item)
    options: dict[str, Any] = {"size": size, "seq_len": seq, **extra}
    name = f"{recipe.replace(':', '-')}-{size}-s{seq}-b{batch}"
    cal = calibrate(recipe, batch, options=options, runs_dir=runs_dir / name)
    costs = cal.costs_s
    keys = tuple(p.key for p in cal.model.plans if p.key in costs)
    chosen: dict[tuple[str, ...], str] = {}
    for fraction in FRACTIONS:  # the planner's configs, as in bench_memory_model's grid
        budget = int(fraction * cal.model.baseline(batch))
        plan = choose_plans(cal.model, costs, batch, budget, cal.ort_version, margin=DEFAULT_MARGIN)
        if plan.plans:
            named = (
                " ".join(short_key(key) for key in plan.plans) if len(plan.plans) <= 2 else f"{len(plan.plans)} plans"
            )
            chosen.setdefault(tuple(sorted(plan.plans)), f"planner at {fraction:.0%}: {named}")
    for key in keys:
        chosen.setdefault((key,), short_key(key))
    chosen.setdefault(tuple(sorted(keys)), f"all {len(keys)} plans")
    selections = [(what, selection) for selection, what in chosen.items()]
    configs = [[cell for key in selection for cell in key.split(",")] for _, selection in selections]
    measured = measure_in_child(recipe, options, batch, configs, rounds)
    label = f"{recipe} {size} seq {seq} {' '.join(f'{k}={v}' for k, v in extra.items())}".strip()
    rows = []
    for (what, selection), (increase, error) in zip(selections, measured["increases"]):
        rows.append(
            {
                "case": label,
                "batch": batch,
                "config": what,
                "estimate_s": sum(costs[key] for key in selection),
                "measured_s": increase,
                "standard_error_s": error,
                "step_s": measured["baseline_s"],
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | batch | config | estimated s | measured increase s | ± s | error % |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        error = f"{100 * (r['estimate_s'] - r['measured_s']) / r['measured_s']:+.0f}" if r["measured_s"] > 0 else "-"
        lines.append(
            f"| {r['case']} | {r['batch']} | {r['config']} | {r['estimate_s']:.4f} | {r['measured_s']:.4f} "
            f"| {r['standard_error_s']:.4f} | {error} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """Median relative error over the configs whose increase the measurement resolves (over
    twice its standard error), and over every config that measured an increase at all."""
    lines = []
    for what, kept in (
        ("resolved (increase > 2 standard errors)", [r for r in rows if r["measured_s"] > 2 * r["standard_error_s"]]),
        ("every config that measured an increase", [r for r in rows if r["measured_s"] > 0]),
        ("the planner's configs", [r for r in rows if r["config"].startswith("planner") and r["measured_s"] > 0]),
    ):
        if kept:
            error = statistics.median(abs(r["estimate_s"] - r["measured_s"]) / r["measured_s"] for r in kept)
            lines.append(
                f"{what}: median |estimate − measured| {100 * error:.0f}% of the measured ({len(kept)} configs)"
            )
    lines.append(f"{sum(r['measured_s'] <= 0 for r in rows)} of {len(rows)} configs measured no increase")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--rounds", type=int, default=20)
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
        rows.extend(bench_case(item, runs_dir, args.rounds))
        print(f"{item}: done", file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
