"""``memopt probe``: a short real ORTModule run that captures what the memory optimizer printed.

The run folder holds ort.log (everything the child printed, ORT's C++ and Python logs
included), run.json (request, versions, memory, step times) and onnx/ with the graphs
ORTModule saved, the execution training graph among them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memopt.core import RunnableTarget
from memopt.run.command import run_target
from memopt.run.launch import (
    ONNX_DIR,
    ONNX_PREFIX,
    RunRequest,
    RunResult,
    new_run_dir,
)
from memopt.run.settings import RunSettings

__all__ = ["GRAPH_KINDS", "ProbeResult", "probe", "run_label", "saved_graphs"]

# The graphs ORTModule 1.19 saves (``<prefix>_<name>_training.onnx``), in pipeline order;
# "execution" is the training graph the session runs, before any recompute is applied
# when no memory-optimizer config is set.
GRAPH_KINDS: dict[str, str] = {
    "torch_exported": "torch_exported",
    "post_processed": "post_processed",
    "pre_grad": "optimized_pre_grad",
    "optimized": "optimized",
    "execution": "execution_model",
}


@dataclass(frozen=True)
class ProbeResult:
    run: RunResult
    graphs: Mapping[str, Path]

    @property
    def execution_graph(self) -> Path | None:
        return self.graphs.get("execution")


def run_label(target: RunnableTarget, batch_size: int) -> str:
    return f"probe-{target.label}-b{batch_size}"


def probe(
    settings: RunSettings,
    batch_size: int,
    *,
    log_level: str = "INFO",
    env: Mapping[str, str] | None = None,
    unset_env: tuple[str, ...] = (),
    cancel: threading.Event | None = None,
) -> ProbeResult:
    """Run the target for a warm-up step and ``steps`` more with ORT's plans logged and graphs
    saved. A command runs on the device it picks itself; ``device`` and ``python`` are for recipes."""
    # The request checks its values before the run folder exists: bad input creates nothing.
    request = RunRequest(
        settings, batch_size, log_level=log_level, save_onnx=True, env=dict(env or {}), unset_env=unset_env
    )
    run = run_target(request, new_run_dir(settings.runs_dir, run_label(settings.target, batch_size)), cancel)
    return ProbeResult(run=run, graphs=saved_graphs(run.run_dir / ONNX_DIR))


def saved_graphs(folder: Path) -> dict[str, Path]:
    """The graphs ORTModule saved into ``folder``, by kind (``GRAPH_KINDS``)."""
    paths = {kind: folder / f"{ONNX_PREFIX}_{name}_training.onnx" for kind, name in GRAPH_KINDS.items()}
    return {kind: path for kind, path in paths.items() if path.is_file()}
