"""Parity with every ORT release that installs here, on the real graphs and logs in sample_logs/.

sample_logs/graphs/<release>/<model>.onnx is the execution graph ORTModule of that
release saved without a config; sample_logs/<release>/<model>-<scenario>-info.log is what
that release printed (no config, or ORTMODULE_MEMORY_OPT_LEVEL=1/2, whose Plan table is
computed with transformer layer boundaries). See sample_logs/README.md. Every plan row of
every release agrees (BENCHMARKS.md, "Parity"): memopt walks each release's own node order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.scan import ESTIMATED_ORDER_WARNING, scan_graph
from memopt.backends.ort.scan.parity import SESSION_INPUTS, captured_cases, captured_parity

SAMPLES = Path(__file__).parents[4] / "sample_logs"


@pytest.mark.parametrize(("release", "model", "scenario"), captured_cases(SAMPLES))
def test_scan_matches_the_release(release: str, model: str, scenario: str) -> None:
    parity = captured_parity(SAMPLES, release, model, scenario)
    assert parity.plans, "the release printed a Plan table"
    assert [p for p in parity.plans if not p.agrees] == []


def test_every_release_is_covered() -> None:
    releases = {case[0] for case in captured_cases(SAMPLES)}
    assert {"1.15.1", "1.16.3", "1.17.3", "1.18.0", "1.19.2"} <= releases


def test_bare_1_17_graph_estimates_ort_node_order_and_says_so() -> None:
    """Without the graph ORTModule handed its session, 1.17's ties between nodes are broken
    by an estimate of ORT's node indices: BERT's mask subgraph still comes out in ORT's order."""
    graph = SAMPLES / "graphs" / "1.17.3" / "bert.onnx"
    bare = scan_graph(load_graph(graph), "1.17.3")
    assert {p.key: p.frequency for p in bare.patterns}[
        "Unsqueeze+Unsqueeze+Cast+Sub+Mul+FusedMatMul+Add+Softmax+:1:-1"
    ] == 2
    assert ESTIMATED_ORDER_WARNING in bare.warnings
    exact = scan_graph(
        load_graph(graph, session_input=SAMPLES / "graphs" / "1.17.3" / SESSION_INPUTS / "bert.onnx"), "1.17.3"
    )
    assert ESTIMATED_ORDER_WARNING not in exact.warnings
    assert ESTIMATED_ORDER_WARNING not in scan_graph(load_graph(graph), "1.19.2").warnings
