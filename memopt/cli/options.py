"""Options several commands share: one type each (typer ``Annotated``), one default each,
and the helpers that turn them into library values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from memopt.backends.ort.trials import inherited_config_note
from memopt.cli import error_console
from memopt.core import Command, HfConfig, RecipeTarget, RunnableTarget, Target, command_target, parse_target
from memopt.errors import MemoptError
from memopt.recipes import DEFAULT_RECIPE, parse_option_value
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S, RunSettings, check_count, check_options

__all__ = [
    "BudgetOption",
    "CalibrateOption",
    "CommandOption",
    "DeviceOption",
    "HfTaskOption",
    "MarginOption",
    "OptionPairs",
    "PythonOption",
    "OptionalRecipeArgument",
    "RecipeArgument",
    "RunsDirOption",
    "SeqOption",
    "SizeOption",
    "StepsOption",
    "TargetSeqOption",
    "TargetBatchOption",
    "TimeoutOption",
    "BackendOption",
    "BatchOption",
    "RunOptions",
    "TargetOptions",
    "calibration_batches",
    "checked_count",
    "choose_target",
    "command_notes",
    "run_settings",
]


def checked_count(value: int | None, param: typer.CallbackParam) -> int | None:
    """A size or count option (a batch, a sequence length, a number of steps or trials),
    refused while the command line is read when out of range: below 1 or beyond 64 bits."""
    if value is not None:
        check_count(value, param.opts[0])
    return value


RecipeArgument = Annotated[
    str,
    typer.Argument(
        help="Built-in recipe (gpt, bert, mlp, cnn), a .py file, package.module[:attr], or a Hugging Face "
        "model: hf:NAME (gpt2, llama, bert, t5, qwen2) or hf:PATH (a config.json or its folder)."
    ),
]
OptionalRecipeArgument = Annotated[
    str | None,
    typer.Argument(
        help="Built-in recipe (gpt, bert, mlp, cnn), a .py file, package.module[:attr], or a Hugging Face "
        f"model: hf:NAME (gpt2, llama, bert, t5, qwen2) or hf:PATH (probe and tune default to {DEFAULT_RECIPE}; or --cmd).",
        show_default=False,
    ),
]
CommandOption = Annotated[
    str | None,
    typer.Option(
        "--cmd",
        help="Your own training command instead of a recipe, run as is in this folder, e.g. "
        "'torchrun --nproc_per_node 2 train.py --batch-size {batch}' ({batch}: memopt sets the batch size).",
    ),
]
BatchOption = Annotated[int, typer.Option("--batch", "-b", callback=checked_count, help="Batch size.")]
TargetBatchOption = Annotated[
    int, typer.Option("--target-batch", callback=checked_count, help="The batch size to fit.")
]
BudgetOption = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Peak memory allowed: 2.5GiB, 2500MB or 80% (of the GPU; on CPU of RAM). "
        "Default: 90% of the device's memory (on CPU the RAM, or the memory cgroup's limit where lower).",
    ),
]
SeqOption = Annotated[
    int | None, typer.Option("--seq", callback=checked_count, help="Sequence length (recipes with a seq_len option).")
]
SizeOption = Annotated[str | None, typer.Option("--size", help="Model size of a built-in recipe, e.g. tiny, small.")]
OptionPairs = Annotated[
    list[str], typer.Option("--option", "-o", help="Recipe option key=value; for hf: a config field (repeatable).")
]
HfTaskOption = Annotated[
    str | None,
    typer.Option(
        "--hf-task",
        help="hf: targets whose config names no architecture: causal-lm, masked-lm, seq2seq, sequence-classification or image-classification.",
    ),
]
TargetSeqOption = Annotated[
    int | None,
    typer.Option(
        "--target-seq",
        callback=checked_count,
        help="Target sequence length: hf: seq2seq decoder labels; in scan, the second dim of labels/decoder_* inputs (default --seq).",
    ),
]
StepsOption = Annotated[
    int,
    typer.Option(
        "--steps",
        callback=checked_count,
        help="Measured steps per run after the warm-up step. Keep 2 or more: some plans lower "
        "only the first measured step's peak.",
    ),
]
DeviceOption = Annotated[str, typer.Option("--device", help="auto (CUDA when ORT and torch have it), cpu or cuda.")]


def checked_margin(value: float) -> float:
    """``--margin``, refused while the command line is read unless a fraction of the budget in [0, 1)."""
    if not 0 <= value < 1:
        raise MemoptError(f"--margin must be a fraction in [0, 1), not {value:g}")
    return value


MarginOption = Annotated[
    float,
    typer.Option("--margin", callback=checked_margin, help="Fraction of the budget held back for prediction error."),
]
CalibrateOption = Annotated[
    str | None,
    typer.Option(
        "--calibrate",
        help="ORT: batch sizes of the no-config calibration trials, e.g. 2,4 (default: half the target batch).",
    ),
]


def _checked_runs_dir(path: Path) -> Path:
    """``--runs-dir`` naming a file is refused before anything runs."""
    if path.exists() and not path.is_dir():
        raise MemoptError(f"--runs-dir {path} is a file, not a folder")
    return path


RunsDirOption = Annotated[
    Path,
    typer.Option(
        "--runs-dir",
        callback=_checked_runs_dir,
        help="Where run folders, the journal (journal.jsonl) and config files go.",
    ),
]
PythonOption = Annotated[
    str | None, typer.Option("--python", help="Interpreter whose ORT/torch stack runs the model (default: this one).")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Seconds before a run is killed (a finite number above zero).")
]


def choose_target(recipe: str | None, command: str | None, default: str | None = DEFAULT_RECIPE) -> Target:
    """The target of a command: a recipe (or graph file), or ``--cmd`` as a command target."""
    if command is not None:
        if recipe is not None:
            raise MemoptError(f"give a recipe ({recipe}) or --cmd, not both")
        return command_target(command)
    if recipe is not None:
        return parse_target(recipe)
    if default is None:
        raise MemoptError("name a recipe, or give your own training command with --cmd")
    return parse_target(default)


def command_notes(target: Target, python: str | None, batch: int, *, shell_config_applies: bool = False) -> str | None:
    """Say what a run of ``target`` will not do as asked; the interpreter whose ORT/torch stack to ask.
    ``shell_config_applies``: the run uses a memory-optimizer config the shell sets (a probe)."""
    notes = [None if shell_config_applies else inherited_config_note()]
    if target.fixed_batch:
        notes.append(f"the command has no {{batch}}: every run uses its own batch size, taken to be {batch}")
    for note in notes:
        if note is not None:
            error_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return python or (target.python() if isinstance(target, Command) else None)


@dataclass(frozen=True)
class TargetOptions:
    """``--seq``, ``--size``, ``-o key=value``, ``--hf-task`` and ``--target-seq`` as given:
    what becomes the recipe's keyword options (``options_for``)."""

    seq: int | None = None
    size: str | None = None
    pairs: Sequence[str] = ()
    hf_task: str | None = None
    target_seq: int | None = None

    def options_for(self, target: Target) -> dict[str, Any]:
        """The recipe's keyword options; an ``hf:`` target's config is checked here, before any run."""
        options: dict[str, Any] = {}
        for pair in self.pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip().isidentifier():
                raise MemoptError(f"--option must look like key=value, not {pair!r}")
            options[key.strip()] = parse_option_value(value.strip())
        if self.seq is not None:
            options["seq_len"] = self.seq
        if self.size is not None:
            options["size"] = self.size
        hf_only: tuple[tuple[str, str, str | int | None], ...] = (
            ("--hf-task", "hf_task", self.hf_task),
            ("--target-seq", "target_seq", self.target_seq),
        )
        for flag, name, given in hf_only:
            if given is not None:
                if not isinstance(target, HfConfig):
                    raise MemoptError(f"{flag} applies to hf: targets, not to {target}")
                options[name] = given
        check_options(target, options)
        if not isinstance(target, RecipeTarget):
            return options
        for note in target.check(options):
            error_console.print(f"note: {target}: {note}", markup=False, highlight=False, soft_wrap=True)
        return options


