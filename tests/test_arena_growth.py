"""The simulated CPU arena grows as ORT's does: the same regions, added for the same requests.

ORT logs every region its BFC arena adds at log level DEVINFO; a no-config run of a real
model is probed at that level and its graph played through the memory model's arena at the
run's dims. A kernel the model wrongly lets write into its input, or an output it wrongly
places in the arena, changes which request first fails to fit, so the two sequences part.
The regions added for the graph's constants are compared on their sizes: ORT saves the
constants in an order that changes from process to process (see memopt/logparse/arena.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memopt.core import parse_runnable
from memopt.graph.training_graph import load_graph
from memopt.logparse import ArenaGrowth, growth_parts_at, training_arena_growth
from memopt.ort.rules import AnalysisOrder
from memopt.predict.liveness import simulate
from memopt.run.launch import LOG_NAME
from memopt.run.probe import probe

MiB = 1 << 20

# Two arenas, as a real ORTModule run builds them (lines cut from one, timestamps kept out).
_LOG = """\
[I:onnxruntime:Default, bfc_arena.cc:29 BFCArena] Creating BFCArena for Cpu with following configs: initial_chunk_size_bytes: 1048576
[I:onnxruntime:Default, bfc_arena.cc:347 AllocateRawInternal] Extending BFCArena for Cpu. bin_num:0 (requested) num_bytes: 1 (actual) rounded_bytes:256
[I:onnxruntime:Default, bfc_arena.cc:206 Extend] Extended allocation by 1048576 bytes.
[I:onnxruntime:Default, bfc_arena.cc:29 BFCArena] Creating BFCArena for Cpu with following configs: initial_chunk_size_bytes: 1048576
[I:onnxruntime:, session_state_utils.cc:209 SaveInitializedTensors] Saving initialized tensors.
[I:onnxruntime:Default, bfc_arena.cc:347 AllocateRawInternal] Extending BFCArena for Cpu. bin_num:0 (requested) num_bytes: 24 (actual) rounded_bytes:256
[I:onnxruntime:Default, bfc_arena.cc:206 Extend] Extended allocation by 1048576 bytes.
[I:onnxruntime:Default, bfc_arena.cc:209 Extend] Total allocated bytes: 1048576
[I:onnxruntime:, session_state_utils.cc:360 SaveInitializedTensors] Done saving initialized tensors
[I:onnxruntime:Default, bfc_arena.cc:347 AllocateRawInternal] Extending BFCArena for Cpu. bin_num:13 (requested) num_bytes: 6291456 (actual) rounded_bytes:6291456
[I:onnxruntime:Default, bfc_arena.cc:206 Extend] Extended allocation by 8388608 bytes.
"""


def test_the_training_sessions_arena_is_the_last_created() -> None:
    assert training_arena_growth(_LOG.splitlines()) == (
        ArenaGrowth(256, MiB, for_constants=True),
        ArenaGrowth(6 * MiB, 8 * MiB),
    )


def test_regions_for_constants_compare_on_their_sizes_others_on_their_requests_too() -> None:
    real = (ArenaGrowth(4096, MiB, for_constants=True), ArenaGrowth(2 * MiB, 2 * MiB))
    assert growth_parts_at(real, (ArenaGrowth(256, MiB, for_constants=True), ArenaGrowth(2 * MiB, 2 * MiB))) is None
    assert growth_parts_at(real, (*real, ArenaGrowth(4 * MiB, 4 * MiB))) is None  # more steps simulated
    assert growth_parts_at(real, (ArenaGrowth(4096, 2 * MiB, for_constants=True), real[1])) == 0
    assert growth_parts_at(real, (ArenaGrowth(4096, MiB), real[1])) == 0  # not added for the constants
    assert growth_parts_at(real, (real[0], ArenaGrowth(MiB, 2 * MiB))) == 1
    assert growth_parts_at(real, real[:1]) == 1


def test_a_log_without_arena_lines_has_no_growth() -> None:
    assert training_arena_growth(["[W:onnxruntime:Default] something else"]) == ()


@pytest.mark.ort  # real ORTModule runs
@pytest.mark.parametrize(
    ("recipe", "options", "batch"),
    [
        ("gpt", {"size": "tiny", "seq_len": 64, "n_layer": 2}, 128),
        ("bert", {"size": "tiny", "seq_len": 64, "n_layer": 2}, 128),
    ],
)
def test_simulated_arena_adds_the_regions_ort_adds(
    tmp_path: Path, recipe: str, options: dict[str, object], batch: int
) -> None:
    result = probe(parse_runnable(recipe), batch, options=options, log_level="DEVINFO", runs_dir=tmp_path)
    assert result.run.ok and result.execution_graph is not None, result.run.error
    with open(result.run.run_dir / LOG_NAME, encoding="utf-8", errors="replace") as log:
        real = training_arena_growth(log)
    assert len(real) >= 5  # a run that grew its arena, not an empty log

    graph = load_graph(result.execution_graph)
    batch_dim, seq_dim = graph.tensor("input_ids").dims or ()
    assert isinstance(batch_dim, str) and isinstance(seq_dim, str)
    simulated = simulate(graph, {batch_dim: batch, seq_dim: 64}, order=AnalysisOrder.FILE).arena_growth

    assert real[0].for_constants  # the session's build is told apart from its steps
    assert growth_parts_at(real, simulated) is None, (real, simulated)
