"""What a tuning session is asked to do, checked once; the errors a session raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memopt.errors import MemoptError
from memopt.predict.choice import DEFAULT_MARGIN
from memopt.run.budget import Budget
from memopt.run.settings import RunSettings, check_batch

__all__ = ["DEFAULT_MAX_TRIALS", "DEFAULT_REPEATS", "TuneCancelled", "TuneError", "TuneSettings"]

# Search trials at the target batch; calibration trials are not counted.
DEFAULT_MAX_TRIALS = 6
# Runs of a config a verdict needs: a job's exit spiked by 21-29 MiB in about one run of four
# (two-rank torchrun jobs), so one run says little of the next.
DEFAULT_REPEATS = 3


class TuneError(MemoptError):
    """The search cannot start or go on (no budget, a broken recipe, no ORT)."""


class TuneCancelled(MemoptError):
    """The user cancelled; the running trial's child was killed and the journal kept."""


@dataclass(frozen=True, kw_only=True)
class TuneSettings:
    """A tuning session: how its runs go (``run``) and what it searches for."""

    run: RunSettings
    target_batch: int
    budget: Budget | None = None  # None: CUDA only, the device's memory less 10%
    max_trials: int = DEFAULT_MAX_TRIALS
    repeats: int = DEFAULT_REPEATS  # runs of one config a verdict needs (not counted in max_trials)
    resume: bool = False
    margin: float = DEFAULT_MARGIN
    calibration_batches: tuple[int, ...] | None = None
    probe_batch: int | None = None  # None: the first calibration batch

    @classmethod
    def for_target(cls, run: RunSettings, target_batch: int, **values: Any) -> TuneSettings:
        """Settings for ``run``'s target; a command without ``{batch}`` runs, probes and calibrates at its own batch."""
        if run.target.fixed_batch:
            values.update(calibration_batches=(target_batch,), probe_batch=target_batch)
        return cls(run=run, target_batch=target_batch, **values)

    def __post_init__(self) -> None:
        check_batch(self.target_batch, "--target-batch")
        if self.max_trials < 1:
            raise TuneError(f"--max-trials must be at least 1, not {self.max_trials}")
        if self.repeats < 1:
            raise TuneError(f"--repeats must be at least 1, not {self.repeats}")
        if not 0 <= self.margin < 1:
            raise TuneError(f"--margin must be a fraction in [0, 1), not {self.margin:g}")
        if self.calibration_batches is not None and (not self.calibration_batches or min(self.calibration_batches) < 1):
            raise TuneError("calibration needs one or more positive batch sizes")
