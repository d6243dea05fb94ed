"""A process's own CPU memory figures from /proc (no torch): shared by recipe runs and job steps."""

from __future__ import annotations

import re
import resource
from pathlib import Path

__all__ = ["proc_status_bytes", "reset_rss_peak"]


def proc_status_bytes(field_name: str) -> int:
    """A VmRSS/VmHWM figure; without /proc, the lifetime peak RSS stands in for both."""
    try:
        match = re.search(rf"^{field_name}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        match = None
    if match:
        return int(match.group(1)) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_rss_peak() -> None:
    """Restart VmHWM from the current RSS; where that is impossible the peak keeps what came before."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
