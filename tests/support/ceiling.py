"""A real memory ceiling for the tests: a memory cgroup (v1) with a limit, its processes killed
by the kernel's OOM killer when they go over, as a GPU job dies at its device's limit.

``memory_ceiling`` creates the cgroup under the test process's own memory cgroup and removes
it afterwards; it skips the test, saying why, where the controller is not there or not
writable (not root, cgroup v2 only, a read-only mount). A process enters it at its start
(``MemoryCeiling.enter`` as ``preexec_fn``), and every process it starts is in it too.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from memopt.run.cgroup import CGROUP_ROOT, memory_cgroup

__all__ = ["MemoryCeiling", "memory_ceiling"]

_MIB = 1 << 20


@dataclass(frozen=True)
class MemoryCeiling:
    folder: Path
    limit_bytes: int

    def enter(self) -> None:
        """Move the calling process into the cgroup (a ``preexec_fn``: the child moves itself)."""
        (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    @property
    def oom_kills(self) -> int:
        for line in (self.folder / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    @property
    def max_usage_bytes(self) -> int:
        return int((self.folder / "memory.max_usage_in_bytes").read_text())


@contextmanager
def memory_ceiling(limit_mib: int) -> Iterator[MemoryCeiling]:
    """A fresh memory cgroup limited to ``limit_mib`` MiB (swap included where swap is on)."""
    parent = memory_cgroup()
    if parent is None or not parent.is_relative_to(CGROUP_ROOT / "memory"):
        pytest.skip("no cgroup v1 memory controller here (/sys/fs/cgroup/memory): no real memory ceiling")
    folder = parent / f"memopt-test-{uuid.uuid4().hex[:12]}"
    try:
        folder.mkdir()
    except OSError as err:
        pytest.skip(f"the memory cgroup {parent} is not writable here ({err.strerror}): no real memory ceiling")
    try:
        (folder / "memory.limit_in_bytes").write_text(str(limit_mib * _MIB))
        memsw = folder / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # without it, a machine with swap would swap instead of killing
            memsw.write_text(str(limit_mib * _MIB))
        yield MemoryCeiling(folder, limit_mib * _MIB)
    finally:
        _remove(folder)


def _remove(folder: Path) -> None:
    """Remove the cgroup once the processes in it are gone (killing any left: a test never leaks one)."""
    deadline = time.monotonic() + 10
    while True:
        pids = [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
        if not pids:
            break
        if time.monotonic() > deadline:
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        time.sleep(0.1)
    folder.rmdir()
