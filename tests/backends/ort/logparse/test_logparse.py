"""The log parser on the doc's samples, real 1.19.2 logs, damaged and hostile input."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.logsamples import (
    FORMAT_A_1_15,
    FORMAT_B_1_17,
    PLAN_TABLE_1_17,
    PLAN_TABLE_1_19,
    SAMPLE_LOGS_1_19,
    rewrap_like_1_16,
)

from memopt.backends.ort.logparse import (
    LogReadError,
    NoSummaryError,
    OptimizationType,
    SummarySource,
    parse_file,
    parse_lines,
    parse_text,
    plans_dataframe,
    require_summaries,
)
from memopt.errors import MemoptError

# The hand-captured gpt-tiny runs this test knows in detail; tests/backends/ort/logparse/test_sample_logs.py checks
# every log of every release against its capture facts.
REAL_LOGS = sorted(SAMPLE_LOGS_1_19.glob("gpt-tiny_*.log"))
CONFIG_LOG = SAMPLE_LOGS_1_19 / "gpt-tiny_b4_devinfo_json-config.log"


def _only_summary(text: str):
    result = parse_text(text)
    assert len(result.summaries) == 1, result
    return result.summaries[0]


def _check_format_a(summary) -> None:
    assert summary.sources == (SummarySource.MEMORY_OPTIMIZER_SUMMARY,)
    assert summary.user_config == "BiasGelu+Cast+Cast+:1:2,Cast+:1:-1,Dropout+:0:-1"
    fused, bias_gelu, cast = summary.plans
    assert (fused.subgraph, fused.optimization, fused.enabled, fused.frequency) == (
        "FusedMatMul+Add+Dropout+Add+",
        OptimizationType.RECOMPUTE,
        False,
        6,
    )
    assert (bias_gelu.requested_count, bias_gelu.applied_count, bias_gelu.enabled) == (2, 2, True)
    assert (cast.optimization, cast.key, cast.requested_count, cast.applied_count) == (
        OptimizationType.COMPROMISE,
        "Cast+:1:-1",
        -1,
        1,
    )
    output = fused.clusters[0].outputs[0]
    assert output.shape == "attention_mask_dim0 x input_ids_dim1 x 64 x"
    assert output.element_count.evaluate({"attention_mask_dim0": 2, "input_ids_dim1": 8}) == 1024


def test_format_a_raw_tab_form() -> None:
    summary = _only_summary(FORMAT_A_1_15)
    _check_format_a(summary)
    assert str(summary.versions) == "1.14-1.16"


def test_format_a_rewrapped_by_the_1_16_logger() -> None:
    summary = _only_summary(rewrap_like_1_16(FORMAT_A_1_15))
    _check_format_a(summary)
    assert str(summary.versions) == "1.16"


def test_rewrapped_long_subgraph_and_shape_are_rejoined() -> None:
    subgraph = "FusedMatMul+Add+" * 14
    shape = "batch_dim0 x " * 20
    text = FORMAT_A_1_15.replace("FusedMatMul+Add+Dropout+Add+", subgraph).replace(
        "attention_mask_dim0 x input_ids_dim1 x 64 x ", shape
    )
    wrapped = rewrap_like_1_16(text)
    assert max(len(line) for line in wrapped.splitlines()) <= 184
    plan = _only_summary(wrapped).plans[0]
    assert plan.subgraph == subgraph
    assert plan.clusters[0].outputs[0].shape == shape.strip()


def test_format_b_memory_insight_table() -> None:
    summary = _only_summary(FORMAT_B_1_17)
    assert summary.sources == (SummarySource.MEMORY_INSIGHT_SUMMARY,)
    assert str(summary.versions) == "1.17"
    assert summary.user_config == "BiasGelu+Cast+Cast+:1:2,Cast+:2:-1,Dropout+:0:-1"
    bias_gelu, cast = summary.plans
    assert (bias_gelu.enabled, bias_gelu.requested_count, bias_gelu.applied_count, bias_gelu.frequency) == (
        True,
        2,
        3,
        3,
    )
    assert (cast.optimization, cast.enabled, cast.key) == (OptimizationType.COMPROMISE, False, "Cast+:2:-1")
    output = cast.clusters[0].outputs[0]
    assert (output.output_index, output.bytes_per_element, output.saved_percent) == (0, 4, 50)
    assert output.element_count.symbols == {"attention_mask_dim0", "attention_mask_dim1"}
    assert not summary.warnings


@pytest.mark.parametrize(("text", "versions", "plans"), [(PLAN_TABLE_1_17, "1.17", 4), (PLAN_TABLE_1_19, "1.19", 8)])
def test_plan_tables_evaluate_to_orts_max_saving(text: str, versions: str, plans: int) -> None:
    summary = _only_summary(text)
    assert str(summary.versions) == versions and len(summary.plans) == plans
    assert summary.memory_optimizer_on is False
    for plan in summary.plans:
        assert plan.saving_at_logged_dims == plan.max_saving_bytes
    assert not summary.warnings


def test_plan_table_joins_the_insight_table_of_the_same_build() -> None:
    summary = _only_summary(FORMAT_B_1_17 + PLAN_TABLE_1_17)
    assert summary.sources == (SummarySource.MEMORY_INSIGHT_SUMMARY, SummarySource.FEATURE_TABLE)
    by_key = {plan.key: plan for plan in summary.plans}
    assert by_key["BiasGelu+Cast+Cast+:1:-1"].applied_count == 3
    assert by_key["Cast+:2:-1"].clusters[0].outputs[0].saved_percent == 50
    assert by_key["FusedMatMul+:1:-1"].clusters == ()


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda path: path.name)
def test_real_1_19_logs(path: Path) -> None:
    result = parse_file(path)
    assert not result.warnings
    if "bad-config" in path.name:
        assert not result.summaries and result.ort_errors
        with pytest.raises(NoSummaryError, match="config error"):
            require_summaries(result)
        return
    (summary,) = result.summaries
    assert str(summary.versions) == "1.19.2"
    assert summary.dims == {"input_ids_dim0": 16 if "_b16_" in path.name else 4, "input_ids_dim1": 32}
    assert [plan.plan_number for plan in summary.plans] == list(range(1, 11))
    for plan in summary.plans:
        assert plan.saving_at_logged_dims == plan.max_saving_bytes
        assert plan.enabled is (
            summary.optimization_level is not None
            and ("level" in path.name or plan.subgraph in ("FusedMatMul+Add+", "Gelu+"))
        )


def test_real_devinfo_log_with_a_json_config() -> None:
    (summary,) = parse_file(CONFIG_LOG).summaries
    assert summary.user_config == "/tmp/cap/cfg.json" and summary.optimization_level == "USER_SPECIFIED"
    assert summary.total_recomputed_nodes == len(summary.node_events) == 4
    assert {event.op_type for event in summary.node_events} == {"Gelu", "Add"}
    gelu = next(plan for plan in summary.plans if plan.subgraph == "Gelu+")
    assert (gelu.requested_count, gelu.applied_count) == (-1, 2)
    layer_norm = next(plan for plan in summary.plans if plan.subgraph == "LayerNormalization+")
    assert sum(cluster.frequency for cluster in layer_norm.clusters) == layer_norm.frequency == 5
    assert {output.output_index for cluster in layer_norm.clusters for output in cluster.outputs} == {0, 1, 2}


def test_savings_at_user_dims_match_orts_own_run_at_those_dims() -> None:
    (small,) = parse_file(SAMPLE_LOGS_1_19 / "gpt-tiny_b4_info_no-config.log").summaries
    (large,) = parse_file(SAMPLE_LOGS_1_19 / "gpt-tiny_b16_info_no-config.log").summaries
    ort_at_16 = {plan.key: plan.max_saving_bytes for plan in large.plans}
    for plan in small.plans:
        # Nodes with several stashed outputs count only the last, in hash order, so their
        # saving varies between runs.
        if plan.subgraph not in ("LayerNormalization+", "Dropout+"):
            assert plan.saving_at({"input_ids_dim0": 16, "input_ids_dim1": 32}) == ort_at_16[plan.key]


def test_dataframe_has_one_row_per_plan() -> None:
    frame = plans_dataframe(parse_file(CONFIG_LOG))
    assert len(frame) == 10
    assert frame.loc[0, "config_key"] == "FusedMatMul+Add+:1:-1" and frame.loc[0, "max_saving_bytes"] == 262144


def test_ansi_crlf_and_line_prefixes() -> None:
    prefixed = "".join(
        f"2024-05-01T10:00:00.{i:06d}Z stdout F \x1b[33m{line}\x1b[0m\r\n"
        for i, line in enumerate(PLAN_TABLE_1_19.splitlines())
    )
    summary = _only_summary(prefixed)
    assert summary.dims == {"ids_dim0": 16, "ids_dim1": 256}
    assert [plan.saving_at_logged_dims for plan in summary.plans] == [plan.max_saving_bytes for plan in summary.plans]


def test_several_summaries_are_kept_apart_in_order() -> None:
    build_1_17 = FORMAT_B_1_17 + PLAN_TABLE_1_17
    result = parse_text(build_1_17 + "noise\n" + build_1_17 + PLAN_TABLE_1_19)
    both = (SummarySource.MEMORY_INSIGHT_SUMMARY, SummarySource.FEATURE_TABLE)
    assert [summary.sources for summary in result.summaries] == [both, both, (SummarySource.FEATURE_TABLE,)]
    assert [len(summary.plans) for summary in result.summaries] == [4, 4, 8]
    assert result.summaries[0].first_line < result.summaries[1].first_line < result.summaries[2].first_line
    assert not result.warnings


@pytest.mark.parametrize("tag", ["[rank{}]: ", "[default{}]:", "[1,{}]<stdout>:", "{}: "])
def test_interleaved_ranks_are_kept_apart(tag: str) -> None:
    rank0 = [tag.format(0) + line for line in PLAN_TABLE_1_19.splitlines()]
    rank1 = [tag.format(1) + line for line in FORMAT_B_1_17.splitlines()]
    merged = [line for pair in zip(rank0, rank1) for line in pair] + rank0[len(rank1) :] + rank1[len(rank0) :]
    result = parse_lines(merged)
    assert sorted(len(summary.plans) for summary in result.summaries) == [2, 8]
    assert len({summary.stream for summary in result.summaries}) == 2
    assert not result.warnings


def test_truncated_log_returns_what_was_read() -> None:
    lines = FORMAT_B_1_17.splitlines()
    result = parse_lines(lines[:12])
    (summary,) = result.summaries
    assert summary.truncated and summary.plans[0].subgraph == "BiasGelu+Cast+Cast+"
    assert any("ends inside" in warning for warning in result.warnings)


def test_no_summary_binary_and_missing_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.log"
    plain.write_text("hello\nworld\n")
    with pytest.raises(NoSummaryError):
        require_summaries(parse_file(plain))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(LogReadError, match="binary"):
        parse_file(binary)
    with pytest.raises(LogReadError):
        parse_file(tmp_path / "missing.log")
    with pytest.raises(LogReadError):
        parse_file(tmp_path)


def test_streaming_memory_is_bounded(tmp_path: Path) -> None:
    noise = "2024-01-01 00:00:00.000 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer X modified: 0\n"
    log = tmp_path / "big.log"
    with log.open("w") as handle:
        handle.write(PLAN_TABLE_1_19)
        handle.write(noise * (20_000_000 // len(noise)))
        handle.write("x" * 3_000_000 + "\n")  # one huge line without structure
        handle.write(PLAN_TABLE_1_19)
    tracemalloc.start()
    try:
        result = parse_file(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(result.summaries) == 2
    assert peak < 2_000_000, peak


# Real log slices, mutated at random: whatever happens, only MemoptError may escape.
_REAL_LINES = CONFIG_LOG.read_text().splitlines()[1430:1615]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 30))
def test_mutated_real_logs_never_crash(rng: random.Random, mutations: int) -> None:
    lines = list(_REAL_LINES)
    for _ in range(mutations):
        index = rng.randrange(len(lines))
        operation = rng.randrange(5)
        if operation == 0:
            del lines[index]
        elif operation == 1:
            lines.insert(index, lines[rng.randrange(len(lines))])
        elif operation == 2:
            cut = rng.randrange(len(lines[index]) + 1)
            lines[index] = lines[index][:cut]
        elif operation == 3:
            position = rng.randrange(len(lines[index]) + 1)
            lines[index] = lines[index][:position] + rng.choice("|:=()*x \t0-9,%[]\x1b\x00") + lines[index][position:]
        else:
            lines = lines[: index + 1]
        if len(lines) < 2:
            break
    try:
        result = parse_lines(lines)
        plans_dataframe(result)
    except MemoptError:
        pass


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=80),
            st.sampled_from(FORMAT_B_1_17.splitlines() + PLAN_TABLE_1_17.splitlines() + FORMAT_A_1_15.splitlines()),
        ),
        max_size=40,
    )
)
def test_random_text_never_crashes(lines: list[str]) -> None:
    try:
        parse_text("\n".join(lines))
    except MemoptError:
        pass


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "log"
    path.write_bytes(data)
    try:
        parse_file(path)
    except MemoptError:
        pass


def test_a_runs_summaries_end_where_its_warm_up_step_ended() -> None:
    """ORT prints its Plan table in the warm-up step; a table after memopt's step-1 line is not ORT's."""
    table = (
        "Memory Optimizer     :  {state}   :  User config: x\n"
        "                                Configs                 Freq  Max Saving(Bytes)  Saving Symbolic(Bytes)\n"
        " - Plan 1            :  {state}   :  Gelu+:1:-1              2     131,072            2048.0*x_dim0\n"
        "\n"
    )
    log = table.format(state="OFF") + "[memopt] rank 0 step 1/3: 0.812 s\n" + table.format(state="ON ")
    parsed = parse_text(log)
    assert [plan.enabled for summary in parsed.summaries for plan in summary.plans] == [False, True]
    assert [plan.enabled for summary in parsed.run_summaries for plan in summary.plans] == [False]
    assert parse_text(log.replace("[memopt]", "[other]")).run_summaries == parse_text(log).summaries  # not a run's log
