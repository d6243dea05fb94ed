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

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.logparse import ArenaGrowth, growth_parts_at, training_arena_growth
from memopt.backends.ort.predict.liveness import simulate
from memopt.backends.ort.rules import AnalysisOrder
from memopt.core import parse_runnable
from memopt.run.launch import LOG_NAME
from memopt.run.probe import probe
from memopt.run.settings import RunSettings

MiB = 1 << 20
SAMPLE_LOGS = Path(__file__).parents[4] / "sample_logs"

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
        ArenaGrowth(256, MiB, at_build=True),
        ArenaGrowth(6 * MiB, 8 * MiB),
    )


def test_regions_before_the_build_is_done_are_at_build() -> None:
    lines = _LOG.splitlines()
    # ORT 1.15 adds its first region as it optimises the graph, before saving the constants.
    saving = next(i for i, line in enumerate(lines) if "Saving initialized tensors" in line)
    earlier = [*lines[:saving], lines[saving + 1], lines[saving + 2], lines[saving], *lines[saving + 3 :]]
    assert training_arena_growth(earlier) == training_arena_growth(lines)
    # A log that does not say when the build was done (cut off, or another format) marks none.
    undone = [line for line in lines if "Done saving" not in line]
    assert training_arena_growth(undone) == (ArenaGrowth(256, MiB), ArenaGrowth(6 * MiB, 8 * MiB))


def test_regions_at_build_compare_on_their_sizes_others_on_their_requests_too() -> None:
    real = (ArenaGrowth(4096, MiB, at_build=True), ArenaGrowth(2 * MiB, 2 * MiB))
    assert growth_parts_at(real, (ArenaGrowth(256, MiB, at_build=True), ArenaGrowth(2 * MiB, 2 * MiB))) is None
    assert growth_parts_at(real, (*real, ArenaGrowth(4 * MiB, 4 * MiB))) is None  # more steps simulated
    assert growth_parts_at(real, (ArenaGrowth(4096, 2 * MiB, at_build=True), real[1])) == 0
    assert growth_parts_at(real, (real[0], ArenaGrowth(MiB, 2 * MiB))) == 1
    assert growth_parts_at(real, real[:1]) == 1
    # A log that does not mark its build: the simulation's marks are enough.
    unmarked = (ArenaGrowth(4096, MiB), real[1])
    assert growth_parts_at(unmarked, (ArenaGrowth(256, MiB, at_build=True), real[1])) is None
    assert growth_parts_at(unmarked, (ArenaGrowth(256, MiB), real[1])) == 0


@pytest.mark.parametrize("release", ["1.15.1", "1.16.3"])
@pytest.mark.parametrize("recipe", ["gpt", "bert", "mlp", "castmask"])
def test_older_releases_logs_grow_as_simulated(release: str, recipe: str) -> None:
    # 1.15 adds its first region as it optimises the graph; 1.16 wraps the build's lines.
    real = _sample_growth(release, f"{recipe}-no-config-info.log")
    assert real and real[0].at_build and not any(grown.at_build for grown in real[1:])
    graph = load_graph(SAMPLE_LOGS / "graphs" / release / f"{recipe}.onnx")
    symbols = dict.fromkeys(
        d for name in graph.graph_inputs for d in graph.tensor(name).dims or () if isinstance(d, str)
    )
    simulated = simulate(graph, dict(zip(symbols, (4, 32))), order=AnalysisOrder.FILE).arena_growth  # as captured
    assert growth_parts_at(real, simulated) is None, (real, simulated)


def test_the_constant_that_opens_the_arena_changes_between_runs() -> None:
    # Two 1.16.3 runs of the same tiny GPT: one opened for a scalar, the other for its causal mask.
    opened = {_sample_growth("1.16.3", name)[0] for name in ("gpt-no-config-info.log", "gpt-config-info.log")}
    assert opened == {ArenaGrowth(256, MiB, at_build=True), ArenaGrowth(4096, MiB, at_build=True)}


def _sample_growth(release: str, name: str) -> tuple[ArenaGrowth, ...]:
    with open(SAMPLE_LOGS / release / name, encoding="utf-8", errors="replace") as log:
        return training_arena_growth(log)


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
    result = probe(
        RunSettings(target=parse_runnable(recipe), options=options, runs_dir=tmp_path), batch, log_level="DEVINFO"
    )
    assert result.run.ran and result.execution_graph is not None, result.run.error
    with open(result.run.run_dir / LOG_NAME, encoding="utf-8", errors="replace") as log:
        real = training_arena_growth(log)
    assert len(real) >= 5  # a run that grew its arena, not an empty log

    graph = load_graph(result.execution_graph)
    batch_dim, seq_dim = graph.tensor("input_ids").dims or ()
    assert isinstance(batch_dim, str) and isinstance(seq_dim, str)
    simulated = simulate(graph, {batch_dim: batch, seq_dim: 64}, order=AnalysisOrder.FILE).arena_growth

    assert real[0].at_build  # the session's build is told apart from its steps
    assert growth_parts_at(real, simulated) is None, (real, simulated)
