"""The one interface every training back end implements (``memopt.backends.ort``,
``memopt.backends.torch``); the commands, the orchestration and the child process reach a back
end only through it, by its ``BackendName`` (``memopt.backends.backend_for``).

A back end's modules are imported on first use, inside its methods: asking the torch back end
for anything loads nothing of ORT's path, and the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from memopt.core.backend import BackendName

if TYPE_CHECKING:
    from memopt.child.steps import StepsBackend
    from memopt.tune.events import TuneEvent
    from memopt.tune.session import TuningSession
    from memopt.tune.settings import TuneSettings

__all__ = ["Backend"]


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

    def tuning_session(
        self, settings: TuneSettings, on_event: Callable[[TuneEvent], None] | None = None
    ) -> TuningSession:
        """The session that tunes ``settings`` (the TUI's and ``--no-tui``'s alike), after the
        checks that refuse what it cannot run here (a missing stack, a budget the device lacks)."""
        ...
