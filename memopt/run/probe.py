"""``memopt probe``: a short real ORTModule run that captures what the memory optimizer printed.

The run folder holds ort.log (everything the child printed, ORT's C++ and Python logs
included), run.json (request, versions, memory, step times) and onnx/ with the graphs
ORTModule saved, the execution training graph among them.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memopt.core import RunnableTarget
from memopt.run.command import run_target
from memopt.run.launch import (
    ONNX_DIR,
    ONNX_PREFIX,
    RunRequest,
    RunResult,
    new_run_dir,
)
from memopt.run.settings import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S

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
    target: RunnableTarget,
    batch_size: int,
    *,
    options: Mapping[str, Any] | None = None,
    steps: int = DEFAULT_STEPS,
    device: str = "auto",
    log_level: str = "INFO",
    runs_dir: Path = DEFAULT_RUNS_DIR,
    env: Mapping[str, str] | None = None,
    unset_env: tuple[str, ...] = (),
    python: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> ProbeResult:
    """Run the target for a warm-up step and ``steps`` more with ORT's plans logged and graphs
    saved. A command runs on the device it picks itself; ``device`` and ``python`` are for recipes."""
    # The request checks its values before the run folder exists: bad input creates nothing.
    request = RunRequest(
        target=target,
        batch_size=batch_size,
        options=dict(options or {}),
        steps=steps,
        device=device,
        log_level=log_level,
        save_onnx=True,
        env=dict(env or {}),
        unset_env=unset_env,
        timeout_s=timeout_s,
        python=python or sys.executable,
    )
    run = run_target(request, new_run_dir(runs_dir, run_label(target, batch_size)), cancel)
    return ProbeResult(run=run, graphs=saved_graphs(run.run_dir / ONNX_DIR))


def saved_graphs(folder: Path) -> dict[str, Path]:
    """The graphs ORTModule saved into ``folder``, by kind (``GRAPH_KINDS``)."""
    paths = {kind: folder / f"{ONNX_PREFIX}_{name}_training.onnx" for kind, name in GRAPH_KINDS.items()}
    return {kind: path for kind, path in paths.items() if path.is_file()}
