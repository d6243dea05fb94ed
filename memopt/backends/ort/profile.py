"""Each node's kernel time per step, from ORT's own profiler, for the recompute-cost estimate.

A recomputed node runs the same kernel on the same shapes as the forward node it clones, so
the time ORT's profiler measured for that node in a no-config run is what recomputing it
costs. Only on CPU: on CUDA the profiler's node times are launch times unless ORT was built
with CUPTI, so there the estimate keeps to FLOPs and bytes.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from memopt.child import NODE_TIMES_FILE

__all__ = ["end_profile", "node_seconds", "profile_sessions", "write_node_times"]

_KERNEL_SUFFIX = "_kernel_time"
_PROFILE_PREFIX = "ort_profile"  # ORT names each session's profile <prefix>_<start time>.json


def profile_sessions(folder: Path) -> bool:
    """Make every ORTModule training session this process builds profile its kernels into ``folder``.

    False where this ORT release builds its session options elsewhere (the estimate then
    keeps to FLOPs and bytes)."""
    try:
        from onnxruntime.training.ortmodule import _graph_execution_manager as manager
    except ImportError:
        return False
    original = getattr(manager.GraphExecutionManager, "_get_session_config", None)
    if original is None:
        return False

    from torch.onnx import TrainingMode

    sessions = itertools.count()

    def _get_session_config(self: Any) -> Any:
        options, *rest = original(self)
        if getattr(self, "_export_mode", None) == TrainingMode.TRAINING:  # an eval session's profile is never read
            options.enable_profiling = True
            # ORT adds the start time in seconds only: sessions started within one second
            # would open the same file.
            options.profile_file_prefix = str(folder / f"{_PROFILE_PREFIX}_{next(sessions)}")
        return (options, *rest)

    manager.GraphExecutionManager._get_session_config = _get_session_config
    return True


def write_node_times(ort_module: Any, folder: Path) -> bool:
    """End the training session's profiling; write each node's seconds per step to
    ``folder``/``NODE_TIMES_FILE``.

    ORT's raw profiles (megabytes; a short-lived session ORTModule builds while exporting
    writes one too) are removed. False, and nothing written, where the session cannot be
    reached (another release's internals) or profiled nothing."""
    seconds = end_profile(ort_module)
    for raw in folder.glob(f"{_PROFILE_PREFIX}*.json"):
        raw.unlink(missing_ok=True)
    if not seconds:
        return False
    (folder / NODE_TIMES_FILE).write_text(json.dumps({"node_seconds": seconds}, indent=0))
    return True


def end_profile(ort_module: Any) -> dict[str, float]:
    """End the profiling of ``ort_module``'s training session: each node's seconds per step
    (``node_seconds``); its raw profile is removed. Empty where the session cannot be reached
    (another release's internals) or profiled nothing."""
    try:
        session = ort_module._torch_module._execution_manager(True)._execution_agent._inference_session
        profile = Path(session.end_profiling())
    except (AttributeError, RuntimeError, TypeError):
        return {}
    if not profile.name:
        return {}
    try:
        events = json.loads(profile.read_text())
    except (OSError, ValueError):
        events = []
    profile.unlink(missing_ok=True)
    return node_seconds(events)


def node_seconds(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Median kernel seconds of each node over the steps ORT's profile (Chrome trace events)
    holds, its first run left out where it ran more than once: that run, in the warm-up
    step, also pays for first-touch pages and kernel set-up."""
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in events:
        name = event.get("name")
        if event.get("cat") == "Node" and isinstance(name, str) and name.endswith(_KERNEL_SUFFIX):
            runs[name[: -len(_KERNEL_SUFFIX)]].append((float(event.get("ts", 0)), float(event.get("dur", 0)) / 1e6))
    seconds = {}
    for node, timed in runs.items():
        timed.sort()
        seconds[node] = statistics.median(duration for _, duration in (timed[1:] or timed))
    return seconds
