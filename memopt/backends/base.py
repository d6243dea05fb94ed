"""The one interface every training back end implements (``memopt.backends.ort``,
``memopt.backends.torch``); the commands, the orchestration and the child process reach a back
end only through it, by its ``BackendName`` (``memopt.backends.backend_for``).

A back end's modules are imported on first use, inside its methods: asking the torch back end
for anything loads nothing of ORT's path, and the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memopt.core.backend import BackendName

if TYPE_CHECKING:
    from memopt.child.steps import StepsBackend
    from memopt.run.budget import Budget
    from memopt.run.settings import RunSettings
    from memopt.tune.events import TuneEvent
    from memopt.tune.session import TuningSession
    from memopt.tune.settings import TuneSettings

__all__ = ["Backend", "PlanReport", "PlanRequest", "Progress", "TrialReport", "TrialRequest"]


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
