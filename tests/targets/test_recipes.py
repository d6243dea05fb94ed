"""The recipe contract, on the built-in recipes and on user recipes (in-process, no ORT)."""

from __future__ import annotations

import sys

import pytest
import torch
from support import RECIPES
from torch import nn

from memopt.recipes import (
    BUILTIN_RECIPES,
    DEFAULT_RECIPE,
    RecipeError,
    load_recipe,
    parse_option_value,
)
from memopt.recipes.defaults import default_loss


@pytest.mark.parametrize("name", sorted(BUILTIN_RECIPES))
def test_builtin_recipe_trains_in_pytorch(name: str) -> None:
    recipe = load_recipe(name, {"size": "tiny"})
    model = recipe.model()
    inputs, target = recipe.batch(3)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    output = model(*inputs)
    loss = (recipe.loss or default_loss)(output, target)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert output.shape[0] == 3


def test_default_recipe_is_builtin() -> None:
    assert DEFAULT_RECIPE in BUILTIN_RECIPES


def test_seq_len_reaches_make_batch() -> None:
    recipe = load_recipe("gpt", {"size": "tiny", "seq_len": 16})
    (ids,), target = recipe.batch(2)
    assert ids.shape == (2, 16) and target.shape == (2, 16)


def test_bert_batch_has_attention_mask() -> None:
    (ids, mask), labels = load_recipe("bert", {"size": "tiny"}).batch(4)
    assert mask.shape == ids.shape and set(mask.unique().tolist()) <= {0, 1}
    assert (labels[:, 0] >= 0).all()


def test_gpt_head_tied_or_untied() -> None:
    tied = load_recipe("gpt", {"size": "tiny"}).model()
    untied = load_recipe("gpt", {"size": "tiny", "tied": False}).model()
    assert tied.head.weight is tied.tok_emb.weight
    assert untied.head.weight is not untied.tok_emb.weight


def test_gpt_small_has_gpt2_small_shapes() -> None:
    from memopt.recipes.gpt import SIZES

    small = SIZES["small"]
    assert (small.n_layer, small.n_head, small.d_model, small.vocab_size, small.max_seq) == (12, 12, 768, 50257, 1024)


def test_user_file_recipe_with_options() -> None:
    recipe = load_recipe(str(RECIPES / "user_mlp.py"), {"width": 5, "noise": 0.0})
    model = recipe.model()
    assert isinstance(model, nn.Sequential) and model[0].out_features == 5
    x, y = recipe.batch(4)
    assert torch.allclose(y, x.sum(dim=1, keepdim=True))
    assert isinstance(recipe.optimizer(model.parameters()), torch.optim.SGD)


def test_module_attr_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(RECIPES))
    recipe = load_recipe("as_object:recipe")
    x, y = recipe.batch(2)
    assert recipe.model()(x).shape == (2, 3)
    sys.modules.pop("as_object", None)


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("no_such_recipe", {}, "not found: not a built-in (gpt, bert, mlp, cnn)"),
        (str(RECIPES / "missing.py"), {}, "not found"),
        (str(RECIPES / "fails_import.py"), {}, "failed to import: RuntimeError: this recipe cannot be imported"),
        (str(RECIPES / "no_make_batch.py"), {}, "has no make_batch()"),
        ("gpt", {"colour": "red"}, "takes no option colour"),
        ("memopt.recipes.gpt:nothing", {}, "has no attribute 'nothing'"),
    ],
)
def test_broken_recipes_are_named(spec: str, options: dict, message: str) -> None:
    with pytest.raises(RecipeError, match=None) as caught:
        load_recipe(spec, options)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "value"), [("3", 3), ("0.5", 0.5), ("True", True), ("false", False), ("tiny", "tiny")]
)
def test_option_values(text: str, value: object) -> None:
    assert parse_option_value(text) == value and type(parse_option_value(text)) is type(value)
