"""A layer's selective set (its checkpoint keeping the matmuls' outputs), as the torch scan offers
it: training under it computes what it computes without, bitwise on CPU at a fixed seed, alone and
mixed with whole layers; its policy line reads back as written; a bad one is one clear error. In
this process with plain PyTorch (torch 2.4's private SAC generator, the public API from 2.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.torch_steps import assert_bitwise_equal

from memopt.backends.torch.scan import SELECTIVE_KEEP, scan_recipe
from memopt.recipes import Recipe, load_hf_recipe, load_recipe
from memopt.recompute import RecomputePlan, RecomputePolicy, RecomputePolicyError

RECIPES = {
    "gpt": lambda: load_recipe("gpt", {"size": "tiny", "n_layer": 3}),
    "hf:llama": lambda: load_hf_recipe("hf:llama", {"size": "tiny", "seq_len": 16, "num_hidden_layers": 3}),
}


def offered(recipe: Recipe) -> list[RecomputePlan]:
    """The selective sets the scan offers layer by layer."""
    return [row.plan for row in scan_recipe(recipe, 2, timed=False).layers if row.plan.keep]


@pytest.mark.parametrize("name", RECIPES)
def test_the_selective_sets_the_scan_offers_train_bitwise_equal(name: str) -> None:
    recipe = RECIPES[name]()
    selective = offered(recipe)
    # Per layer: keeping the projections' matmuls, and keeping every matmul.
    assert len(selective) == 6 and all({str(op) for op in plan.keep} <= set(SELECTIVE_KEEP[-1]) for plan in selective)
    projections = [plan for plan in selective if len(plan.keep) == 1]
    matmuls = [plan for plan in selective if len(plan.keep) > 1]
    # As tune mixes them: a layer selective, a layer whole, a layer untouched.
    assert_bitwise_equal(recipe, RecomputePolicy((projections[0], RecomputePlan(projections[1].module))))
    assert_bitwise_equal(recipe, RecomputePolicy((matmuls[0], projections[1], matmuls[2])))


@pytest.mark.parametrize(
    "line", ["model.layers.3: * except mm", "model.layers.3: * except bmm, mm", "blocks.*: * except addmm, bmm"]
)
def test_a_selective_line_reads_back_as_written(line: str, tmp_path: Path) -> None:
    plan = RecomputePlan.parse(line)
    assert str(plan) == line and RecomputePlan.parse(str(plan)) == plan
    policy = RecomputePolicy((plan,))
    policy.write(tmp_path / "policy.json")
    assert RecomputePolicy.read(tmp_path / "policy.json") == policy


def test_spellings_of_a_selective_line_print_one_way() -> None:
    plan = RecomputePlan.parse("model.layers.3 : * except aten.mm.default ,aten::bmm")
    assert str(plan) == "model.layers.3: * except mm.default, bmm"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("model.layers.3: * except", "'* except' is not an op name"),
        ("model.layers.3: * except mm,,bmm", "'' is not an op name"),
        ("model.layers.3: * except matmul", "cannot keep matmul: aten.matmul.default decomposes into other ops"),
        ("model.layers.3: * except linear", "cannot keep linear: aten.linear.default decomposes into other ops"),
        ("model.layers.3: * except bernoulli_", "cannot keep bernoulli_: aten.bernoulli_.Tensor is random"),
        ("model.layers.3: * except mm2", "has no op aten.mm2"),
    ],
)
def test_a_bad_selective_line_is_one_clear_error(line: str, said: str) -> None:
    with pytest.raises(RecomputePolicyError) as raised:
        RecomputePlan.parse(line)
    message = str(raised.value)
    assert said in message and "\n" not in message
