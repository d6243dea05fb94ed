"""The one interface every training back end implements (``memopt.backends.ort``,
``memopt.backends.torch``); the commands, the orchestration and the child process reach a back
end only through it, by its ``BackendName`` (``memopt.backends.backend_for``).

A back end's modules are imported on first use, inside its methods: asking the torch back end
for anything loads nothing of ORT's path, and the reverse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memopt.core.backend import BackendName

if TYPE_CHECKING:
    from memopt.child.steps import StepsBackend
    from memopt.core.target import Target
    from memopt.run.budget import Budget
    from memopt.run.settings import RunSettings
    from memopt.tune.events import TuneEvent
    from memopt.tune.session import TuningSession
    from memopt.tune.settings import TuneSettings

__all__ = [
    "Backend",
    "OrtScanOptions",
    "PlanReport",
    "PlanRequest",
    "Progress",
    "ScanRequest",
    "TorchScanOptions",
    "TrialReport",
    "TrialRequest",
]


class Progress(Protocol):
    """How a back end's command work tells the person running it where it is (the command's view)."""

    def checked(self) -> None:
        """The request passed the back end's checks: the command's first line, its back end, goes out.
        Bad input is refused before it, with one error line."""
        ...

    def say(self, line: str) -> None:
        """One line of progress."""
        ...

    def warn(self, line: str) -> None:
        """A warning: the work goes on."""
        ...

    def result_kept(self) -> AbstractContextManager[object]:
        """Keeps stdout for the command's result while the block runs (libraries' C code prints there)."""
        ...

    def working(self, what: str) -> AbstractContextManager[object]:
        """Shows ``what`` while the block runs."""
        ...

    def interpreter(self, target: Target, batch: int) -> str | None:
        """Says what a run of ``target`` at ``batch`` will not do as asked; the interpreter to run it with."""
        ...


@dataclass(frozen=True)
class OrtScanOptions:
    """What only ORT's scan reads."""

    seq: int | None = None  # the sequence length savings are evaluated at (second dim of token inputs)
    target_seq: int | None = None  # the decoder's, where it differs (default ``seq``)
    dims: Mapping[str, int] = field(default_factory=dict)  # exact dim values by the graph's names
    ort_version: str | None = None  # the release whose rules apply (None: the graph's, else the installed one)
    basic: bool = False  # probe level Basic (cheap ops only) instead of ORTModule's Advanced
    layerwise: bool = False  # analyse with transformer layer boundaries, as ORTMODULE_MEMORY_OPT_LEVEL=1/2
    loss: str = "outside"  # a forward-only ONNX file's loss: outside, cross-entropy or mse


@dataclass(frozen=True)
class TorchScanOptions:
    """What only the torch back end's scan reads."""

    fake: bool = False  # capture a recipe's step on fake tensors (no memory; recompute times not measured)


@dataclass(frozen=True)
class ScanRequest:
    """``memopt scan``: the activations a training step keeps for backward, grouped into its back
    end's recompute plans, with their savings."""

    target: Target
    options: Mapping[str, Any]  # a recipe's keyword options
    batch: int | None  # the batch savings are evaluated at (None: the back end's own)
    probe_batch: int  # the batch of the short run that builds or captures the step
    runs_dir: Path
    ort: OrtScanOptions = field(default_factory=OrtScanOptions)
    torch: TorchScanOptions = field(default_factory=TorchScanOptions)


@dataclass(frozen=True)
class TrialRequest:
    """``memopt trial``: one config at one batch size, run as a user would, journaled."""

    settings: RunSettings
    batch: int
    config: str  # as the user gave it, in the back end's syntax (``none``: no recompute)
    budget: Budget | None
    resume: bool  # reuse a finished trial of the journal with the same key


@dataclass(frozen=True)
class PlanRequest:
    """``memopt plan``: the cheapest recompute predicted to fit, written where a job reads it."""

    settings: TuneSettings  # the target batch, budget, margin, resume and the back end's own section
    verify: bool  # run the answer once at the target batch
    out: Path | None  # where the answer goes (None: in the runs folder)
    force: bool  # replace ``out`` if it is a regular file


class PlanReport(Protocol):
    """A plan's answer, as its back end reports it."""

    @property
    def fits(self) -> bool:
        """Predicted to fit (and, where it was run, measured to)."""
        ...

    def summary(self) -> dict[str, Any]:
        """The answer for ``--json``."""
        ...


class TrialReport(Protocol):
    """What a trial found, as its back end reports it."""

    def record(self) -> dict[str, Any]:
        """The journal's record of the trial (``--json``)."""
        ...


class Backend(Protocol):
    """A training back end: where it runs, its child's steps, its tuning session."""

    @property
    def name(self) -> BackendName: ...

    @property
    def label(self) -> str:
        """What it trains with, as a person names it (``ORTModule``, ``plain PyTorch``)."""
        ...

    def problem_here(self) -> str | None:
        """Why this back end cannot train with this interpreter's stack (None: it can)."""
        ...

    def prepare(self) -> None:
        """Load, in this process, what must come before a command's options are checked."""
        ...

    def child_steps(self) -> StepsBackend:
        """Its part in the child process's measured steps (the model as it trains)."""
        ...

    def scan(self, request: ScanRequest, progress: Progress) -> object:
        """The target's recompute plans and their savings (a report its command prints)."""
        ...

    def plan(self, request: PlanRequest, progress: Progress) -> PlanReport:
        """The plan predicted to fit at least cost, written where a job reads it (``verify``: run once)."""
        ...

    def trial(self, request: TrialRequest, progress: Progress) -> TrialReport:
        """One trial: its config checked, run, journaled (and learnt from, where the back end keeps a model)."""
        ...

    def tuning_session(
        self, settings: TuneSettings, progress: Progress, on_event: Callable[[TuneEvent], None] | None = None
    ) -> TuningSession:
        """The session that tunes ``settings`` (the TUI's and ``--no-tui``'s alike), after the
        checks that refuse what it cannot run here (a missing stack, a budget the device lacks)."""
        ...
