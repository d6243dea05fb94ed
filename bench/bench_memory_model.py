"""Does the first answer fit? The planner's config, then a real trial with it, over a grid.

For each recipe and batch: a no-config trial measures the peak the budgets are cut from
(80%, 90%, 95% of it); memopt calibrates as ``memopt plan`` does (one no-config run at half
the batch, the graph's liveness simulation for the rest), picks a config per budget
without verifying it, and a real trial with that config says whether it fits. Reports the
fit rate, the overrun, the prediction error (of the peak and of its activation part: peak
less the calibrated fixed part) and the recompute-cost estimate against the step-time
difference between the trials (medians of the measured steps; noisy across processes,
``bench_recompute_cost.py`` measures the increase side by side).

    .venv/bin/python bench/bench_memory_model.py [--cases gpt:tiny:64:256:n_layer=8,…] [--tune] [--runs-dir DIR]

A case is ``recipe:size:seq:batch[:key=value…]`` (``-o`` options). The reference trials run
in a folder of their own, so the model never sees them. ``--tune`` also runs ``memopt tune
--no-tui`` per case and budget and reports the training runs and wall time to a verified
config.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memopt.backends.ort.calibrate import calibrate
from memopt.backends.ort.predict.planner import DEFAULT_MARGIN, choose_plans
from memopt.backends.ort.trials import TrialSpec, run_trial
from memopt.core import parse_runnable
from memopt.recipes import parse_option_value
from memopt.run import RunSettings
from memopt.run.journal import Journal

FRACTIONS = (0.80, 0.90, 0.95)
DEFAULT_CASES = (
    "gpt:tiny:64:128:n_layer=8,gpt:tiny:64:256:n_layer=8,"
    "bert:tiny:64:128:n_layer=8,bert:tiny:64:256:n_layer=8,"
    "hf:llama:tiny:64:32:num_hidden_layers=8,hf:llama:tiny:64:128:num_hidden_layers=8"
)


def parse_case(item: str) -> tuple[str, str, int, int, dict[str, Any]]:
    """``recipe:size:seq:batch[:key=value…]``; an ``hf:`` recipe keeps its prefix."""
    parts = item.split(":")
    if parts[0] == "hf":
        parts = [f"hf:{parts[1]}", *parts[2:]]
    recipe, size, seq, batch, *pairs = parts
    extra = {key: parse_option_value(value) for key, value in (pair.split("=", 1) for pair in pairs)}
    return recipe, size, int(seq), int(batch), extra


def bench_case(
    recipe: str, size: str, seq: int, batch: int, extra: dict[str, Any], runs_dir: Path, steps: int
) -> list[dict[str, Any]]:
    options: dict[str, Any] = {"size": size, "seq_len": seq, **extra}
    name = f"{recipe.replace(':', '-')}-{size}-s{seq}-b{batch}"
    reference_dir = runs_dir / f"{name}-reference"  # the measured truth, out of the model's sight
    model_dir = runs_dir / f"{name}-model"
    journal = Journal.in_folder(reference_dir)
    runs = RunSettings(target=parse_runnable(recipe), options=options, steps=steps, runs_dir=model_dir)
    baseline = run_trial(TrialSpec(runs, batch), reference_dir, journal=journal, resume=True)
    assert baseline.ran and baseline.memory.peak_bytes, baseline.error
    cal = calibrate(runs, batch)
    model = cal.model
    rows: list[dict[str, Any]] = []
    no_config = model.baseline(batch)
    rows.append(_row(recipe, size, seq, batch, "no config", None, no_config, baseline, model.static_bytes, 0.0, None))
    for fraction in FRACTIONS:
        budget = int(fraction * baseline.memory.whole_run_peak)
        plan = choose_plans(
            model,
            cal.costs_s,
            batch,
            budget,
            cal.ort_version,
            margin=DEFAULT_MARGIN,
            baseline_step_s=cal.baseline_step_s,
        )
        trial = run_trial(
            TrialSpec(runs, batch, plan.entries),
            reference_dir,
            journal=journal,
            budget_bytes=budget,
            predicted_peak_bytes=int(plan.predicted_bytes),
            resume=True,
        )
        assert trial.ran and trial.memory.peak_bytes, trial.error
        extra_s = (trial.median_step_s or 0.0) - (baseline.median_step_s or 0.0)
        label = f"{fraction:.0%} budget: {len(plan.plans)} plans" + ("" if plan.feasible else " (predicted not to fit)")
        row = _row(
            recipe,
            size,
            seq,
            batch,
            label,
            budget,
            plan.predicted_bytes,
            trial,
            model.static_bytes,
            plan.cost_s,
            extra_s,
        )
        rows.append({**row, "fraction": fraction})
    label = f"{recipe} {size} seq {seq} {' '.join(f'{k}={v}' for k, v in extra.items())}".strip()
    return [{**row, "case": label} for row in rows]


def tune_case(
    recipe: str, size: str, seq: int, batch: int, extra: dict[str, Any], runs_dir: Path, steps: int, budget: int
) -> dict[str, Any]:
    """``memopt tune --no-tui --json`` in a folder of its own: its training runs (the graph probe
    excluded) and wall time to a verified config."""
    folder = runs_dir / f"tune-{recipe.replace(':', '-')}-{size}-s{seq}-b{batch}-{budget}"
    pairs = [arg for key, value in extra.items() for arg in ("-o", f"{key}={value}")]
    command = [
        *(sys.executable, "-m", "memopt", "tune", recipe, "--size", size, "--seq", str(seq), *pairs),
        *("--target-batch", str(batch), "--budget", f"{budget}B", "--steps", str(steps)),
        *("--no-tui", "--json", "--resume", "--runs-dir", str(folder)),
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode not in (0, 3):
        raise RuntimeError(f"tune failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    summary = json.loads(done.stdout)
    trials = [t for t in summary["trials"] if t["outcome"] != "cancelled"]
    first_fit = next(
        (
            i + 1
            for i, t in enumerate(trials)
            if t["batch_size"] == batch and t["outcome"] == "ok" and t["peak_bytes"] and t["peak_bytes"] <= budget
        ),
        None,
    )
    best = summary["best"]
    return {
        "case": f"{recipe} {size} seq {seq} {' '.join(f'{k}={v}' for k, v in extra.items())}".strip(),
        "batch": batch,
        "budget": budget,
        "status": summary["status"],
        "runs": len(trials),
        "runs_to_fit": first_fit,
        "wall_s": wall,
        "plans": best["plans"] if best else [],
        "peak": best["peak_bytes"] if best else None,
        "step_s": best["median_step_s"] if best else None,
        "errors": [
            100 * (t["predicted_bytes"] - t["peak_bytes"]) / t["peak_bytes"]
            for t in trials
            if t["predicted_bytes"] and t["peak_bytes"]
        ],
    }


def _row(
    recipe: str,
    size: str,
    seq: int,
    batch: int,
    label: str,
    budget: int | None,
    predicted: float,
    trial: Any,
    fixed: float,
    cost_s: float,
    extra_s: float | None,
) -> dict[str, Any]:
    measured = float(trial.memory.whole_run_peak)  # start-up included: what a hard limit meets
    return {
        "case": f"{recipe} {size} seq {seq}",
        "batch": batch,
        "label": label,
        "budget": budget,
        "predicted": predicted,
        "measured": measured,
        "error_pct": 100 * (predicted - measured) / measured,
        "error_activation_pct": 100 * (predicted - measured) / (measured - fixed) if measured > fixed else float("nan"),
        "over_pct": 100 * (measured - budget) / budget if budget else None,
        "cost_s": cost_s,
        "extra_s": extra_s,
        "wall_s": trial.wall_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="recipe:size:seq:batch[:key=value…], comma-separated")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tune", action="store_true", help="also run memopt tune per case and budget")
    parser.add_argument(
        "--tune-at",
        type=lambda text: {float(f) for f in text.split(",")},
        default=None,
        help="with --tune, only these budget fractions, comma-separated (e.g. 0.9)",
    )
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="memopt-bench-"))
    rows = []
    tuned = []
    for item in args.cases.split(","):
        case = parse_case(item)
        case_rows = bench_case(*case, runs_dir, args.steps)
        rows += case_rows
        if args.tune:
            for row in case_rows:
                if row["budget"] is not None and (args.tune_at is None or row["fraction"] in args.tune_at):
                    tuned.append(tune_case(*case, runs_dir, args.steps, row["budget"]))
                    print(json.dumps(tuned[-1]), file=sys.stderr, flush=True)
    mib = 2**20
    print(f"Command: `{' '.join(shlex.quote(a) for a in ['.venv/bin/python', *sys.argv])}`\n")
    print(
        "| case | batch | config | budget MiB | predicted MiB | measured MiB | fits | over % | error % | error % of activations | est. cost s | measured extra s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        budget = f"{r['budget'] / mib:.1f}" if r["budget"] else "-"
        fits = "-" if r["budget"] is None else "yes" if r["measured"] <= r["budget"] else "NO"
        over = "-" if r["over_pct"] is None else f"{r['over_pct']:+.2f}"
        extra = "-" if r["extra_s"] is None else f"{r['extra_s']:.3f}"
        print(
            f"| {r['case']} | {r['batch']} | {r['label']} | {budget} | {r['predicted'] / mib:.1f} | "
            f"{r['measured'] / mib:.1f} | {fits} | {over} | {r['error_pct']:+.2f} | {r['error_activation_pct']:+.1f} | "
            f"{r['cost_s']:.3f} | {extra} |"
        )
    planned = [r for r in rows if r["budget"] is not None]
    fits = sum(r["measured"] <= r["budget"] for r in planned)
    worst = max(r["over_pct"] for r in planned)
    errors = [abs(r["error_pct"]) for r in rows]
    activation_errors = [
        abs(r["error_activation_pct"]) for r in rows if r["error_activation_pct"] == r["error_activation_pct"]
    ]
    costed = [r for r in planned if r["cost_s"] > 0 and r["extra_s"] is not None and r["extra_s"] > 0]
    chosen = [r for r in planned if "predicted not to fit" not in r["label"]]
    refused = [r for r in planned if "predicted not to fit" in r["label"]]
    print(
        f"\nwhere the planner chose a config: fits {sum(r['measured'] <= r['budget'] for r in chosen)}/{len(chosen)},"
        f" worst {max((r['over_pct'] for r in chosen), default=0.0):+.2f}% of the budget; predicted not to fit:"
        f" {len(refused)}, every plan at once measured over the budget in"
        f" {sum(r['measured'] > r['budget'] for r in refused)}"
    )
    right = sum(r["measured"] <= r["budget"] for r in chosen) + sum(r["measured"] > r["budget"] for r in refused)
    print(
        f"first answer right (a config that fits, or out of reach where every plan at once is over):"
        f" {right}/{len(planned)} ({100 * right / len(planned):.0f}%)"
    )
    print(
        f"fits {fits}/{len(planned)} ({100 * fits / len(planned):.0f}%), worst {worst:+.2f}% of the budget; "
        f"median |error| {statistics.median(errors):.2f}% of the measured peak, "
        f"{statistics.median(activation_errors):.1f}% of its activation part over {len(rows)} trials"
    )
    if costed:
        ratio = statistics.median(abs(r["cost_s"] - r["extra_s"]) / r["extra_s"] for r in costed)
        print(
            f"recompute cost: median |estimate − extra step time across separate trials| {100 * ratio:.0f}% of the measured"
            f" ({len(costed)} trials; step time drifts more between processes than these configs add:"
            " bench_recompute_cost.py measures the increase side by side)"
        )
    print(f"median trial {statistics.median(r['wall_s'] for r in rows):.1f} s wall; runs in {runs_dir}")
    if tuned:
        _print_tuned(tuned)
    return 0


def _print_tuned(tuned: list[dict[str, Any]]) -> None:
    mib = 2**20
    print(
        "\n| case | batch | budget MiB | status | training runs | first fitting run | wall s | final plans | peak MiB |"
        " prediction errors % |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in tuned:
        peak = f"{t['peak'] / mib:.1f}" if t["peak"] else "-"
        errors = ", ".join(f"{e:+.1f}" for e in t["errors"]) or "-"
        print(
            f"| {t['case']} | {t['batch']} | {t['budget'] / mib:.1f} | {t['status']} | {t['runs']} | "
            f"{t['runs_to_fit'] or '-'} | "
            f"{t['wall_s']:.0f} | {len(t['plans'])} | {peak} | {errors} |"
        )
    verified = [t for t in tuned if t["status"] == "verified"]
    print(
        f"\nverified {len(verified)}/{len(tuned)}; median training runs {statistics.median(t['runs'] for t in tuned):g}"
        f" ({statistics.median(t['runs'] for t in verified):g} where a config was verified), to the first fitting"
        f" trial {statistics.median(t['runs_to_fit'] or t['runs'] for t in tuned):g} (calibration included, the"
        f" graph probe not), median wall {statistics.median(t['wall_s'] for t in tuned):.0f} s"
        if verified
        else f"\nverified 0/{len(tuned)}"
    )


if __name__ == "__main__":
    sys.exit(main())
