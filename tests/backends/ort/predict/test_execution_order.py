"""The order the memory model plays a step in is the order ORT runs it: read off ORT's own
profiler (every kernel it ran, in order) for the tiny GPT, without a config (ORT's default
order) and with one (the memory-efficient order, recomputed nodes included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import CliRun

from memopt.backends.ort.graph.training_graph import load_graph, session_input_beside
from memopt.backends.ort.predict.liveness import Recompute, _schedule
from memopt.backends.ort.rules import rules_for
from memopt.backends.ort.scan import scan_graph

pytestmark = pytest.mark.ort  # real ORTModule runs

# One warm-up and one measured step of the tiny GPT under ORTModule with ORT's profiler on.
_PROFILED_STEPS = """
import os, sys
import onnxruntime
from onnxruntime.training.ortmodule import _graph_execution_manager as manager
from memopt.backends.ort.child import OrtSteps
from memopt.child.steps import run_steps
from memopt.recipes import load_recipe

session_options = onnxruntime.SessionOptions  # the module is ORT's own: keep the class

def profiled():
    options = session_options()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(sys.argv[1], "profile")
    return options

manager.onnxruntime.SessionOptions = profiled
run_steps(
    load_recipe("gpt", {"size": "tiny"}), 4, steps=1, device="cpu", log_level="WARNING", save_onnx=False, backend=OrtSteps()
)
"""


def _kernels_of_last_step(folder: Path) -> list[str]:
    """The nodes ORT ran in the last forward and backward run, in order."""
    profile = max(folder.glob("profile*.json"), key=lambda path: path.stat().st_size)
    runs: list[list[str]] = [[]]
    for event in json.loads(profile.read_text()):
        if event.get("cat") == "Session" and event.get("name") == "SequentialExecutor::Execute":
            runs.append([])
        elif event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            runs[-1].append(event["name"].removesuffix("_kernel_time"))
    forward, backward = [run for run in runs if run][-2:]
    return forward + backward


def _profile(tmp_path: Path, config: list[str] | None) -> list[str]:
    folder = tmp_path / ("config" if config else "none")
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_MEMORY_OPT")}
    if config:
        (folder / "config.json").write_text(json.dumps(config))
        env["ORTMODULE_MEMORY_OPT_CONFIG"] = str(folder / "config.json")
    done = subprocess.run(
        [sys.executable, "-c", _PROFILED_STEPS, str(folder)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _kernels_of_last_step(folder)


@pytest.mark.parametrize("plans", [(), ("Gelu+:1:-1", "Dropout+:1:-1")], ids=["no config", "Gelu+ Dropout+"])
def test_the_simulated_order_is_the_order_ort_runs(
    plans: tuple[str, ...], tiny_probe: Callable[[str], CliRun], tmp_path: Path
) -> None:
    saved = tiny_probe("gpt").execution_graph
    # ORT breaks ties by its node indices, read from the graph it was handed (saved beside).
    graph = load_graph(saved, session_input=session_input_beside(saved))
    report = scan_graph(graph, "1.19.2")
    recompute = [Recompute(o.entry, o.nodes) for p in report.patterns if p.key in plans for o in p.occurrences]
    assert len({p.key for p in report.patterns} & set(plans)) == len(plans), "the scan finds the plans"
    steps, _ = _schedule(graph, recompute, rules_for("1.19.2").analysis_order)
    simulated = [s.node.name + ("_recompute" if s.recomputed else "") for s in steps if s.node.op_type != "YieldOp"]
    assert simulated == _profile(tmp_path, list(plans) or None)
