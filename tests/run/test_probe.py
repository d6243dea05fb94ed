"""`memopt probe`: real ORTModule runs on CPU and the run folder they leave."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from support import RECIPES
from support.cli import CliRun, memopt

pytestmark = pytest.mark.ort  # real ORTModule runs or ORT sessions


def test_probe_run_folder_holds_log_graphs_and_record(gpt_probe: CliRun) -> None:
    run_dir = gpt_probe.run_dir
    log = (run_dir / "ort.log").read_text()
    assert "Memory Optimizer" in log and " - Plan 1 " in log  # ORT's own Plan table, at INFO
    record = gpt_probe.record()
    result = record["result"]
    assert result["status"] == "ok" and result["device"] == "cpu"
    assert result["stack"]["ort_version"] == "1.19.2"
    assert result["stack"]["torch_version"].startswith("2.")
    assert len(result["step_times_s"]) == 3 and all(t > 0 for t in result["step_times_s"])
    assert result["memory_kind"] == "rss"
    assert result["peak_over_run_bytes"] >= result["peak_bytes"] > 100 * 2**20
    assert record["request"]["options"] == {"size": "tiny"}


def test_probe_saves_the_execution_training_graph(gpt_probe: CliRun) -> None:
    graph = onnx.load(gpt_probe.run_dir / "onnx" / "memopt_execution_model_training.onnx")
    op_types = [node.op_type for node in graph.graph.node]
    assert op_types.count("YieldOp") == 1
    assert "FusedMatMul" in op_types  # ORT's optimised graph, not the raw export


def test_probe_console_summary(gpt_probe: CliRun) -> None:
    out = gpt_probe.stdout
    assert "Probe of gpt (size=tiny) at batch 4 on CPU" in out
    assert "ORT 1.19.2" in out and "peak RSS" in out and "median" in out
    assert "10 in ORT's Plan table (memory optimizer OFF); largest FusedMatMul+Add+:1:-1" in out
    assert f"run folder   {gpt_probe.run_dir}" in out


def test_two_probes_never_share_a_folder(gpt_probe: CliRun, runs_dir: Path) -> None:
    again = memopt("probe", "mlp", "--size", "tiny", "--batch", "2", "--steps", "1", "--runs-dir", str(runs_dir))
    assert again.returncode == 0, again.stderr
    assert again.run_dir != gpt_probe.run_dir and gpt_probe.run_dir.is_dir()


@pytest.mark.parametrize("name", ["bert", "mlp", "cnn"])
def test_other_builtin_recipes_probe(name: str, tiny_probe: Callable[[str], CliRun]) -> None:
    assert tiny_probe(name).record()["result"]["status"] == "ok"


def test_user_recipe_file_with_options(runs_dir: Path) -> None:
    run = memopt(
        "probe",
        str(RECIPES / "user_mlp.py"),
        "--batch",
        "4",
        "-o",
        "width=32",
        "-o",
        "noise=0",
        "--steps",
        "1",
        "--runs-dir",
        str(runs_dir),
    )
    assert run.returncode == 0, run.stderr
    assert run.record()["request"]["options"] == {"width": 32, "noise": 0}


def test_module_attr_recipe_from_the_working_directory(runs_dir: Path) -> None:
    run = memopt("probe", "as_object:recipe", "--batch", "2", "--steps", "1", "--runs-dir", str(runs_dir), cwd=RECIPES)
    assert run.returncode == 0, run.stderr
