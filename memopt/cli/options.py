"""Options several commands share: one type each (typer ``Annotated``), one default each,
and the helpers that turn them into library values."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from memopt.errors import MemoptError
from memopt.recipes import parse_option_value
from memopt.run import check_device

__all__ = [
    "BudgetOption",
    "CalibrateOption",
    "DeviceOption",
    "MarginOption",
    "OptionPairs",
    "PythonOption",
    "RecipeArgument",
    "RunsDirOption",
    "SeqOption",
    "SizeOption",
    "StepsOption",
    "TargetBatchOption",
    "TimeoutOption",
    "calibration_batches",
    "check_device",
    "recipe_options",
]

RecipeArgument = Annotated[
    str, typer.Argument(help="Built-in recipe (gpt, bert, mlp, cnn), a .py file or package.module[:attr].")
]
TargetBatchOption = Annotated[int, typer.Option("--target-batch", help="The batch size to fit.")]
BudgetOption = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Peak memory allowed: 2.5GiB, 2500MB or 80% (of the GPU; on CPU of RAM). "
        "Required on CPU; on CUDA the default is the GPU's memory less 10%.",
    ),
]
SeqOption = Annotated[int | None, typer.Option("--seq", min=1, help="Sequence length (recipes with a seq_len option).")]
SizeOption = Annotated[str | None, typer.Option("--size", help="Model size of a built-in recipe, e.g. tiny, small.")]
OptionPairs = Annotated[list[str], typer.Option("--option", "-o", help="Recipe option key=value (repeatable).")]
StepsOption = Annotated[
    int,
    typer.Option(
        "--steps",
        help="Measured steps per run after the warm-up step. Keep 2 or more: some plans lower "
        "only the first measured step's peak.",
    ),
]
DeviceOption = Annotated[str, typer.Option("--device", help="auto (CUDA when ORT and torch have it), cpu or cuda.")]
MarginOption = Annotated[float, typer.Option("--margin", help="Fraction of the budget held back for prediction error.")]
CalibrateOption = Annotated[
    str | None,
    typer.Option(
        "--calibrate",
        help="Batch sizes of the no-config calibration trials, e.g. 2,4 (default: target/8 and target/4).",
    ),
]
RunsDirOption = Annotated[
    Path, typer.Option("--runs-dir", help="Where run folders, the journal (journal.jsonl) and config files go.")
]
PythonOption = Annotated[
    str | None, typer.Option("--python", help="Interpreter whose ORT/torch stack runs the model (default: this one).")
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds before a run is killed.")]


def recipe_options(seq: int | None, size: str | None, pairs: list[str]) -> dict[str, Any]:
    """``--seq``/``--size`` and ``-o key=value`` pairs as recipe keyword options."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise MemoptError(f"--option must look like key=value, not {pair!r}")
        options[key.strip()] = parse_option_value(value.strip())
    if seq is not None:
        options["seq_len"] = seq
    if size is not None:
        options["size"] = size
    return options


def calibration_batches(text: str | None) -> tuple[int, ...] | None:
    """``--calibrate 8`` or ``2,4``: the batch sizes of the no-config calibration trials."""
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise MemoptError(f"--calibrate takes batch sizes like 8 or 2,4, not {text!r}") from None
    if not values or min(values) < 1:
        raise MemoptError(f"--calibrate needs one or more positive batch sizes, not {text!r}")
    return values
