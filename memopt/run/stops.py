"""Time a run spent stopped, left out of its step times.

A step's time is the wall-clock time it took; a SIGSTOP (Ctrl-Z, a debugger, a job
scheduler) of memopt or of the job would otherwise be recorded as the step's own time:
the job's processes stopped do not run, and while memopt is stopped the job soon blocks on
the full pipe its output goes through. While a run goes on, memopt's wait loop, which wakes
every ``POLL_S``, records as stopped:

- any stretch of more than ``GAP_S`` in which the loop itself did not run (memopt was
  stopped, or the whole machine suspended): a process that only waits on a timer is never
  kept from running that long otherwise;
- any stretch in which a process of the run was in the kernel's stopped state (``T``),
  to within a poll.

The run's processes report when each step ended (``time.monotonic``, the machine's
monotonic clock, which every process reads alike); a step's time is then its wall time less
the stopped stretches inside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GAP_S", "POLL_S", "StopWatch", "running_seconds"]

POLL_S = 0.1
GAP_S = 1.0
# How often the run's processes are listed again (listing them reads all of /proc).
_LIST_EVERY_S = 2.0


@dataclass
class StopWatch:
    """The stretches, in ``time.monotonic`` seconds, in which memopt or a process of a run was
    stopped; ``processes`` lists the run's pids. ``tick`` it at every wake of the wait loop."""

    processes: Callable[[], Iterable[int]]
    stopped: list[tuple[float, float]] = field(default_factory=list)
    _last_tick: float = field(default_factory=time.monotonic)
    _since: float | None = None  # when a process of the run was first seen stopped
    _pids: tuple[int, ...] = ()
    _listed_at: float = float("-inf")

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_tick > GAP_S:
            self._add(self._last_tick, now)  # memopt itself did not run
        self._last_tick = now
        if now - self._listed_at > _LIST_EVERY_S:
            self._pids, self._listed_at = tuple(self.processes()), now
        if any(_stopped(pid) for pid in self._pids):
            self._since = now if self._since is None else self._since
        elif self._since is not None:
            self._add(self._since, now)
            self._since = None

    def finish(self) -> tuple[tuple[float, float], ...]:
        """Every stopped stretch, merged, once the run has ended."""
        if self._since is not None:
            self._add(self._since, time.monotonic())
            self._since = None
        return tuple(self.stopped)

    def _add(self, start: float, end: float) -> None:
        if self.stopped and start <= self.stopped[-1][1]:
            start = min(start, self.stopped[-1][0])
            end = max(end, self.stopped[-1][1])
            self.stopped.pop()
        self.stopped.append((start, end))


def running_seconds(seconds: float, ended_at: float | None, stopped: Iterable[Sequence[float]]) -> float:
    """A step's ``seconds`` less the stopped stretches inside it (it ended at ``ended_at``,
    ``time.monotonic``; a step that did not say when it ended is left as it is)."""
    if ended_at is None:
        return seconds
    start = ended_at - seconds
    inside = sum(max(0.0, min(end, ended_at) - max(begin, start)) for begin, end in stopped)
    return max(seconds - inside, 0.0)


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["T"]
