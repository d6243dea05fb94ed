"""What a tuning session is asked to do, checked once; the errors a session raises."""

from __future__ import annotations

from dataclasses import dataclass, field

from memopt.errors import MemoptError
from memopt.predict.choice import DEFAULT_MARGIN
from memopt.run.budget import Budget
from memopt.run.settings import RunSettings, check_batch

__all__ = ["DEFAULT_MAX_TRIALS", "DEFAULT_REPEATS", "OrtTuneSettings", "TuneCancelled", "TuneError", "TuneSettings"]

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
class OrtTuneSettings:
    """What only the ORT back end's session reads: how it calibrates its memory model."""

    # Batches of the no-config calibration trials (None: chosen from the target batch).
    calibration_batches: tuple[int, ...] | None = None
    # Batch of the probe run that saves the training graph (None: the first calibration batch).
    probe_batch: int | None = None


@dataclass(frozen=True, kw_only=True)
class TuneSettings:
    """A tuning session: how its runs go (``run``), what it searches for, and each back end's own
    section (``ort``; the torch back end reads the shared fields only).

    A command without ``{batch}`` runs, probes and calibrates at its own batch: its ORT section
    says so whatever it was given."""

    # How every run of the session goes: the target, its options, steps, device, runs folder.
    run: RunSettings
    # The batch the verified config must fit.
    target_batch: int
    # The memory the config must fit in (None: CUDA only, the device's memory less 10%).
    budget: Budget | None = None
    # Most search trials at the target batch (calibration trials not counted).
    max_trials: int = DEFAULT_MAX_TRIALS
    # Reuse the journal's finished trials of the same target, options and versions.
    # Runs of one config a verdict needs, each fitting with room beyond the noise they measure
    # (not counted in max_trials; ORT's search: the torch back end verifies with one run).
    repeats: int = DEFAULT_REPEATS
    # Reuse the journal's finished trials of the same target, options and versions.
    resume: bool = False
    # Fraction of the budget a predicted peak stays below, for run-to-run noise.
    margin: float = DEFAULT_MARGIN
    # The ORT back end's own settings.
    ort: OrtTuneSettings = field(default_factory=OrtTuneSettings)

    def __post_init__(self) -> None:
        if self.run.target.fixed_batch:
            fixed = OrtTuneSettings(calibration_batches=(self.target_batch,), probe_batch=self.target_batch)
            object.__setattr__(self, "ort", fixed)
        check_batch(self.target_batch, "--target-batch")
        if self.max_trials < 1:
            raise TuneError(f"--max-trials must be at least 1, not {self.max_trials}")
        if self.repeats < 1:
            raise TuneError(f"--repeats must be at least 1, not {self.repeats}")
        if not 0 <= self.margin < 1:
            raise TuneError(f"--margin must be a fraction in [0, 1), not {self.margin:g}")
        batches = self.ort.calibration_batches
        if batches is not None and (not batches or min(batches) < 1):
            raise TuneError("calibration needs one or more positive batch sizes")
