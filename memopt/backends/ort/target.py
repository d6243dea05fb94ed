"""What ``memopt scan TARGET`` analyses: a recipe's ORT training graph, or an ONNX file."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memopt.backends.ort.config import CONFIG_VARIABLES, PlanCell
from memopt.backends.ort.graph.gradient import build_training_graph
from memopt.backends.ort.graph.training_graph import TrainingGraph, load_graph, session_input_beside
from memopt.backends.ort.logparse import parse_file
from memopt.core import GraphFile, RunnableTarget, RunStatus, Target
from memopt.core.memory import Memory
from memopt.errors import MemoptError
from memopt.run.launch import LOG_NAME, ONNX_DIR, new_run_dir
from memopt.run.probe import probe, saved_graphs
from memopt.run.settings import DEFAULT_RUNS_DIR, RunSettings

__all__ = ["CONFIG_VARIABLES", "ProbedGraph", "graph_of_run", "load_target"]


@dataclass(frozen=True)
class ProbedGraph:
    """A target's training graph as memopt loaded it (an ONNX file) or probed it (one short
    ORTModule run), with what that run printed and measured beside it."""

    graph: TrainingGraph
    description: str
    graph_path: Path
    logged_dims: Mapping[str, int] = field(default_factory=dict)  # the probe's first-batch dims
    ort_version: str | None = None  # the ORT that built the graph, when memopt ran it
    # The "<subgraph>:<type>" cells of the Plan table ORT printed for this graph (a probe's
    # log); None when ORT printed none. A config entry outside them is one ORT ignores.
    ort_plans: frozenset[PlanCell] | None = None
    # The probe's own no-config measurement (batch, what it measured, device): a free calibration point.
    probe_peak: tuple[int, Memory, str] | None = None
    log_path: Path | None = None  # the probe's log, whose Plan table a scan checks itself against


def load_target(
    target: Target,
    *,
    options: Mapping[str, Any] | None = None,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    probe_batch: int = 2,
    python: str | None = None,
    loss: str = "outside",
    cancel: threading.Event | None = None,
) -> ProbedGraph:
    """An ONNX training graph as is, a forward-only ONNX model through ORT's gradient
    builder, or a recipe's (or the user's command's) graph from a short no-config probe."""
    if isinstance(target, GraphFile):
        if options:
            raise MemoptError("recipe options (--size, --seq, -o) do not apply to an ONNX file")
        graph = load_graph(target.path, session_input=session_input_beside(target.path))
        if any(node.op_type == "YieldOp" for node in graph.nodes):
            return ProbedGraph(graph, target.spec, target.path)
        folder = new_run_dir(runs_dir, f"graph-{target.label}")
        built = build_training_graph(target.path, folder / "training_graph.onnx", loss, python)
        return ProbedGraph(
            load_graph(built),
            f"{target} (forward only; training graph by ORT's gradient builder, loss {loss}: {built})",
            built,
        )
    assert isinstance(target, RunnableTarget)
    settings = RunSettings(target=target, options=options or {}, steps=1, runs_dir=runs_dir, python=python)
    # ORTModule saves the graph as it builds the session, before the first step: a probe whose
    # step runs out of memory still leaves it. One that dies before is tried again at half the batch.
    while True:
        result = probe(
            settings,
            probe_batch,
            unset_env=CONFIG_VARIABLES,  # a graph probe must see the graph before recompute is applied
            cancel=cancel,
        )
        run = result.run
        out_of_memory = run.status is RunStatus.OUT_OF_MEMORY
        if not out_of_memory or result.execution_graph is not None or probe_batch == 1 or target.fixed_batch:
            break
        probe_batch //= 2
    if not run.ran and not (out_of_memory and result.execution_graph is not None):
        raise MemoptError(f"could not build the training graph of {target}: {run.error} (log: {run.log_path})")
    measured = run.memory.peak_bytes and run.memory.predicted_figure
    peak = (probe_batch, run.memory, run.device or "cpu") if run.ran and measured else None
    return graph_of_run(target, run.run_dir, run.stack.get("ort_version"), peak)


def graph_of_run(
    target: RunnableTarget, run_dir: Path, ort_version: str | None, peak: tuple[int, Memory, str] | None = None
) -> ProbedGraph:
    """The training graph a no-config run of ``target`` saved into ``run_dir`` (a probe, or a
    calibration trial that saved its graphs), with the dims and Plan table its log shows;
    ``peak``: that run's (batch, memory measured, device), where it ran to the end."""
    graphs = saved_graphs(run_dir / ONNX_DIR)
    log_path = run_dir / LOG_NAME
    if "execution" not in graphs:
        raise MemoptError(f"ORTModule saved no execution graph for {target} (log: {log_path})")
    summaries = parse_file(log_path).run_summaries
    # A calibration trial's profiled session, built after its steps, logs a summary without dims.
    dims = next((dict(summary.dims) for summary in reversed(summaries) if summary.dims), {})
    with_plans = [summary for summary in summaries if summary.plans]
    return ProbedGraph(
        load_graph(graphs["execution"], session_input=graphs.get("optimized")),
        f"{target} (probe {run_dir})",
        graphs["execution"],
        dims,
        ort_version,
        frozenset(cell for plan in with_plans[-1].plans for cell in plan.key.cells) if with_plans else None,
        peak,
        log_path,
    )
