"""Each node's kernel time per step, from ORT's own profiler, for the recompute-cost estimate.

A recomputed node runs the same kernel on the same shapes as the forward node it clones, so
the time ORT's profiler measured for that node in a no-config run is what recomputing it
costs. Only on CPU: on CUDA the profiler's node times are launch times unless ORT was built
with CUPTI, so there the estimate keeps to FLOPs and bytes.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["node_seconds", "profile_sessions", "write_node_times"]

_KERNEL_SUFFIX = "_kernel_time"


def profile_sessions(prefix: Path) -> bool:
    """Make every ORTModule training session this process builds profile its kernels into ``prefix``*.json.

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

    def _get_session_config(self: Any) -> Any:
        options, *rest = original(self)
        if getattr(self, "_export_mode", None) == TrainingMode.TRAINING:  # an eval session's profile is never read
            options.enable_profiling = True
            options.profile_file_prefix = str(prefix)
        return (options, *rest)

    manager.GraphExecutionManager._get_session_config = _get_session_config
    return True


def write_node_times(ort_module: Any, path: Path) -> bool:
    """End the training session's profiling; write each node's median seconds per step to ``path``.

    ORT's raw profile (megabytes) is removed once read. False, and nothing written, where the
    session cannot be reached (another release's internals) or profiled nothing."""
    try:
        session = ort_module._torch_module._execution_manager(True)._execution_agent._inference_session
        profile = Path(session.end_profiling())
    except (AttributeError, RuntimeError, TypeError):
        return False
    if not profile.name or not profile.is_file():
        return False
    try:
        events = json.loads(profile.read_text())
    except (OSError, ValueError):
        return False
    finally:
        profile.unlink(missing_ok=True)
    seconds = node_seconds(events)
    if not seconds:
        return False
    path.write_text(json.dumps({"node_seconds": seconds}, indent=0))
    return True


def node_seconds(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Median kernel seconds of each node over the steps ORT's profile (Chrome trace events) holds."""
    durations: dict[str, list[float]] = defaultdict(list)
    for event in events:
        name = event.get("name")
        if event.get("cat") == "Node" and isinstance(name, str) and name.endswith(_KERNEL_SUFFIX):
            durations[name[: -len(_KERNEL_SUFFIX)]].append(float(event.get("dur", 0)) / 1e6)
    return {node: statistics.median(times) for node, times in durations.items()}
