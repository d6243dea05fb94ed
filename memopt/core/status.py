"""How a run ended, one word that the child, the run folder, the journal and every view share."""

from __future__ import annotations

from enum import Enum

__all__ = ["RunStatus"]


class RunStatus(str, Enum):
    """A run's own status (the child's result file, a command's steps). A ``str`` so JSON
    and journal records keep the plain word; ``RunStatus(word)`` reads one back."""

    RUNNING = "running"  # the child has started and not yet written its end
    OK = "ok"
    STACK_ERROR = "stack_error"  # the ORT training stack cannot run
    RECIPE_ERROR = "recipe_error"  # the recipe or the command is broken: no config can run
    STEP_ERROR = "step_error"  # a training step failed for another reason than memory
    OUT_OF_MEMORY = "out_of_memory"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def ran(self) -> bool:
        """The run worked: its training steps ran to the end. The one test of that; whether it
        also fits a budget is the trial's verdict (``Outcome.fits``)."""
        return self is RunStatus.OK

    @property
    def fatal(self) -> bool:
        """No other config can run either: the target or the ORT stack is broken."""
        return self in (RunStatus.RECIPE_ERROR, RunStatus.STACK_ERROR)

    @property
    def printed_plans(self) -> bool:
        """ORT got as far as its Plan table (a step ran or failed inside ORT)."""
        return self in (RunStatus.OK, RunStatus.OUT_OF_MEMORY, RunStatus.STEP_ERROR)

    def failure(self, noun: str) -> str:
        """What went wrong, in a few words; ``noun`` names the target ("recipe", "training command")."""
        if self is RunStatus.RECIPE_ERROR:
            return f"the {noun} failed" if noun == "training command" else f"the {noun} is broken"
        return _FAILURES.get(self, str(self))

    @classmethod
    def read(cls, word: object) -> RunStatus:
        """A status read from a file: an unknown or missing word is a crash."""
        try:
            return cls(word)
        except ValueError:
            return cls.CRASHED


_FAILURES = {
    RunStatus.STACK_ERROR: "the ORT training stack cannot run",
    RunStatus.STEP_ERROR: "the training step failed",
    RunStatus.OUT_OF_MEMORY: "out of memory",
    RunStatus.CRASHED: "the run crashed",
    RunStatus.TIMED_OUT: "the run timed out",
    RunStatus.CANCELLED: "the run was cancelled",
}
