"""Whether a process memopt started is gone, for the tests that end runs."""

from __future__ import annotations

import os
import time
from pathlib import Path


def assert_gone(pid: int, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still running")


def running(pid: int) -> bool:
    """Whether ``pid`` is alive: a zombie waiting for its reaper is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
