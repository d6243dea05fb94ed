"""Does the first answer fit? The planner's config, then a real trial with it, over a grid.

For each recipe and batch: a no-config trial measures the peak the budgets are cut from
(80%, 90%, 95% of it); memopt calibrates as ``memopt plan`` does (one no-config run at half
the batch, the graph's liveness simulation for the rest), picks a config per budget
without verifying it, and a real trial with that config says whether it fits. Reports the
fit rate, the overrun, the prediction error (of the peak and of its activation part: peak
less the calibrated fixed part) and the recompute-cost estimate against the measured
step-time increase (medians of the measured steps).

    .venv/bin/python bench/bench_memory_model.py [--cases gpt:tiny:64:256,gpt:tiny:64:512] [--runs-dir DIR]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from memopt.predict.calibrate import calibrate
from memopt.predict.planner import DEFAULT_MARGIN, choose_plans
from memopt.run.journal import Journal
from memopt.run.trials import TrialSpec, run_trial

FRACTIONS = (0.80, 0.90, 0.95)
DEFAULT_CASES = "gpt:tiny:64:256,gpt:tiny:64:512,bert:tiny:64:256,bert:tiny:64:512"


def bench_case(recipe: str, size: str, seq: int, batch: int, runs_dir: Path, steps: int) -> list[dict[str, Any]]:
    options: dict[str, Any] = {"size": size, "seq_len": seq}
    journal = Journal.in_folder(runs_dir)
    baseline = run_trial(TrialSpec(recipe, batch, options, (), steps), runs_dir, journal=journal, resume=True)
    assert baseline.ran and baseline.peak_bytes, baseline.error
    cal = calibrate(recipe, batch, options=options, runs_dir=runs_dir, steps=steps)
    model = cal.model
    rows = []
    no_config = model.baseline(batch)
    rows.append(_row(recipe, size, seq, batch, "no config", None, no_config, baseline, model.static_bytes, 0.0, None))
    for fraction in FRACTIONS:
        budget = int(fraction * baseline.peak_bytes)
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
            TrialSpec(recipe, batch, options, plan.entries, steps),
            runs_dir,
            journal=journal,
            budget_bytes=budget,
            predicted_peak_bytes=int(plan.predicted_bytes),
            resume=True,
        )
        assert trial.ran and trial.peak_bytes, trial.error
        extra = (trial.median_step_s or 0.0) - (baseline.median_step_s or 0.0)
        label = f"{fraction:.0%} budget: {len(plan.plans)} plans" + ("" if plan.feasible else " (predicted not to fit)")
        rows.append(
            _row(
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
                extra,
            )
        )
    return rows


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
    measured = float(trial.peak_bytes)
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
    parser.add_argument("--cases", default=DEFAULT_CASES, help="recipe:size:seq:batch, comma-separated")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="memopt-bench-"))
    rows = []
    for item in args.cases.split(","):
        recipe, size, seq, batch = item.split(":")
        rows += bench_case(recipe, size, int(seq), int(batch), runs_dir, args.steps)
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
    print(
        f"\nfits {fits}/{len(planned)} ({100 * fits / len(planned):.0f}%), worst {worst:+.2f}% of the budget; "
        f"median |error| {statistics.median(errors):.2f}% of the measured peak, "
        f"{statistics.median(activation_errors):.1f}% of its activation part over {len(rows)} trials"
    )
    if costed:
        ratio = statistics.median(abs(r["cost_s"] - r["extra_s"]) / r["extra_s"] for r in costed)
        print(
            f"recompute cost: median |estimate − measured extra step time| {100 * ratio:.0f}% of the measured ({len(costed)} trials)"
        )
    print(f"median trial {statistics.median(r['wall_s'] for r in rows):.1f} s wall; runs in {runs_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
