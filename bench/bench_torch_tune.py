"""The torch back end's tune on a small grid: predicted against measured peak, runs to an answer.

For each case: one run without recompute at the target batch (its peak P0), then
``tune_torch`` with the budget at a fraction of P0. Prints a Markdown table: the no-recompute
peak, the budget, the chosen policy, its predicted and measured peak, the error (measured less
predicted, over measured), whether it fits, and the training runs tune needed.

    python bench/bench_torch_tune.py            # CPU; about 10 minutes on 2 busy cores
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from memopt.backends.torch.trial import run_torch_trial
from memopt.backends.torch.tune import tune_torch
from memopt.core import parse_target
from memopt.recompute import RecomputePolicy
from memopt.run.budget import Budget
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings
from memopt.units import format_bytes

ROOT = Path(__file__).resolve().parent.parent
CASES = [  # (target, options, batch, budget as a fraction of the no-recompute peak)
    (str(ROOT / "examples" / "train_plain_torch.py"), {}, 256, 0.8),
    ("gpt", {"size": "tiny", "seq_len": 64, "n_layer": 8}, 256, 0.85),
    ("bert", {"size": "tiny", "seq_len": 64, "n_layer": 8}, 256, 0.85),
]


def main() -> None:
    print("| target | batch | no recompute | budget | policy | predicted | measured | error | fits | runs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec, options, batch, fraction in CASES:
        runs = Path(tempfile.mkdtemp(prefix="bench-torch-"))
        settings = RunSettings(target=parse_target(spec), options=options, device="cpu", runs_dir=runs)
        plain = run_torch_trial(settings, batch, RecomputePolicy(()), journal=Journal.in_folder(runs))
        if plain.peak_bytes is None:
            sys.exit(f"{spec}: the run without recompute failed: {plain.error}")
        budget = int(plain.peak_bytes * fraction)
        result = tune_torch(
            settings, batch, Budget(f"{budget}B", bytes=budget), margin=0.02, resume=False, say=lambda line: None
        )
        measured = result.verify.peak_bytes if result.verify is not None else None
        error = f"{(measured - result.predicted_bytes) / measured:+.1%}" if measured else "-"
        name = Path(spec).name if spec.endswith(".py") else f"{spec} {options}"
        print(
            f"| {name} | {batch} | {format_bytes(plain.peak_bytes)} | {format_bytes(budget)} | `{result.policy}` "
            f"| {format_bytes(int(result.predicted_bytes))} | {format_bytes(measured) if measured else '-'} | {error} "
            f"| {'yes' if result.verified else 'no'} | {len(result.trials)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
