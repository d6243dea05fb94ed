"""What a run measures of memory: one record from the child or job to the journal, the same
names at every hop (``Memory``), and the phase whose peak is the run's (``Phase``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum

__all__ = ["Memory", "Phase"]


class Phase(str, Enum):
    """The part of a run whose peak is the run's peak."""

    START_UP = "start-up"  # ONNX export, session build and the warm-up step
    STEPS = "steps"  # the measured training steps
    EXIT = "exit"  # the job's own end after the steps: unwinding, atexit, the interpreter's finalization

    def __str__(self) -> str:
        return self.value

    @property
    def lowered_by_recompute(self) -> bool:
        """Recompute lowers the steps' activations; the start-up and the exit hold what it cannot touch."""
        return self is Phase.STEPS


@dataclass(frozen=True)
class Memory:
    """Memory in bytes as a recipe's child, each rank of a job, a run and a trial record it:
    the same names at every hop. CPU: the process's RSS; CUDA: torch's allocated bytes."""

    memory_kind: str | None = None  # "rss" or "cuda_allocated"
    static_bytes: int | None = None  # model, optimizer and ORTModule set up, before the first step
    peak_bytes: int | None = None  # the measured steps' peak: reset after the warm-up step
    peak_over_run_bytes: int | None = None  # the whole run's: export and session build included
    cuda_reserved_bytes: int | None = None  # CUDA: the caching allocator's reserved peak
    cuda_outside_bytes: int | None = None  # CUDA: memory outside the allocator at that peak
    cuda_alloc_retries: int | None = None  # CUDA: num_alloc_retries (the cache freed to find room)
    cuda_ooms: int | None = None  # CUDA: num_ooms
    # CPU, a whole run only (not a rank): the kernel's peak RSS of its processes, each on its own,
    # up to their exit (finalization included), read when they were reaped; None: not measured
    # (the run was ended after its steps, or predates this figure).
    exit_peak_bytes: int | None = None

    @property
    def on_cuda(self) -> bool:
        return self.memory_kind == "cuda_allocated"

    @property
    def device_peak(self) -> int | None:
        """What runs out, the figure a budget is judged on: on CUDA the caching allocator's
        reserved peak (allocated or cached, the segments hold the card's memory) plus what
        lives outside it; elsewhere ``whole_run_peak``."""
        if self.on_cuda and self.cuda_reserved_bytes is not None:
            return self.cuda_reserved_bytes + (self.cuda_outside_bytes or 0)
        return self.whole_run_peak

    @property
    def predicted_figure(self) -> int | None:
        """The measured figure the memory model predicts and learns from: on CUDA what runs out
        (reserved plus outside the allocator), elsewhere the measured steps' peak."""
        if self.on_cuda and self.cuda_reserved_bytes is not None:
            return self.device_peak
        return self.steady_or_run_peak

    @property
    def at_the_edge(self) -> bool:
        """The allocator had to free its cache to find room: the run fits, but only just."""
        return bool(self.cuda_alloc_retries)

    @property
    def steady_or_run_peak(self) -> int | None:
        """The measured steps' peak, else (a run that reset nothing) the whole run's."""
        return self.peak_bytes if self.peak_bytes is not None else self.peak_over_run_bytes

    @property
    def whole_run_peak(self) -> int | None:
        """What a hard limit sees: the highest of the start-up's, the steps' and the exit's peaks."""
        known = [size for size in (self.peak_bytes, self.peak_over_run_bytes, self.exit_peak_bytes) if size is not None]
        return max(known) if known else None

    @property
    def fixed_floor(self) -> int | None:
        """When the start-up or the exit peaked above the measured steps, what that phase alone
        holds on the device, which recompute cannot lower: elsewhere the whole run's peak; on CUDA the start-up's
        allocated peak (the reserved segments held at least that) plus what lives outside the
        allocator, a floor under what runs out (the reserved peak is no start-up's alone)."""
        phase = self.binding_phase
        if phase is None or phase.lowered_by_recompute or self.peak_bytes is None:
            return None
        if self.on_cuda and self.cuda_reserved_bytes is not None and self.peak_over_run_bytes is not None:
            return self.peak_over_run_bytes + (self.cuda_outside_bytes or 0)
        return self.whole_run_peak

    @property
    def binding_phase(self) -> Phase | None:
        """The exit where it peaked above the rest; else start-up when the whole run peaked above
        the measured steps; the steps otherwise."""
        during = max((size for size in (self.peak_bytes, self.peak_over_run_bytes) if size is not None), default=None)
        if self.exit_peak_bytes is not None and during is not None and self.exit_peak_bytes > during:
            return Phase.EXIT
        if self.peak_bytes is None:
            return Phase.START_UP if self.peak_over_run_bytes is not None else None
        if self.peak_over_run_bytes is not None and self.peak_over_run_bytes > self.peak_bytes:
            return Phase.START_UP
        return Phase.STEPS

    def with_exit_peak(self, max_rss_bytes: int | None) -> Memory:
        """These figures with the run's peak RSS up to its processes' exit (``exit_peak_bytes``):
        on CPU only, where it is the same kind of figure as the rest."""
        if self.memory_kind != "rss" or max_rss_bytes is None:
            return self
        return replace(self, exit_peak_bytes=max_rss_bytes)

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Memory:
        """The figures a record holds; a figure that is not a finite count of bytes is unknown."""
        kind = record.get("memory_kind")
        sizes = {f.name: _bytes(record.get(f.name)) for f in fields(cls) if f.name != "memory_kind"}
        return cls(memory_kind=kind if isinstance(kind, str) else None, **sizes)

    @classmethod
    def highest(cls, memories: Iterable[Memory]) -> Memory:
        """Each figure's highest over processes (the ranks of one job)."""
        every = list(memories)

        def top(name: str) -> int | None:
            values = [getattr(m, name) for m in every if getattr(m, name) is not None]
            return max(values) if values else None

        kinds = [m.memory_kind for m in every if m.memory_kind]
        sizes = {f.name: top(f.name) for f in fields(cls) if f.name != "memory_kind"}
        return cls(memory_kind=kinds[0] if kinds else None, **sizes)


def _bytes(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if math.isfinite(value) and value >= 0 else None
