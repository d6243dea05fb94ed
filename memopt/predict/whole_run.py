"""The whole run as a hard limit sees it, from the runs a session already made.

A run peaks in one of three phases (``Phase``): the measured steps, which the memory model
predicts and recompute lowers, or the start-up (ONNX export, session build, warm-up step) or
the job's exit (finalization), which recompute cannot lower. ``FixedPeaks`` predicts the
latter's peak by batch from the runs where they bound; the whole run's predicted peak is the
higher of the two.

Neither phase peaks at the same figure twice: the export, the session build, the allocator
and the interpreter's end differ from run to run (a job's exit can spike by tens of MiB in one
run of four). ``RunSpread`` says how far apart repeats of the same run landed (the same key:
batch and config, run again), for each phase and the whole run, rank by rank: the ranks of one
job are different processes, not repeats, and runs of other configs or batches are not
counted either (where the start-up binds by its warm-up step, recompute and the batch change
it too, and that difference is not noise). A verdict then asks for more room under the limit
than the widest of those spreads (``RunSpread.noise``).
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
    """How far apart (bytes, highest less lowest) one phase's peak landed over repeats of one
    run (same batch and config; one rank of it), and how many runs those were."""

    bytes: float
    runs: int

    def describe(self, phase: Phase | str) -> str:
        return f"run-to-run spread of the {phase} {self.bytes / 2**20:,.1f} MiB ({self.runs} runs of one config)"


_WHOLE_RUN = "whole run"  # start-up, steps and the job's exit together: what a hard limit sees


@dataclass(frozen=True)
class RunSpread:
    """The run-to-run spread of each phase's peak and of the whole run's; None where nothing
    was run twice."""

    steps: PhaseSpread | None = None
    start_up: PhaseSpread | None = None
    exit: PhaseSpread | None = None
    whole_run: PhaseSpread | None = None

    def of(self, phase: Phase) -> PhaseSpread | None:
        return {Phase.START_UP: self.start_up, Phase.EXIT: self.exit}.get(phase, self.steps)

    def bytes_of(self, phase: Phase) -> float:
        """The spread to leave room for: 0 where the phase ran once (nothing measured yet)."""
        spread = self.of(phase)
        return spread.bytes if spread is not None else 0.0

    @property
    def noise(self) -> tuple[str, PhaseSpread] | None:
        """The widest spread of any phase or of the whole run, and its name: the room a verdict
        asks for, since a repeat can peak in another phase than the run it repeats."""
        named = [
            (str(name), spread)
            for name, spread in (
                (Phase.STEPS, self.steps),
                (Phase.START_UP, self.start_up),
                (Phase.EXIT, self.exit),
                (_WHOLE_RUN, self.whole_run),
            )
            if spread is not None
        ]
        return max(named, key=lambda item: item[1].bytes, default=None)

    @property
    def noise_bytes(self) -> float:
        noise = self.noise
        return noise[1].bytes if noise is not None else 0.0

    def noise_line(self) -> str:
        noise = self.noise
        return (
            noise[1].describe(noise[0]) if noise is not None else "run-to-run noise not measured yet (no run repeated)"
        )

    @classmethod
    def of_trials(cls, trials: Iterable[TrialResult]) -> RunSpread:
        """The spread of each phase over the repeats of each trial key, rank by rank; the
        exit and the whole run also for the job as a whole (the exit is measured for the job)."""
        steps: dict[tuple[str, int], list[int]] = defaultdict(list)
        start_up: dict[tuple[str, int], list[int]] = defaultdict(list)
        whole: dict[tuple[str, int], list[int]] = defaultdict(list)
        exits: dict[str, list[int]] = defaultdict(list)
        for trial in trials:
            processes = processes_of(trial)
            for rank, memory in enumerate(processes):
                if memory.peak_bytes is not None:
                    steps[trial.key, rank].append(memory.peak_bytes)
                if memory.binding_phase is Phase.START_UP and memory.whole_run_peak is not None:
                    start_up[trial.key, rank].append(memory.whole_run_peak)
                if len(processes) > 1 and memory.whole_run_peak is not None:
                    whole[trial.key, rank].append(memory.whole_run_peak)
            if trial.ran and trial.memory.device_peak is not None:  # the job's: every rank and its exit
                whole[trial.key, -1].append(trial.memory.device_peak)
            if trial.ran and trial.memory.exit_peak_bytes is not None:  # the job's, not a rank's
                exits[trial.key].append(trial.memory.exit_peak_bytes)
        return cls(
            _repeats(steps.values()), _repeats(start_up.values()), _repeats(exits.values()), _repeats(whole.values())
        )


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
    whose start-up bound, the job's exit's from the runs with a config whose exit bound, (batch,
    whole-run peak) each. The config a run had does not matter. ``phase``: the phase of the highest sample,
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
            # The exit begins where the steps left the process: a run without recompute ends
            # higher than any config's would, so its exit is no floor for them.
            if trial.ran and trial.config and job.binding_phase is Phase.EXIT and job.whole_run_peak is not None:
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
    """The widest spread among groups measured more than once, and how many runs that group had."""
    repeated = [values for values in groups if len(values) > 1]
    if not repeated:
        return None
    widest = max(repeated, key=lambda values: (max(values) - min(values), len(values)))
    return PhaseSpread(float(max(widest) - min(widest)), len(widest))
