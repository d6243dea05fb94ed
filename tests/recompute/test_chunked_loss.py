"""The chunked cross-entropy (``memopt.recompute.loss``): the loss and gradients of the unchunked
one within fp32 rounding, as a helper and as the policy plan ``MODULE: chunked-loss`` on Hugging Face
causal LMs. In this process with plain PyTorch (no ORT)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.torch_steps import policy

from memopt import recompute
from memopt.backends.torch.gradients import seeded_step
from memopt.recipes import load_hf_recipe, load_recipe
from memopt.recompute import RecomputePlan, RecomputePolicyError
from memopt.recompute.loss import causal_lm_head, chunked_cross_entropy

# Chunked, the sum over tokens runs chunk by chunk and each chunk's matmul blocks its sums anew:
# equal to fp32 rounding over a few hundred terms, not to the bit.
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.parametrize("chunk_tokens", [1, 7, 64, 1000])
def test_the_chunked_loss_and_its_gradients_equal_the_unchunked_ones(chunk_tokens: int) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(3, 20, 16, requires_grad=True)
    weight = torch.randn(300, 16, requires_grad=True)
    bias = torch.randn(300, requires_grad=True)
    labels = torch.randint(0, 300, (3, 20))
    labels[0, :5] = -100  # padding the loss skips
    expected = F.cross_entropy((hidden[:, :-1] @ weight.T + bias).reshape(-1, 300), labels[:, 1:].reshape(-1))
    wanted = torch.autograd.grad(expected, (hidden, weight, bias))
    loss = chunked_cross_entropy(hidden, weight, labels, bias, shift=True, chunk_tokens=chunk_tokens)
    got = torch.autograd.grad(loss, (hidden, weight, bias))
    torch.testing.assert_close(loss, expected, rtol=RTOL, atol=ATOL)
    for have, want in zip(got, wanted):
        torch.testing.assert_close(have, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("name", "layer"), [("llama", "model.layers.0"), ("qwen2", "model.layers.1"), ("gpt2", "transformer.h.0")]
)
def test_a_causal_lm_under_chunked_loss_trains_as_without_it(name: str, layer: str) -> None:
    """With one layer of two checkpointed beside it (dropout on in GPT-2's): the plans compose."""
    recipe = load_hf_recipe(f"hf:{name}", {"size": "tiny", "seq_len": 16})
    head = causal_lm_head(recipe.model())
    assert head == "lm_head"
    plain = seeded_step(recipe, None, 3)
    chunked = seeded_step(recipe, policy(f"{head}: chunked-loss", f"{layer}: *"), 3)
    assert plain.keys() == chunked.keys()
    for key in plain:
        torch.testing.assert_close(chunked[key], plain[key], rtol=RTOL, atol=ATOL, msg=key)


def test_the_chunked_loss_returns_the_loss_and_no_logits() -> None:
    recipe = load_hf_recipe("hf:llama", {"size": "tiny", "seq_len": 16})
    model = recompute.apply(recipe.model(), policy("lm_head: chunked-loss"))
    inputs, _ = recipe.batch(2)
    out = model(**inputs)
    assert out.loss is out["loss"] and out.loss.ndim == 0 and out.logits is None
    by_position = model(inputs["input_ids"], labels=inputs["labels"])
    assert by_position.logits is None and float(by_position.loss) == float(out.loss)
    without_labels = model(input_ids=inputs["input_ids"])  # generation and evaluation get logits as before
    assert without_labels.logits.shape == (2, 16, 1000)


def test_chunked_loss_on_a_module_that_is_not_a_causal_lm_head_is_refused() -> None:
    assert str(RecomputePlan.parse("lm_head: chunked-loss")) == "lm_head: chunked-loss"
    with pytest.raises(RecomputePolicyError, match="Hugging Face causal LM"):
        recompute.apply(load_recipe("mlp", {"size": "tiny"}).model(), policy("0: chunked-loss"))
    with pytest.raises(RecomputePolicyError, match="output head, lm_head"):
        recompute.apply(load_hf_recipe("hf:llama", {"size": "tiny"}).model(), policy("model.norm: chunked-loss"))


@pytest.mark.parametrize("duplicate", ["deepcopy", "torch.save"])
def test_a_copy_under_chunked_loss_trains_its_own_weights(duplicate: str, tmp_path: Path) -> None:
    """The loss's forward holds its model, not a closure over it: a copy (EMA, teacher) or a saved
    and loaded model computes the chunked loss over its own head and puts gradients on itself."""
    recipe = load_hf_recipe("hf:llama", {"size": "tiny", "seq_len": 16})
    original = recompute.apply(recipe.model(), policy("lm_head: chunked-loss"))
    if duplicate == "deepcopy":
        duplicated = copy.deepcopy(original)
    else:
        torch.save(original, tmp_path / "model.pt")
        duplicated = torch.load(tmp_path / "model.pt", weights_only=False)
    inputs, _ = recipe.batch(2)
    out = duplicated(**inputs)
    assert out.logits is None
    out.loss.backward()
    assert all(p.grad is None for p in original.parameters())
    assert duplicated.lm_head.weight.grad is not None
