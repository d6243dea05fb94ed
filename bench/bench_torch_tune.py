"""The torch back end's tune on a grid: predicted against measured peak, runs to an answer.

For each case: one run without recompute at the target batch (its peak P0), then
``tune_torch`` with the budget at each fraction of P0 (the cases of one model share its probes
through the journal). Prints a Markdown table: the no-recompute peak, the budget, the chosen
policy, its predicted and measured peak, the error ((predicted - measured) / measured, as
memopt prints every prediction error: negative, the run peaked above it), whether it fits, and
the training runs tune needed; then the median error, the largest under-prediction and the
share verified on the first verifying run.

    python bench/bench_torch_tune.py                 # tiny models; about 10 minutes on 2 busy cores
    python bench/bench_torch_tune.py --grid base     # GPT-2-small and BERT-base shapes; about an hour
    python bench/bench_torch_tune.py --case "cmd:python train.py --batch-size {batch}" --batch 128 --fraction 0.8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from memopt.backends.torch.trial import run_torch_trial
from memopt.backends.torch.tune import tune_torch
from memopt.core import parse_target, runnable
from memopt.recompute import RecomputePolicy
from memopt.run.budget import Budget
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings
from memopt.units import format_bytes, format_mib

ROOT = Path(__file__).resolve().parent.parent
Case = tuple[str, dict[str, object], int, tuple[float, ...]]  # target, options, batch, budgets as fractions
GRIDS: dict[str, list[Case]] = {  # budgets are fractions of the no-recompute peak
    "tiny": [
        (str(ROOT / "examples" / "train_plain_torch.py"), {}, 256, (0.8,)),
        ("gpt", {"size": "tiny", "seq_len": 64, "n_layer": 8}, 256, (0.85,)),
        ("bert", {"size": "tiny", "seq_len": 64, "n_layer": 8}, 256, (0.85,)),
    ],
    "base": [  # width 768, 12 layers, vocabularies of 50,257 and 30,522 tokens, rows of 512 and 256
        ("gpt", {"size": "small", "seq_len": 512}, 4, (0.85, 0.7)),
        ("bert", {"size": "base", "seq_len": 256}, 8, (0.85, 0.7)),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="tiny")
    parser.add_argument("--case", help="one target instead of a grid: a recipe, hf: config or cmd: command")
    parser.add_argument("--batch", type=int, default=128, help="--case's target batch")
    parser.add_argument("--fraction", type=float, nargs="+", default=[0.8], help="--case's budgets")
    args = parser.parse_args()
    grid = [(args.case, {}, args.batch, tuple(args.fraction))] if args.case else GRIDS[args.grid]
    print(
        "| target | batch | no recompute | budget | policy | predicted | room kept | measured | under the limit | error | fits | runs |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    errors: list[float] = []
    first_try = 0
    for spec, options, batch, fractions in grid:
        runs = Path(tempfile.mkdtemp(prefix="bench-torch-"))
        settings = RunSettings(target=runnable(parse_target(spec)), options=options, device="cpu", runs_dir=runs)
        plain = run_torch_trial(settings, batch, RecomputePolicy(()), journal=Journal.in_folder(runs))
        plain_peak = plain.memory.device_peak
        if plain_peak is None:
            sys.exit(f"{spec}: the run without recompute failed: {plain.error}")
        for fraction in fractions:
            budget = int(plain_peak * fraction)
            result = tune_torch(
                settings, batch, Budget(f"{budget}B", bytes=budget), margin=0.02, resume=True, say=lambda line: None
            )
            measured = result.verify.memory.device_peak if result.verify is not None else None
            if measured:
                errors.append((result.predicted_bytes - measured) / measured)
            verifying = [t for t in result.trials if t.batch_size == batch and not t.reused]
            first_try += result.verified and len(verifying) == 1
            error = f"{errors[-1]:+.1%}" if measured else "-"
            name = Path(spec).name if spec.endswith(".py") else f"{spec} {options}"
            print(
                f"| {name} | {batch} | {format_bytes(plain_peak)} | {format_bytes(budget)} | `{result.policy}` "
                f"| {format_bytes(int(result.predicted_bytes))} | {format_mib(result.kept_room_bytes)} "
                f"| {format_bytes(measured) if measured else '-'} "
                f"| {format_mib(result.limit_bytes - measured) if measured else '-'} | {error} "
                f"| {'yes' if result.verified else 'no'} | {len(result.trials)} |",
                flush=True,
            )
    cases = sum(len(case[3]) for case in grid)
    print(
        f"\nmedian |error| {statistics.median(abs(e) for e in errors):.1%}; largest over-prediction of the peak "
        f"{max(errors):+.1%}, largest under-prediction {min(errors):+.1%}; "
        f"verified on the first verifying run: {first_try} of {cases}"
    )


if __name__ == "__main__":
    main()
