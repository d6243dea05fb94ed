"""Every process of a run, found by the mark in its environment, and ended.

Each process memopt starts for a run carries ``MEMOPT_RUN_DIR=<run folder>`` in its
environment, and so does everything they start: a process group or session of their own
(torchrun's workers, a daemon that forked and called ``setsid``) does not lose it. Ending
the run's group leaves those; ``end_marked`` finds them by the mark in ``/proc/<pid>/environ``
and kills them until none is left.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["end_marked", "marked_pids"]

_PROC = Path("/proc")
# How long ``end_marked`` keeps killing and looking before it gives up on a process.
_END_WITHIN_S = 10.0
_POLL_S = 0.02


def marked_pids(variable: str, value: str) -> list[int]:
    """Pids of the live processes (zombies are not) whose environment holds ``variable=value``."""
    entry = f"{variable}={value}".encode()
    found = []
    own = os.getpid()
    for path in _PROC.iterdir():
        if not path.name.isdigit() or int(path.name) == own:
            continue
        try:
            environ = (path / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.append(int(path.name))
    return found


def end_marked(variable: str, value: str) -> int:
    """SIGKILL every process marked ``variable=value`` until none is alive; returns how many were ended."""
    ended: set[int] = set()
    deadline = time.monotonic() + _END_WITHIN_S
    while True:
        pids = marked_pids(variable, value)
        if not pids or time.monotonic() > deadline:
            return len(ended)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            ended.add(pid)
        time.sleep(_POLL_S)
