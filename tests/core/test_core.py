"""The shared vocabulary: targets parsed once, a run's status, its memory record, and the
settings every run checks with one wording. Pure logic: no run, no subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from memopt.backends.ort.trials import TrialSpec
from memopt.core import (
    BuiltinRecipe,
    Command,
    GraphFile,
    HfConfig,
    RecipeSource,
    RunStatus,
    parse_runnable,
    parse_target,
)
from memopt.core.memory import Memory
from memopt.errors import MemoptError
from memopt.recipes import recipe_source
from memopt.run import RunRequest, RunSettings
from memopt.tune import TuneSettings


@pytest.mark.parametrize(
    ("spec", "kind", "label"),
    [
        ("gpt", BuiltinRecipe, "gpt"),
        ("hf:gpt2", HfConfig, "hf-gpt2"),
        ("cmd:torchrun --nproc_per_node 2 train.py --batch-size {batch}", Command, "train"),
        ("model.onnx", GraphFile, "model"),
        ("my_recipes/big.py", RecipeSource, "big"),
        ("pkg.models:factory", RecipeSource, "pkg"),
    ],
)
def test_a_spec_parses_to_one_kind_with_its_label(spec: str, kind: type, label: str) -> None:
    target = parse_target(spec)
    assert type(target) is kind and target.spec == spec and str(target) == spec
    assert target.label == label


def test_an_existing_non_python_file_is_a_graph(tmp_path: Path) -> None:
    graph = tmp_path / "saved_graph"
    graph.write_bytes(b"\x08\x07")
    assert isinstance(parse_target(str(graph)), GraphFile)


def test_only_a_command_without_its_placeholder_has_a_fixed_batch() -> None:
    assert parse_target("cmd:python train.py").fixed_batch
    assert not parse_target("cmd:python train.py --bs {batch}").fixed_batch
    assert not parse_target("gpt").fixed_batch


def test_a_graph_file_is_refused_where_a_run_is_needed() -> None:
    with pytest.raises(MemoptError, match="only memopt scan reads one"):
        parse_runnable("model.onnx")


def test_a_recipe_file_is_identified_by_its_content(tmp_path: Path) -> None:
    recipe = tmp_path / "r.py"
    recipe.write_text("x = 1\n")
    before = parse_target(str(recipe)).identity()
    recipe.write_text("x = 2\n")
    assert parse_target(str(recipe)).identity() != before
    assert parse_target("gpt").identity() == "gpt"


def test_a_status_word_reads_back_and_an_unknown_one_is_a_crash() -> None:
    assert RunStatus.read("out_of_memory") is RunStatus.OUT_OF_MEMORY
    assert RunStatus.read("something_new") is RunStatus.CRASHED
    assert RunStatus.read(None) is RunStatus.CRASHED
    assert RunStatus.RECIPE_ERROR.fatal and RunStatus.STACK_ERROR.fatal and not RunStatus.OUT_OF_MEMORY.fatal
    assert RunStatus.RECIPE_ERROR.failure("recipe") == "the recipe is broken"
    assert RunStatus.RECIPE_ERROR.failure("training command") == "the training command failed"
    assert RunStatus.OUT_OF_MEMORY.failure("recipe") == "out of memory"


def test_memory_figures_that_are_not_byte_counts_are_unknown() -> None:
    record = {"memory_kind": "rss", "static_bytes": "abc", "peak_bytes": float("inf"), "peak_over_run_bytes": 7.0}
    assert Memory.from_record(record) == Memory(memory_kind="rss", peak_over_run_bytes=7)
    assert Memory.from_record({"peak_bytes": True, "cuda_reserved_bytes": -1}) == Memory()


def test_the_highest_memory_over_ranks_takes_each_figure_on_its_own() -> None:
    ranks = [Memory("rss", 10, 30, 50, None), Memory("rss", 20, 25, 40, None)]
    assert Memory.highest(ranks) == Memory("rss", 20, 30, 50, None)
    assert Memory(peak_over_run_bytes=9).steady_or_run_peak == 9
    assert Memory(peak_bytes=5, peak_over_run_bytes=9).steady_or_run_peak == 5


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RunRequest(RunSettings(target=parse_runnable("gpt")), 0), "--batch must be a positive integer, not 0"),
        (
            lambda: TrialSpec(RunSettings(target=parse_runnable("gpt")), -2),
            "--batch must be a positive integer, not -2",
        ),
        (
            lambda: TuneSettings(run=RunSettings(target=parse_runnable("gpt")), target_batch=0),
            "--target-batch must be a positive integer, not 0",
        ),
        (
            lambda: RunRequest(RunSettings(target=parse_runnable("gpt"), steps=0), 1),
            "--steps must be a positive integer, not 0",
        ),
        (
            lambda: TrialSpec(RunSettings(target=parse_runnable("gpt"), steps=0), 1),
            "--steps must be a positive integer, not 0",
        ),
        (
            lambda: TuneSettings(run=RunSettings(target=parse_runnable("gpt"), steps=0), target_batch=4),
            "--steps must be a positive integer, not 0",
        ),
        (
            lambda: TrialSpec(RunSettings(target=parse_runnable("gpt"), device="tpu"), 1),
            "--device must be auto, cpu or cuda",
        ),
        (
            lambda: RunRequest(RunSettings(target=parse_runnable("cmd:python t.py"), options={"size": "tiny"}), 1),
            "recipe options (--size, --seq, -o) do not apply to a command",
        ),
    ],
)
def test_every_run_setting_is_checked_with_one_wording(build: object, message: str) -> None:
    with pytest.raises(MemoptError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()  # type: ignore[operator]


def test_a_recipe_path_keeps_its_colons_and_a_long_name_gives_a_short_safe_label(tmp_path: Path) -> None:
    assert recipe_source("exp:1/train.py") == ("exp:1/train.py", "")
    assert recipe_source("exp:1/train.py:Recipe") == ("exp:1/train.py", "Recipe")
    assert recipe_source("package.module:attr") == ("package.module", "attr")
    long = tmp_path / f"{'x' * 230}.py"
    long.write_text("")
    label = parse_target(str(long)).label
    assert len(label) <= 64 and label.startswith("xxx")
    assert label != parse_target(str(tmp_path / f"{'x' * 229}.py")).label  # the digest tells them apart
    assert parse_target("cmd:python 'my run: v2.py'").label == "my-run--v2"
