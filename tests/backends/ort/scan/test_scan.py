"""`memopt scan` against ORT itself: the same plans, frequencies and savings as ORT's Plan table."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from support.cli import CliRun, assert_one_line_error, memopt

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.logparse import parse_file
from memopt.backends.ort.scan import scan_graph
from memopt.backends.ort.scan.modules import module_path
from memopt.backends.ort.scan.parity import compare_plans
from memopt.graph.polynomial import Polynomial

pytestmark = pytest.mark.ort  # real ORTModule runs or ORT sessions

SAMPLES = Path(__file__).parents[4] / "sample_logs"


def _parity(run: CliRun, version: str = "1.19.2", log: Path | None = None, layerwise: bool = False):
    summary = parse_file(log or run.log_path).summaries[-1]
    report = scan_graph(load_graph(run.execution_graph), version, dims=dict(summary.dims), layer_boundary=layerwise)
    return report, summary, compare_plans(report.patterns, summary.plans)


@pytest.mark.parametrize("recipe", ["gpt", "bert", "mlp"])
def test_same_plans_as_ort_1_19(recipe: str, tiny_probe: Callable[[str], CliRun]) -> None:
    report, summary, parity = _parity(tiny_probe(recipe))
    assert summary.plans, "ORT printed a Plan table"
    assert parity.complete, [p for p in parity.plans if not p.agrees]
    assert {p.key for p in report.patterns} == {p.key for p in summary.plans}


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5"])
@pytest.mark.long
def test_hf_scan_lists_the_cells_ort_prints_at_the_users_batch(name: str, tmp_path: Path) -> None:
    """``memopt scan hf:NAME`` (its own probe, evaluated at batch 4 x 64 tokens) lists the
    Configs cells and frequencies of the Plan table ORT prints training at that batch; the
    rotary (Llama) and attention-mask (GPT-2, T5) strings follow ORT's own node order."""
    sizes = ("--size", "tiny", "--batch", "4", "--seq", "64", "--runs-dir", str(tmp_path))
    run = memopt("probe", f"hf:{name}", *sizes, "--steps", "1")
    assert run.returncode == 0, run.stderr
    printed = {p.key: p.frequency for p in [s for s in parse_file(run.log_path).summaries if s.plans][-1].plans}
    scan = memopt("scan", f"hf:{name}", *sizes, "--json")
    assert scan.returncode == 0, scan.stderr
    assert {p["config"]: p["frequency"] for p in json.loads(scan.stdout)["plans"]} == printed


def test_cnn_has_no_plans_in_either(tiny_probe: Callable[[str], CliRun]) -> None:
    run = tiny_probe("cnn")
    report = scan_graph(load_graph(run.execution_graph), "1.19.2")
    assert report.patterns == () and not any(s.plans for s in parse_file(run.log_path).summaries)


def test_savings_equal_ort_max_saving_except_the_documented_quirk(gpt_probe: CliRun) -> None:
    report, summary, _ = _parity(gpt_probe)
    logged = {p.key: p for p in summary.plans}
    for pattern in report.patterns:
        printed = logged[pattern.key].max_saving_bytes
        single_output = all(len(o.ort_choices) == 1 for o in pattern.occurrences)
        if single_output:
            assert pattern.exact.evaluate(summary.dims) == printed, pattern.key
        else:  # LayerNorm (mean, inv-std) and Dropout (mask): ORT counts one output per node
            assert pattern.exact.evaluate(summary.dims) > printed, pattern.key
            assert pattern.ort_matches(Polynomial.from_expression(logged[pattern.key].saving_symbolic))


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_layerwise_boundary_matches_ort_memory_opt_level(level: str, gpt_probe: CliRun) -> None:
    """ORTMODULE_MEMORY_OPT_LEVEL=1/2 logs (captured from the same tiny GPT) list plans found with layer boundaries."""
    log = SAMPLES / "1.19.2" / f"gpt-tiny_b4_devinfo_{level}.log"
    report, _, parity = _parity(gpt_probe, log=log, layerwise=True)
    assert parity.complete, [p for p in parity.plans if not p.agrees]
    assert next(p for p in report.patterns if p.key == "Add+:1:-1").frequency == 3  # one residual Add is a boundary


def test_where_each_plan_lives(gpt_probe: CliRun) -> None:
    report = scan_graph(load_graph(gpt_probe.execution_graph), "1.19.2")
    modules = {p.key: set(p.modules) for p in report.patterns}
    assert modules["FusedMatMul+Add+:1:-1"] == {"blocks.0.mlp.fc", "blocks.1.mlp.fc"}
    assert modules["Gelu+:1:-1"] == {"blocks.0.mlp.fc", "blocks.1.mlp.fc"}  # fused node: its input's module
    assert module_path("/_original_module/blocks.3/mlp/fc/MatMul/MatmulTransposeFusion/") == "blocks.3.mlp.fc"
    assert module_path("Gelu_token_0") is None


