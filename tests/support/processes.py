"""Whether a process memopt started is gone, for the tests that end runs."""

from __future__ import annotations

import os
import time


def assert_gone(pid: int, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still running")
