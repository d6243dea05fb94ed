"""ORT's own answer for a training graph: its memory-optimizer analysis, run by ORT itself.

``python -m memopt.backends.ort.graph.ort_reference GRAPH ANALYSED [PROBE]`` builds ORTModule's
training session (a ``TrainingAgent``) from GRAPH, the graph ORTModule hands its session
(saved by a probe as ``memopt_optimized_training.onnx``), saves the session's optimized
graph to ANALYSED (what ORT's analysis sees: the execution graph) and prints, as JSON,
the plans ``get_serialized_ortmodule_memory_stat`` reports (the data behind ORT's Plan
table) and how long ORT took. memopt measures its own scan of ANALYSED against it in
tests and benchmarks. It needs the installed ORT release and runs in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memopt.errors import MemoptError

__all__ = ["OrtReference", "ort_reference", "read_reference", "session_reference"]


@dataclass(frozen=True)
class OrtReference:
    plans: dict[str, tuple[str, int]]  # config key -> (ORT's saving expression, frequency)
    session_s: float  # building ORT's training session (its graph optimizations included)
    analysis_s: float  # ORT's memory-optimizer analysis alone
    analysed_graph: Path  # the graph as ORT's session optimized it: what its analysis saw


def ort_reference(graph: Path, analysed: Path, probe: str = "1:0", python: str | None = None) -> OrtReference:
    """ORT's plans for the pre-session training ``graph``; its session graph goes to ``analysed``."""
    command = [
        python or sys.executable,
        "-m",
        "memopt.backends.ort.graph.ort_reference",
        str(graph),
        str(analysed),
        probe,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise MemoptError(f"ORT could not analyse {graph}: {lines[-1] if lines else 'no output'}")
    return read_reference(json.loads(done.stdout.splitlines()[-1]), analysed)


def read_reference(result: dict[str, Any], analysed: Path) -> OrtReference:
    plans = {key: (value[0], int(value[1])) for key, value in result["plans"].items()}
    return OrtReference(plans, float(result["session_s"]), float(result["analysis_s"]), analysed)


def session_reference(model: Any, forward_outputs: int, analysed_path: str, probe: str = "1:0") -> dict[str, Any]:
    """Child side: ORTModule's session for ``model`` (an onnx.ModelProto), and ORT's analysis of it."""
    import onnxruntime
    from onnxruntime.capi import _pybind_state as C
    from onnxruntime.training.ortmodule._execution_agent import TrainingAgent

    options = onnxruntime.SessionOptions()  # as ORTModule's _get_session_config on CPU
    options.enable_mem_pattern = False
    options.enable_mem_reuse = False
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.optimized_model_filepath = analysed_path
    cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    outputs = [output.name for output in model.graph.output]
    started = time.perf_counter()
    agent = TrainingAgent(
        model.SerializeToString(),
        [i.name for i in model.graph.input],
        [cpu] * forward_outputs,
        outputs,
        [cpu] * len(outputs),
        options,
        ["CPUExecutionProvider"],
        [{}],
        0,
    )
    session_s = time.perf_counter() - started
    started = time.perf_counter()
    _, plans = agent.get_serialized_ortmodule_memory_stat("", probe, False)
    analysis_s = time.perf_counter() - started
    return {
        "plans": {key: list(value) for key, value in plans.items()},
        "session_s": session_s,
        "analysis_s": analysis_s,
    }


def _main(graph_path: str, analysed_path: str, probe: str) -> None:
    import onnx

    model = onnx.load(graph_path)
    yield_node = next(node for node in model.graph.node if node.op_type == "YieldOp")
    print(json.dumps(session_reference(model, len(yield_node.input), analysed_path, probe)))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "1:0")
