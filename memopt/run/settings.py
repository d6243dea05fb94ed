"""The settings every run of a target shares, each declared once: defaults, and the checks
that refuse a bad value before anything runs, with one wording whichever command takes it."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memopt.core import Command, RunnableTarget, Target
from memopt.errors import MemoptError

__all__ = [
    "DEFAULT_RUNS_DIR",
    "DEFAULT_STEPS",
    "DEFAULT_TIMEOUT_S",
    "DEVICES",
    "MAX_COUNT",
    "RunSettings",
    "check_batch",
    "check_count",
    "check_device",
    "check_options",
    "check_steps",
    "check_timeout",
]

# Measured steps per run after the warm-up step. Two or more: some plans lower only the
# first measured step's peak, so a single step can hide what a config does.
DEFAULT_STEPS = 2
DEFAULT_TIMEOUT_S = 1800.0  # a run's time limit unless --timeout says otherwise
DEFAULT_RUNS_DIR = Path("runs")  # where run folders go unless --runs-dir says otherwise
DEVICES = ("auto", "cpu", "cuda")  # auto: CUDA where ORT and torch have it, else CPU
# The most a size or a count may be: torch's and ORT's sizes are 64-bit integers, so a
# larger batch or sequence could never be built (and would be reported as not fitting).
MAX_COUNT = 2**63 - 1


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How every run of one target goes, as ``probe``, ``trial``, ``plan`` and ``tune`` take it
    from the command line; each value checked here, once. A run (``RunRequest``), a trial
    (``TrialSpec``) and a tuning session (``TuneSettings``) hold one, with what is their own."""

    target: RunnableTarget
    options: Mapping[str, Any] = field(default_factory=dict)  # a recipe's; a command takes none
    steps: int = DEFAULT_STEPS
    device: str = "auto"  # a recipe's; a command picks its own
    timeout_s: float = DEFAULT_TIMEOUT_S
    python: str | None = None  # the interpreter whose ORT/torch stack runs it (None: this one)
    runs_dir: Path = DEFAULT_RUNS_DIR

    def __post_init__(self) -> None:
        check_steps(self.steps)
        check_device(self.device)
        check_timeout(self.timeout_s)
        check_options(self.target, self.options)

    @property
    def interpreter(self) -> str:
        """The interpreter a run starts: ``python``, else this one."""
        return self.python or sys.executable


def check_options(target: Target, options: Mapping[str, Any]) -> None:
    """Recipe options go to a recipe: a command takes its own on its command line."""
    if isinstance(target, Command) and options:
        raise MemoptError("recipe options (--size, --seq, -o) do not apply to a command: put them in the command")


def check_count(value: int, flag: str) -> None:
    """A size or count the user gave (``flag`` names it): a whole number from 1 to ``MAX_COUNT``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MemoptError(f"{flag} must be a positive integer, not {value}")
    if value > MAX_COUNT:
        raise MemoptError(f"{flag} {value} is out of range: at most {MAX_COUNT:,} (sizes are 64-bit integers)")


def check_batch(batch_size: int, flag: str = "--batch") -> None:
    check_count(batch_size, flag)


def check_steps(steps: int) -> None:
    check_count(steps, "--steps")


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise MemoptError(f"--device must be auto, cpu or cuda, not {device!r}")


def check_timeout(timeout_s: float) -> None:
    """A run's time limit: a finite number of seconds above zero (NaN and infinity disable nothing)."""
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise MemoptError(f"--timeout must be a finite number of seconds above zero, not {timeout_s}")
