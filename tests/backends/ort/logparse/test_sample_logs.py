"""Every real log in sample_logs/ against the facts its capture read off it independently.

sample_logs/MANIFEST.json holds, per log, what capture.py's plain regexes saw (plan rows,
Format A blocks, MemoryInsight statuses, dims, recomputed-node totals, ORT's error lines).
memopt's parser must recover the same from each log of every release.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from memopt.backends.ort.logparse import OptimizationType, ParseResult, parse_file

SAMPLES = Path(__file__).parents[4] / "sample_logs"
MANIFEST = json.loads((SAMPLES / "MANIFEST.json").read_text())
LOGS = [entry for entry in MANIFEST["files"] if entry["kind"] == "log"]


def _plans(result: ParseResult):
    return [plan for summary in result.summaries for plan in summary.plans]


@pytest.mark.parametrize("entry", LOGS, ids=[entry["file"] for entry in LOGS])
def test_parser_recovers_what_the_log_says(entry: dict) -> None:
    facts = entry["facts"]
    result = parse_file(SAMPLES / entry["file"])
    plans = _plans(result)

    # The capture's regex misses rows whose saving expression starts with a letter
    # (bert's Dropout+ on 1.19), so its rows are a subset of the table: Plan 1..N, every
    # row it saw identical.
    table = {plan.plan_number: plan for plan in plans if plan.plan_number is not None}
    assert sorted(table) == list(range(1, len(table) + 1)) and len(table) >= facts["plan_rows"]
    for row in facts["plans"]:
        plan = table[row["plan"]]
        assert (plan.enabled, plan.key, plan.frequency) == (row["on"], row["config"], row["freq"])
        # ORT prints the expression itself where a dim is unknown (empty_dim_param<k>).
        printed = row["max_saving"].replace(",", "")
        assert plan.max_saving_bytes == (int(printed) if printed.isdigit() else None)
    if len(table) == facts["plan_rows"]:
        assert sum(plan.enabled for plan in table.values()) == facts["plans_on"]

    blocks = Counter(
        (b["subgraph"], b["section"] == "RecomputeWithCompromise", b["frequency"]) for b in facts["format_a_blocks"]
    )
    parsed_blocks = Counter(
        (p.subgraph, p.optimization is OptimizationType.COMPROMISE, p.frequency)
        for p in plans
        if any(s.sources and "MemoryOptimizer" in s.sources[0].value for s in result.summaries)
    )
    if blocks:
        assert parsed_blocks == blocks

    applied = Counter(
        int(m.group(1))
        for status in facts["insight_status"]
        if (m := re.search(r"actual applied count=(-?\d+)", status))
    )
    parsed_applied = Counter(c.applied_count for p in plans for c in p.clusters if c.applied_count is not None)
    assert parsed_applied == applied

    if facts["first_batch_dims"]:
        expected = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", facts["first_batch_dims"])}
        assert any(dict(s.dims) == expected for s in result.summaries)
    totals = [s.total_recomputed_nodes for s in result.summaries if s.total_recomputed_nodes is not None]
    assert sorted(totals) == sorted(facts["total_recomputed_nodes"])
    if entry["status"] != "ok" and facts["error_lines"] and "Fail to" in " ".join(facts["error_lines"]):
        assert result.ort_errors, "ORT's config error is reported"


def test_every_release_and_format_is_in_the_samples() -> None:
    versions = {entry["version"] for entry in LOGS}
    assert {"1.15.1", "1.16.3", "1.17.3", "1.18.0", "1.19.2"} <= versions
    assert any(entry["facts"]["format_a_blocks"] for entry in LOGS)
    assert any(entry["facts"]["insight_options"] for entry in LOGS)
    assert any(entry["facts"]["python_logger_rewrap"] for entry in LOGS)