def test_scan_cli_json_at_user_sizes(gpt_probe: CliRun) -> None:
    run = memopt("scan", str(gpt_probe.execution_graph), "--batch", "16", "--seq", "64", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["dims"] == {"input_ids_dim0": 16, "input_ids_dim1": 64}
    by_key = {p["config"]: p for p in result["plans"]}
    assert by_key["FusedMatMul+Add+:1:-1"]["saving_bytes"] == 2048 * 16 * 64
    assert by_key["FusedMatMul+Where+Softmax+:1:-1"]["saving_bytes"] == 16 * 16 * 64**2
    assert result["stashed_bytes"] > sum(p["saving_bytes"] for p in result["plans"] if p["type"] == "recompute") / 2
    assert by_key["Gelu+:1:-1"]["occurrences"][0]["nodes"]
    # The first line says which back end answers, as on every back end; stdout stays the JSON.
    assert run.stderr.splitlines()[0].startswith("backend: ort (ORTModule can run here"), run.stderr


def test_scan_cli_table_csv_and_plot(gpt_probe: CliRun, tmp_path: Path) -> None:
    table = memopt(
        "scan", str(gpt_probe.execution_graph), "--batch", "8", "--seq", "32", "--plot", str(tmp_path / "s.png")
    )
    assert table.returncode == 0, table.stderr
    assert "FusedMatMul+Add+:1:-1" in table.stdout and "blocks.*.mlp.fc" in table.stdout
    assert (tmp_path / "s.png").stat().st_size > 10_000
    csv = memopt("scan", str(gpt_probe.execution_graph), "--dims", "input_ids_dim0=8,input_ids_dim1=32", "--csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].startswith("config,subgraph,type,frequency")


def test_scan_a_recipe_probes_it_first(runs_dir: Path) -> None:
    run = memopt("scan", "mlp", "--size", "tiny", "--batch", "64", "--runs-dir", str(runs_dir), "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert {p["config"] for p in result["plans"]} == {"Gemm+:1:-1", "Gelu+Dropout+:1:-1"}
    assert result["dims"]["input_dim0"] == 64


def test_scan_ignores_the_users_config_when_building_the_graph(runs_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "cfg.json"
    config.write_text('["Gemm+:1:-1"]')
    run = memopt(
        "scan",
        "mlp",
        "--size",
        "tiny",
        "--runs-dir",
        str(runs_dir),
        "--json",
        env={"ORTMODULE_MEMORY_OPT_CONFIG": str(config)},
    )
    assert run.returncode == 0, run.stderr
    assert {p["config"] for p in json.loads(run.stdout)["plans"]} == {"Gemm+:1:-1", "Gelu+Dropout+:1:-1"}


def _with_second_yield(source: Path, target: Path) -> None:
    model = onnx.load(source)
    yield_node = next(n for n in model.graph.node if n.op_type == "YieldOp")
    extra = onnx.NodeProto()
    extra.CopyFrom(yield_node)
    extra.name = "second_yield"
    del extra.output[:]
    model.graph.node.append(extra)
    onnx.save(model, target)


def test_bad_inputs(gpt_probe: CliRun, tmp_path: Path) -> None:
    graph = str(gpt_probe.execution_graph)
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x01garbage")
    assert_one_line_error(memopt("scan", str(corrupt)), "is not a readable ONNX model")
    assert_one_line_error(memopt("scan", str(tmp_path / "missing.onnx")), "no such file")
    two = tmp_path / "two_yields.onnx"
    _with_second_yield(gpt_probe.execution_graph, two)
    assert_one_line_error(memopt("scan", str(two)), "multiple YieldOps", "second_yield")
    assert_one_line_error(memopt("scan", graph, "--dims", "batch=3"), "unknown dim name(s) batch", "input_ids_dim0")
    assert_one_line_error(memopt("scan", graph, "--ort-version", "1.13.1"), "no memory-optimizer rules for ORT 1.13.1")
    assert_one_line_error(
        memopt("scan", graph, "--plot", str(tmp_path / "x.pdf"), "--batch", "2", "--seq", "8"),
        "--plot needs a .png or .svg",
    )


def test_seq_needs_a_token_input(tiny_probe: Callable[[str], CliRun]) -> None:
    run = memopt("scan", str(tiny_probe("mlp").execution_graph), "--seq", "128")
    assert_one_line_error(run, "--seq: this graph has no such dynamic dim", "input_dim0")
