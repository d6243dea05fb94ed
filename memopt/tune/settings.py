"""What a tuning session is asked to do, checked once; the errors a session raises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memopt.core import RunnableTarget
from memopt.errors import MemoptError
from memopt.predict import DEFAULT_MARGIN
from memopt.run import (
    DEFAULT_RUNS_DIR,
    DEFAULT_STEPS,
    DEFAULT_TIMEOUT_S,
    Budget,
    check_batch,
    check_device,
    check_steps,
    check_timeout,
)

__all__ = ["DEFAULT_MAX_TRIALS", "TuneCancelled", "TuneError", "TuneSettings"]

# Search trials at the target batch; calibration trials are not counted.
DEFAULT_MAX_TRIALS = 6


class TuneError(MemoptError):
    """The search cannot start or go on (no budget, a broken recipe, no ORT)."""


class TuneCancelled(MemoptError):
    """The user cancelled; the running trial's child was killed and the journal kept."""


@dataclass(frozen=True)
class TuneSettings:
    target: RunnableTarget
    target_batch: int
    budget: Budget | None = None  # None: CUDA only, the device's memory less 10%
    options: Mapping[str, Any] = field(default_factory=dict)
    max_trials: int = DEFAULT_MAX_TRIALS
    steps: int = DEFAULT_STEPS
    runs_dir: Path = DEFAULT_RUNS_DIR
    resume: bool = False
    device: str = "auto"
    margin: float = DEFAULT_MARGIN
    calibration_batches: tuple[int, ...] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    python: str | None = None
    probe_batch: int = 2

    @classmethod
    def for_target(cls, target: RunnableTarget, target_batch: int, **values: Any) -> TuneSettings:
        """Settings for ``target``; a command without ``{batch}`` runs, probes and calibrates at its own batch."""
        if target.fixed_batch:
            values.update(calibration_batches=(target_batch,), probe_batch=target_batch)
        return cls(target=target, target_batch=target_batch, **values)

    def __post_init__(self) -> None:
        check_batch(self.target_batch, "--target-batch")
        if self.max_trials < 1:
            raise TuneError(f"--max-trials must be at least 1, not {self.max_trials}")
        check_steps(self.steps)
        if not 0 <= self.margin < 1:
            raise TuneError(f"--margin must be a fraction in [0, 1), not {self.margin:g}")
        check_device(self.device)
        check_timeout(self.timeout_s)
        if self.calibration_batches is not None and (not self.calibration_batches or min(self.calibration_batches) < 1):
            raise TuneError("calibration needs one or more positive batch sizes")
