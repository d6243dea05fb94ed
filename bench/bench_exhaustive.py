"""Is the tuner's config as fast as the best one? Every selection of the top plans, measured.

For one case and budget: ``memopt tune --no-tui`` verifies a config; then every non-empty
selection of the K plans the calibrated model ranks highest by saving (and the tuner's own,
if it holds others) runs as a trial at the target batch, which says whether it fits. The
step times of the selections that fit are then measured side by side in one process, paired
with no-config steps (``bench_recompute_cost.measure``): across separate trials, step time
on shared cores drifts by more than these configs differ. The fastest selection that fits is
compared with the tuner's.

    .venv/bin/python bench/bench_exhaustive.py --case gpt:tiny:64:256:n_layer=8 --fraction 0.9 [--top 4] [--steps 6] [--rounds 20]
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import sys
import tempfile
from pathlib import Path

from bench_memory_model import parse_case, tune_case
from bench_recompute_cost import measure_in_child

from memopt.backends.ort.calibrate import calibrate
from memopt.backends.ort.trials import TrialSpec, parse_trial_config, run_trial
from memopt.core import parse_runnable
from memopt.core.trial import TrialResult
from memopt.run import RunSettings
from memopt.run.journal import Journal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, help="recipe:size:seq:batch[:key=value…]")
    parser.add_argument("--fraction", type=float, default=0.9, help="budget as a fraction of the no-config peak")
    parser.add_argument("--top", type=int, default=4, help="plans (by simulated saving) to combine")
    parser.add_argument("--steps", type=int, default=6, help="steps per trial, the warm-up included")
    parser.add_argument("--rounds", type=int, default=20, help="paired step-time rounds")
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="memopt-exhaustive-"))
    recipe, size, seq, batch, extra = parse_case(args.case)
    options = {"size": size, "seq_len": seq, **extra}
    reference = runs_dir / "exhaustive"
    journal = Journal.in_folder(reference)

    settings = RunSettings(
        target=parse_runnable(recipe), options=options, steps=args.steps, runs_dir=runs_dir / "model"
    )
    calibration = calibrate(settings, batch)
    model, version = calibration.model, calibration.ort_version

    def trial(plans: tuple[str, ...], budget: int | None = None) -> TrialResult:
        entries = parse_trial_config(",".join(plans), version).entries
        spec = TrialSpec(settings, batch, entries)
        return run_trial(spec, reference, journal=journal, resume=True, budget_bytes=budget)

    baseline = trial(())
    assert baseline.memory.peak_bytes, baseline.error
    budget = int(args.fraction * baseline.memory.peak_bytes)
    tuned = tune_case(recipe, size, seq, batch, extra, runs_dir, args.steps, budget)
    ranked = sorted(model.plans, key=lambda p: -model.raw_saving(p.key, batch))[: args.top]
    selections = [
        tuple(p.key for p in chosen)
        for count in range(1, len(ranked) + 1)
        for chosen in itertools.combinations(ranked, count)
    ]
    tuned_plans = tuple(tuned["plans"])
    if tuned_plans and tuned_plans not in selections:
        selections.append(tuned_plans)
    mib = 2**20
    print(f"Command: `{' '.join(shlex.quote(a) for a in ['.venv/bin/python', *sys.argv])}`\n")
    print(
        f"budget {budget / mib:.1f} MiB ({args.fraction:.0%} of {baseline.memory.peak_bytes / mib:.1f} MiB); tuner: {tuned}\n"
    )
    print("| plans | peak MiB | fits | median step s |")
    print("|---|---|---|---|")
    measured = {}
    for plans in selections:
        result = trial(plans, budget)
        measured[plans] = result
        fits = result.memory.peak_bytes is not None and 0 < result.memory.peak_bytes <= budget
        step = f"{result.median_step_s:.3f}" if result.median_step_s else "-"
        peak = f"{result.memory.peak_bytes / mib:.1f}" if result.memory.peak_bytes else "-"
        print(f"| {' '.join(plans)} | {peak} | {'yes' if fits else 'NO'} | {step} |", flush=True)
    fitting = [p for p, r in measured.items() if r.memory.peak_bytes is not None and 0 < r.memory.peak_bytes <= budget]
    if not fitting or tuned_plans not in fitting:
        print(
            "\nno comparison: " + ("nothing fits" if not fitting else "the tuner's config is not among those that fit")
        )
        return 0
    configs = [[cell for key in plans for cell in key.split(",")] for plans in fitting]
    paired = measure_in_child(recipe, options, batch, configs, args.rounds)
    base = paired["baseline_s"]
    step_s = {plans: base + increase for plans, (increase, _) in zip(fitting, paired["increases"])}
    print(f"\nside by side ({args.rounds} rounds, no config {base:.3f} s):\n")
    print("| plans | step s | increase s | ± s |")
    print("|---|---|---|---|")
    for plans, (increase, error) in zip(fitting, paired["increases"]):
        print(f"| {' '.join(plans)} | {step_s[plans]:.3f} | {increase:+.4f} | {error:.4f} |")
    best = min(fitting, key=lambda p: step_s[p])
    ratio = step_s[tuned_plans] / step_s[best]
    print(
        f"\nfastest that fits: {' '.join(best)} ({step_s[best]:.3f} s); "
        f"the tuner's: {' '.join(tuned_plans)} ({step_s[tuned_plans]:.3f} s), {100 * (ratio - 1):+.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
