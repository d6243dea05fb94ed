"""The child's own guard: it ends its process group when its parent is gone or its time is up.

The parent (``memopt.run.launch``) ends a run's group on every exit path it lives through;
this covers the one it does not: the parent killed outright (``kill -9``) or stopped. The
kernel's parent-death signal ends the child itself the moment the parent dies (Linux); a
thread watching the parent's pid ends the whole group (grandchildren too) where that signal
is unavailable or the parent died before it was set, and ends it at the run's deadline.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["GRACE_S", "guard"]

# The parent kills a run at its timeout and labels it timed out; the child's own deadline
# comes this much later, so it only acts where the parent could not.
GRACE_S = 5.0
_POLL_S = 0.2
_PR_SET_PDEATHSIG = 1


def guard(parent_pid: int, timeout_s: float | None, *, parent_death_signal: bool = True) -> None:
    """Arm the guards for a child of ``parent_pid`` allowed ``timeout_s`` seconds. Without
    ``parent_death_signal`` only the watching thread acts, and it ends the whole group: for a
    process whose work is its group (a user's command), not itself."""
    if parent_death_signal:
        _set_parent_death_signal()
    deadline = time.monotonic() + timeout_s + GRACE_S if timeout_s else None
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        _end_group(f"its parent process {parent_pid} is gone")
    watcher = threading.Thread(target=_watch, args=(parent_pid, deadline), name="memopt-watchdog", daemon=True)
    watcher.start()


def _set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watching thread still ends the run


def _watch(parent_pid: int, deadline: float | None) -> None:
    while True:
        if os.getppid() != parent_pid:
            _end_group(f"its parent process {parent_pid} is gone")
        if deadline is not None and time.monotonic() > deadline:
            _end_group("it ran past its timeout")
        time.sleep(_POLL_S)


def _end_group(why: str) -> None:
    try:
        print(f"[memopt] ending this run: {why}", file=sys.stderr, flush=True)
    except OSError:  # the output went to the parent, which is gone: end the run all the same
        pass
    # The child leads its own session (the parent starts it so); anywhere else, only itself.
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
