"""The kernel's word that a run was killed for memory: its memory cgroup's OOM-kill counter.

A process the kernel's OOM killer ends dies of SIGKILL like one a person or a launcher
killed; only the kernel's own record tells them apart. The memory cgroup a process runs in
counts every OOM kill inside it (cgroup v1: ``oom_kill`` in ``memory.oom_control``; v2: in
``memory.events``; both count kills in child cgroups too). A run reads the counter of its
first process's cgroup as it starts and again as it ends: a higher count is the evidence.
A run without a readable counter (no memory controller mounted) never has that evidence,
so a SIGKILL there stays "killed by signal 9".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memopt.run.cgroup import OOM_COUNTER_FILES, memory_cgroup

__all__ = ["OomWatch"]


def _kills(folder: Path) -> int | None:
    for name in OOM_COUNTER_FILES:
        try:
            text = (folder / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            word, _, value = line.partition(" ")
            if word == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


@dataclass(frozen=True)
class OomWatch:
    """A run's memory cgroup and its OOM-kill count when the run started."""

    folder: Path | None
    before: int | None

    @classmethod
    def start(cls, pid: int) -> OomWatch:
        """Watch the cgroup ``pid`` runs in (memopt's own where ``pid`` already exited: a child
        starts in its parent's)."""
        folder = memory_cgroup(pid) or memory_cgroup()
        return cls(folder, _kills(folder) if folder is not None else None)

    def evidence(self) -> str | None:
        """How the kernel recorded an OOM kill in the run's cgroup since the start; None if it did not."""
        if self.folder is None or self.before is None:
            return None
        now = _kills(self.folder)
        if now is None or now <= self.before:
            return None
        return f"the kernel's OOM killer ended it (oom_kill {self.before} → {now} in memory cgroup {self.folder})"