@dataclass(frozen=True)
class RunOptions:
    """``--steps``, ``--device``, ``--timeout``, ``--python`` and ``--runs-dir`` as given; ``run_settings``
    makes them a ``RunSettings``, which checks each."""

    steps: int = DEFAULT_STEPS
    device: str = "auto"
    timeout: float = DEFAULT_TIMEOUT_S
    python: str | None = None
    runs_dir: Path = DEFAULT_RUNS_DIR


def run_settings(
    target: RunnableTarget,
    batch: int,
    given: TargetOptions,
    run: RunOptions,
    *,
    shell_config_applies: bool = False,
) -> RunSettings:
    """The runs a command asks for: its recipe options checked and its notes said (see
    ``command_notes``, at ``batch``), every setting checked once by ``RunSettings``."""
    return RunSettings(
        target=target,
        options=given.options_for(target),
        steps=run.steps,
        device=run.device,
        timeout_s=run.timeout,
        python=command_notes(target, run.python, batch, shell_config_applies=shell_config_applies),
        runs_dir=run.runs_dir,
    )


def calibration_batches(text: str | None) -> tuple[int, ...] | None:
    """``--calibrate 8`` or ``2,4``: the batch sizes of the no-config calibration trials."""
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise MemoptError(f"--calibrate takes batch sizes like 8 or 2,4, not {text!r}") from None
    if not values:
        raise MemoptError(f"--calibrate needs one or more positive batch sizes, not {text!r}")
    for value in values:
        check_count(value, "--calibrate")
    return values


BackendOption = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="ort (ORTModule) or torch (plain PyTorch with memopt.recompute); default: ort where ORTModule can run, else torch.",
    ),
]
