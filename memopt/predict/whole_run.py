"""The whole run as a hard limit sees it, from the runs a session already made.

A run peaks in one of three phases (``Phase``): the measured steps, which the memory model
predicts and recompute lowers, or the start-up (ONNX export, session build, warm-up step) or
the job's exit (finalization), which recompute cannot lower. ``FixedPeaks`` predicts the
latter's peak by batch from the runs where they bound; the whole run's predicted peak is the
higher of the two.

Neither phase peaks at the same figure twice: the export, the session build and the
allocator differ from run to run. ``RunSpread`` says how far apart the runs memopt made
landed, per phase, from measurements of the same thing: the ranks of one job and runs with
the same key (batch and config: a resumed or repeated trial). Runs of other configs or
batches are not counted: where the start-up binds by its warm-up step, recompute and the
batch change it too, and that difference is not noise. A verdict then asks for more room
under the limit than that spread.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from memopt.core.memory import Memory, Phase
from memopt.core.trial import TrialResult

__all__ = ["PhaseSpread", "RunSpread", "FixedPeaks", "processes_of"]


@dataclass(frozen=True)
class PhaseSpread:
    """How far apart (bytes, highest less lowest) one phase's peak landed in processes that
    measured the same thing, and how many processes those were."""

    bytes: float
    samples: int

    def describe(self, phase: Phase) -> str:
        return f"run-to-run spread of the {phase} {self.bytes / 2**20:,.1f} MiB ({self.samples} runs)"


@dataclass(frozen=True)
class RunSpread:
    """The run-to-run spread of each phase's peak; None where no phase was measured twice."""

    steps: PhaseSpread | None = None
    start_up: PhaseSpread | None = None
    exit: PhaseSpread | None = None

    def of(self, phase: Phase) -> PhaseSpread | None:
        return {Phase.START_UP: self.start_up, Phase.EXIT: self.exit}.get(phase, self.steps)

    def bytes_of(self, phase: Phase) -> float:
        """The spread to leave room for: 0 where the phase ran once (nothing measured yet)."""
        spread = self.of(phase)
        return spread.bytes if spread is not None else 0.0

    @classmethod
    def of_trials(cls, trials: Iterable[TrialResult]) -> RunSpread:
        """The spread of each phase over the processes of each trial key (ranks, repeats)."""
        steps: dict[str, list[int]] = defaultdict(list)
        start_up: dict[str, list[int]] = defaultdict(list)
        exits: dict[str, list[int]] = defaultdict(list)
        for trial in trials:
            for memory in processes_of(trial):
                if memory.peak_bytes is not None:
                    steps[trial.key].append(memory.peak_bytes)
                if memory.binding_phase is Phase.START_UP and memory.whole_run_peak is not None:
                    start_up[trial.key].append(memory.whole_run_peak)
            if trial.ran and trial.memory.exit_peak_bytes is not None:  # the job's, not a rank's
                exits[trial.key].append(trial.memory.exit_peak_bytes)
        return cls(_repeats(steps.values()), _repeats(start_up.values()), _repeats(exits.values()))


def processes_of(trial: TrialResult) -> tuple[Memory, ...]:
    """The memory figures of each process of a trial that ran: every rank of a job, else the run's."""
    if not trial.ran:
        return ()
    if trial.ranks:
        return tuple(Memory.from_record(rank) for rank in trial.ranks)
    return (trial.memory,)


@dataclass(frozen=True)
class FixedPeaks:
    """The peak of the phases recompute cannot lower, by batch: the start-up's from the processes
    whose start-up bound, the job's exit's from the runs whose exit bound, (batch, whole-run
    peak) each. The config a run had does not matter. ``phase``: the phase of the highest sample,
    the one said to bind."""

    samples: tuple[tuple[int, int], ...] = ()
    phase: Phase = Phase.START_UP

    @classmethod
    def of_trials(cls, trials: Iterable[TrialResult]) -> FixedPeaks:
        found: list[tuple[int, int, Phase]] = []
        for trial in trials:
            for memory in processes_of(trial):
                if memory.binding_phase is Phase.START_UP and memory.whole_run_peak is not None:
                    found.append((trial.batch_size, memory.whole_run_peak, Phase.START_UP))
            job = trial.memory  # the exit is measured for the job as a whole, not per rank
            if trial.ran and job.binding_phase is Phase.EXIT and job.whole_run_peak is not None:
                found.append((trial.batch_size, job.whole_run_peak, Phase.EXIT))
        if not found:
            return cls()
        highest = max(found, key=lambda sample: sample[1])
        return cls(tuple((batch, peak) for batch, peak, _ in found), highest[2])

    @functools.cached_property
    def _line(self) -> tuple[float, float] | None:
        """(intercept, slope) of the fixed phases' peak in the batch; None without samples."""
        if not self.samples:
            return None
        batches = np.array([batch for batch, _ in self.samples], dtype=float)
        peaks = np.array([peak for _, peak in self.samples], dtype=float)
        if len(set(batches)) > 1:
            slope, intercept = np.polyfit(batches, peaks, 1)
            if slope > 0:
                return float(intercept), float(slope)
        return float(peaks.mean()), 0.0

    def at(self, batch_size: int) -> float | None:
        """The predicted peak of the fixed phases at ``batch_size``: a line in the batch through the samples
        (least squares), never falling as the batch grows; the samples' mean where they are all
        at one batch (or fall with it); None without samples."""
        if self._line is None:
            return None
        intercept, slope = self._line
        return intercept + slope * batch_size

    def largest_batch(self, limit_bytes: float, ceiling: int) -> int:
        """The largest batch up to ``ceiling`` whose fixed phases are predicted within ``limit_bytes``
        (0: none); ``ceiling`` where nothing is known of them."""
        if self._line is None:
            return ceiling
        intercept, slope = self._line
        if intercept + slope > limit_bytes:
            return 0
        if slope == 0:
            return ceiling
        largest = math.floor((limit_bytes - intercept) / slope)
        if intercept + slope * (largest + 1) <= limit_bytes:  # the division's rounding fell short
            largest += 1
        return max(0, min(ceiling, largest))


def _repeats(groups: Iterable[Sequence[int]]) -> PhaseSpread | None:
    """The widest spread among groups measured more than once."""
    repeated = [values for values in groups if len(values) > 1]
    if not repeated:
        return None
    return PhaseSpread(
        float(max(max(values) - min(values) for values in repeated)), sum(len(values) for values in repeated)
    )
