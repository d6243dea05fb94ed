"""Forward-only ONNX models: ORT's own gradient builder makes the training graph, memopt scans it."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
from support.cli import assert_one_line_error, memopt

from memopt.backends.ort.graph.ort_reference import read_reference
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.scan import scan_graph
from memopt.graph.expr import parse_expression
from memopt.graph.polynomial import Polynomial
from memopt.recipes import load_recipe


@pytest.fixture(scope="module")
def forward_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny GPT exported by plain torch.onnx.export (no ORTModule), dynamic batch and sequence."""
    path = tmp_path_factory.mktemp("forward") / "gpt_forward.onnx"
    recipe = load_recipe("gpt", {"size": "tiny"})
    (ids,), _ = recipe.batch(2)
    torch.onnx.export(
        recipe.model().train(),
        (ids,),
        str(path),
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_axes={"input_ids": {0: "input_ids_dim0", 1: "input_ids_dim1"}},
        opset_version=17,
        do_constant_folding=False,
        training=torch.onnx.TrainingMode.TRAINING,
    )
    return path


@pytest.mark.parametrize("loss", ["outside", "cross-entropy", "mse"])
@pytest.mark.ort
def test_forward_only_model_matches_ort_own_analysis(forward_onnx: Path, loss: str, tmp_path: Path) -> None:
    run = memopt(
        "scan", str(forward_onnx), "--loss", loss, "--batch", "4", "--seq", "16", "--json", "--runs-dir", str(tmp_path)
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    graph = Path(result["source"].rsplit(": ", 1)[1].rstrip(")"))
    reference = read_reference(json.loads(graph.with_suffix(".ort.json").read_text()), graph)
    report = scan_graph(load_graph(graph), "1.19.2")
    scanned = {p.key: p for p in report.patterns}
    assert set(scanned) == set(reference.plans)
    for key, (saving, frequency) in reference.plans.items():
        assert scanned[key].frequency == frequency, key
        assert scanned[key].ort_matches(Polynomial.from_expression(parse_expression(saving))), key
    assert {"FusedMatMul+Add+:1:-1", "Gelu+:1:-1", "FusedMatMul+Where+Softmax+:1:-1"} <= set(scanned)
    assert f"loss {loss}" in result["source"]


@pytest.mark.ort
def test_loss_changes_the_graph(forward_onnx: Path, tmp_path: Path) -> None:
    outside = memopt("scan", str(forward_onnx), "--json", "--runs-dir", str(tmp_path / "a"))
    inside = memopt("scan", str(forward_onnx), "--loss", "cross-entropy", "--json", "--runs-dir", str(tmp_path / "b"))
    assert outside.returncode == inside.returncode == 0
    assert json.loads(outside.stdout)["stashed_symbolic"] != json.loads(inside.stdout)["stashed_symbolic"]


def _single_node_model(path: Path, op_type: str, domain: str = "") -> Path:
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4])
    node = onnx.helper.make_node(op_type, ["x"], ["y"], domain=domain)
    graph = onnx.helper.make_graph([node], "g", [x], [y])
    opsets = [onnx.helper.make_opsetid("", 17)] + ([onnx.helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save(onnx.helper.make_model(graph, opset_imports=opsets), path)  # today's onnx stamps an IR ORT 1.19 refuses
    return path


@pytest.mark.ort
def test_forward_model_without_parameters_has_no_plans(tmp_path: Path) -> None:
    run = memopt("scan", str(_single_node_model(tmp_path / "relu.onnx", "Relu")), "--runs-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "No recomputable plans" in run.stdout


@pytest.mark.ort
def test_forward_model_ort_cannot_load(tmp_path: Path) -> None:
    path = _single_node_model(tmp_path / "custom.onnx", "NoSuchOp", domain="example.custom")
    assert_one_line_error(
        memopt("scan", str(path), "--runs-dir", str(tmp_path)), "ORT could not build a training graph from"
    )


@pytest.mark.subprocess
def test_unknown_loss(forward_onnx: Path, tmp_path: Path) -> None:
    assert_one_line_error(
        memopt("scan", str(forward_onnx), "--loss", "hinge", "--runs-dir", str(tmp_path)),
        "--loss must be one of outside, cross-entropy, mse",
    )
