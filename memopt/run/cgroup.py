"""The memory cgroup a process runs in: where it is, and the limit it puts on the process.

``/proc/<pid>/cgroup`` names the process's cgroup under each hierarchy: the v1 memory
controller's (``<n>:memory:/path``) and the v2 unified tree's (``0::/path``, mounted at
``/sys/fs/cgroup`` on a v2-only machine, at ``/sys/fs/cgroup/unified`` beside v1). A
limit set on any cgroup above the process's binds it too, so the limit is the smallest of
the folder's and its ancestors' (v1 ``memory.limit_in_bytes``, v2 ``memory.max``). Inside
a container the named path may not exist under the mount (the container's own cgroup is
the mount's root): its ancestors that do exist, the root included, are read.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CGROUP_ROOT", "OOM_COUNTER_FILES", "memory_cgroup", "memory_limit"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where a memory cgroup counts its OOM kills (``oom_kill N``): v1's file, then v2's.
OOM_COUNTER_FILES = ("memory.oom_control", "memory.events")
_V1_LIMIT_FILE = "memory.limit_in_bytes"
_V2_LIMIT_FILE = "memory.max"
# v1 says "no limit" with its page counter's largest value (9223372036854771712 with 4 KiB
# pages); v2 with "max". Any figure past an exbibyte is no limit a machine can have.
_NO_LIMIT_FROM = 2**60


def memory_cgroup(pid: int | str = "self") -> Path | None:
    """The memory cgroup folder of process ``pid`` (v1's memory controller, else v2's unified
    tree) that has an OOM-kill counter; None where there is none or the process is gone."""
    v1, v2 = _folders(pid)
    if v1 is not None and (v1 / OOM_COUNTER_FILES[0]).is_file():
        return v1
    return v2 if v2 is not None and (v2 / OOM_COUNTER_FILES[1]).is_file() else None


def memory_limit(pid: int | str = "self") -> int | None:
    """The most memory process ``pid``'s cgroups let it use, in bytes: the smallest limit set on
    its memory cgroup or any above it, v1 and v2; None where none is set (or none is readable)."""
    limits = []
    for folder, name in zip(_folders(pid), (_V1_LIMIT_FILE, _V2_LIMIT_FILE)):
        if folder is None:
            continue
        root = CGROUP_ROOT / "memory" if name == _V1_LIMIT_FILE else _unified_root()
        for level in (folder, *folder.parents):
            if not level.is_relative_to(root):
                break
            limit = _limit(level / name)
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None


def _folders(pid: int | str) -> tuple[Path | None, Path | None]:
    """Process ``pid``'s v1 memory cgroup folder and its v2 one (None where it has none)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None, None
    v1 = v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = CGROUP_ROOT / "memory" / path.lstrip("/")
        elif controllers == "":
            v2 = _unified_root() / path.lstrip("/")
    return v1, v2


def _unified_root() -> Path:
    hybrid = CGROUP_ROOT / "unified"
    return CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").is_file() or not hybrid.is_dir() else hybrid


def _limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= _NO_LIMIT_FROM:
        return None
    return int(text)
