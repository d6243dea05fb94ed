"""Memory-model accuracy on built-in recipes: predicted vs measured peak, real ORTModule trials.

For each recipe: a graph probe and the scan give the plans; no-config trials at two small
batches fit the model; it then predicts (a) no-config peaks at larger batches, (b) the
peak with the top plans on (effectiveness 1.0, before any calibration) and (c) after
recalibrating on that trial, the peak with the same plans at a larger batch. Each
prediction is checked against a real trial. Prints a markdown table and the median error.

    .venv/bin/python bench/bench_memory_model.py [--recipes gpt:tiny,mlp:tiny] [--runs-dir DIR]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from memopt.ort import plan_config_entries
from memopt.predict.calibrate import calibrate
from memopt.predict.memory_model import Observation
from memopt.run.trials import TrialSpec, run_trial


def bench(recipe: str, size: str, runs_dir: Path, fit: tuple[int, int], checks: tuple[int, int]) -> list[dict]:
    options = {"size": size}
    cal = calibrate(recipe, checks[-1], options=options, runs_dir=runs_dir, calibration_batches=fit, steps=2)
    model = cal.model
    rows = []

    def check(batch: int, plans: tuple[str, ...], label: str) -> float:
        predicted = model.predict(batch, plans).peak_bytes
        trial = run_trial(
            TrialSpec(
                recipe, batch, options, plan_config_entries(p.key for p in model.plans if p.key in plans), steps=2
            ),
            runs_dir,
            predicted_peak_bytes=int(predicted),
        )
        assert trial.ran, trial.error
        measured = trial.peak_bytes
        dynamic = measured - model.static_bytes
        rows.append(
            {
                "recipe": f"{recipe} {size}",
                "batch": batch,
                "case": label,
                "plans": len(plans),
                "predicted_MiB": predicted / 2**20,
                "measured_MiB": measured / 2**20,
                "error_pct": 100 * (predicted - measured) / measured,
                "error_of_dynamic_pct": 100 * (predicted - measured) / dynamic if dynamic > 0 else float("nan"),
                "trial_wall_s": trial.wall_s,
            }
        )
        return measured

    for batch in checks:
        check(batch, (), "no config")
    top = tuple(p.key for p in sorted(model.plans, key=lambda p: -model.raw_saving(p.key, checks[0]))[:3])
    measured = check(checks[0], top, "top-3 plans, uncalibrated")
    model = model.with_observation(Observation(checks[0], top, measured))
    check(checks[1], top, "top-3 plans, recalibrated")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="gpt:tiny,mlp:tiny,bert:tiny")
    parser.add_argument("--fit", default="2,4")
    parser.add_argument("--checks", default="8,16")
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="memopt-bench-"))
    fit = tuple(int(x) for x in args.fit.split(","))
    checks = tuple(int(x) for x in args.checks.split(","))
    rows = []
    for item in args.recipes.split(","):
        recipe, _, size = item.partition(":")
        rows += bench(recipe, size or "tiny", runs_dir, fit, checks)
    print(
        f"Command: `{' '.join(shlex.quote(a) for a in [sys.executable.replace(str(Path.cwd()) + '/', ''), *sys.argv])}`\n"
    )
    print("| recipe | batch | case | plans | predicted MiB | measured MiB | error % | error % of dynamic part |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['recipe']} | {r['batch']} | {r['case']} | {r['plans']} | {r['predicted_MiB']:.1f} | "
            f"{r['measured_MiB']:.1f} | {r['error_pct']:+.2f} | {r['error_of_dynamic_pct']:+.1f} |"
        )
    errors = [abs(r["error_pct"]) for r in rows]
    print(
        f"\nmedian |error| {statistics.median(errors):.2f}% (max {max(errors):.2f}%) over {len(rows)} predictions; "
        f"median trial {statistics.median(r['trial_wall_s'] for r in rows):.1f} s wall; runs in {runs_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
