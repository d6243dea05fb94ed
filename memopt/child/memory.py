"""A process's own CPU and CUDA figures, read where it runs (no torch but for CUDA's), named as
``memopt.core.memory.Memory`` names them: shared by recipe runs and job steps."""

from __future__ import annotations

import re
import resource
from pathlib import Path

__all__ = ["cuda_figures", "proc_status_bytes", "reset_rss_peak"]


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


def cuda_figures() -> dict[str, int]:
    """torch's CUDA figures beside its peaks, named as ``Memory`` names them: the memory outside
    the caching allocator now (device total − free − reserved: the context, library workspaces,
    other processes) and the allocator's retries and out-of-memory errors so far. Read after a
    step, when the reserved segments (kept until ``empty_cache``) are near their peak; torch is
    imported only here, in a process that runs CUDA."""
    import torch

    free, total = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    return {
        "cuda_outside_bytes": max(total - free - torch.cuda.memory_reserved(), 0),
        "cuda_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "cuda_ooms": int(stats.get("num_ooms", 0)),
    }
