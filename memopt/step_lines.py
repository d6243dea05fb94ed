"""The line each process of a run prints as a training step ends: written by memopt's child and
a job's start-up hook, read back from the run's log (``memopt.backends.ort.logparse``). Standard library
only, so that the hook inside a user's job stays light."""

from __future__ import annotations

import re

__all__ = ["WARM_UP_DONE", "step_line"]


def step_line(rank: int, step: int, steps: int, seconds: float) -> str:
    """The line each process of a run prints to stderr as a training step ends, in memopt's
    child and in a job's hook alike: ``[memopt] rank 0 step 1/3: 0.812 s``."""
    return f"[memopt] rank {rank} step {step}/{steps}: {seconds:.3f} s"


# A ``step_line`` of step 1: the warm-up step, during which ORT builds its training session
# and prints its Plan table, ended here. A table in the log after it is not the session's.
WARM_UP_DONE = re.compile(r"\[memopt\] rank \d+ step 1/\d+: ")
