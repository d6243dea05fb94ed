"""memopt.recompute on real models: gradients with a policy equal those without, bitwise, and
every way a policy can be wrong is one clear error. In this process with plain PyTorch (no ORT)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch
from support.torch_steps import assert_bitwise_equal, policy
from torch import nn

from memopt import recompute
from memopt.recipes import load_hf_recipe, load_recipe
from memopt.recipes.defaults import default_loss
from memopt.recompute import POLICY_ENV, RecomputePlan, RecomputePolicy, RecomputePolicyError

BUILTIN_POLICIES = {
    "gpt": [
        ("blocks.*.mlp.act: gelu", "blocks.*.attn: _softmax", "blocks.*.ln1: native_layer_norm"),
        ("blocks.*: *",),
        ("blocks.*.attn: * except bmm, addmm", "blocks.*.mlp.fc: addmm"),
    ],
    "bert": [
        ("layers.*: gelu", "layers.*.attn: _softmax", "layers.*.ln2: native_layer_norm"),
        ("layers.*: *", "mlm_dense: addmm"),
        ("layers.*: * except addmm",),
    ],
    "mlp": [("*: gelu", "0: addmm"), ("1: *", "4: *"), ("*: * except addmm",)],
    # Whole-module regions stay off BatchNorm: rerunning its forward updates the running stats twice.
    "cnn": [("*: relu", "*: max_pool2d_with_indices"), ("0: *", "2: *", "4: *"), ("*: convolution",)],
}


@pytest.mark.parametrize(
    ("spec", "plans"), [(spec, plans) for spec, cases in BUILTIN_POLICIES.items() for plans in cases]
)
def test_builtin_recipes_train_bitwise_equal_under_a_policy(spec: str, plans: tuple[str, ...]) -> None:
    assert_bitwise_equal(load_recipe(spec, {"size": "tiny"}), policy(*plans))


HF_POLICIES = {
    "gpt2": [
        ("transformer.h.*.attn: _softmax", "transformer.h.*.mlp.act: tanh", "transformer.h.*.ln_2: native_layer_norm"),
        ("transformer.h.*: *",),
        ("transformer.h.*.attn: * except addmm",),
    ],
    "llama": [
        ("model.layers.*.mlp.act_fn: silu", "model.layers.*.self_attn: _softmax"),
        ("model.layers.*.mlp: *", "model.layers.*.input_layernorm: *"),
        ("model.layers.*: * except mm",),
    ],
    "bert": [
        ("bert.encoder.layer.*.intermediate: gelu", "bert.encoder.layer.*.attention: _softmax"),
        ("bert.encoder.layer.*: *",),
        ("bert.encoder.layer.*.attention: * except addmm",),
    ],
}


@pytest.mark.parametrize(("name", "plans"), [(name, plans) for name, cases in HF_POLICIES.items() for plans in cases])
def test_hugging_face_models_train_bitwise_equal_under_a_policy(name: str, plans: tuple[str, ...]) -> None:
    assert_bitwise_equal(load_hf_recipe(f"hf:{name}", {"size": "tiny", "seq_len": 16}), policy(*plans))


def test_an_op_plan_leaves_exactly_the_ops_outputs_to_backward() -> None:
    """``blocks.*.mlp.act: gelu`` keeps none of gelu's outputs (two blocks of 3 x 32 x 256 floats),
    though autograd saves each through a view (linear's 2-D reshape of its input)."""
    recipe = load_recipe("gpt", {"size": "tiny"})
    model = recipe.model()
    applied = recompute.apply_policy(model, policy("blocks.*.mlp.act: gelu"))
    (tokens,), _ = recipe.batch(3)
    model(tokens)
    assert applied.replaced_bytes == 2 * 3 * 32 * 256 * 4


def test_chained_op_plans_each_drop_their_output() -> None:
    """``mlp.fc: addmm`` with ``mlp.act: gelu``: gelu's recompute keeps the linear's output as that plan's
    note, not as the tensor, so after the forward no output of either op is alive (ORT's
    ``FusedMatMul+Add+`` with ``Gelu+``); backward recomputes the chain, to the bit."""
    recipe = load_recipe("gpt", {"size": "tiny"})
    chain = policy("blocks.*.mlp.fc: addmm", "blocks.*.mlp.act: gelu")
    model = recipe.model()
    applied = recompute.apply_policy(model, chain)
    (tokens,), target = recipe.batch(3)
    loss = default_loss(model(tokens), target)
    gc.collect()
    assert applied.op_calls == {plan: 2 for plan in chain.plans}
    assert list(applied.noted.keys()) == []  # every recomputed output freed, the loss still held
    loss.backward()
    assert_bitwise_equal(recipe, chain)


def test_an_op_output_changed_in_place_is_kept_not_recomputed() -> None:
    """``fc: addmm`` and ``act: gelu`` where the model scales the linear's output in place before
    the GELU: the written output is no longer the op's, so it is kept as it is (recomputing it
    would drop the ``mul_``), and the gradients stay those of the model without a policy."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = nn.GELU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            h.mul_(2.0)
            return self.act(h)

    def gradients(chain: RecomputePolicy | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = Scaled()
        if chain is not None:
            recompute.apply_policy(model, chain)
        model(torch.randn(4, 8)).pow(2).sum().backward()
        return [p.grad for p in model.parameters() if p.grad is not None]

    plain, chained = gradients(None), gradients(policy("fc: addmm", "act: gelu"))
    assert all(torch.equal(a, b) for a, b in zip(plain, chained, strict=True))


@pytest.mark.parametrize(
    "plans",
    [
        ("layers.1.self_attn: *", "layers.1.dropout: mul"),
        ("layers.*.self_attn: * except bmm", "layers.0.linear1: addmm"),
        pytest.param(
            ("layers.1: offload", "layers.1.self_attn: *"),
            marks=pytest.mark.filterwarnings("ignore::memopt.recompute.RecomputeWarning"),  # no CUDA here
        ),
    ],
    ids=["sibling-op", "selective", "offload"],
)
def test_attention_reruns_as_it_ran_under_saved_tensor_hooks(plans: tuple[str, ...]) -> None:
    """nn.MultiheadAttention projects query, key and value with one matmul only where they are one
    tensor (``query is key``). Under an op plan's or an offload's saved-tensor hooks, autograd hands a
    region's saved inputs back as three tensors: the rerun must still take the forward's path (the
    PyTorch tutorial's word LM stopped at its first backward), and train to the same bits."""

    def gradients(chosen: RecomputePolicy | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2)
        encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        if chosen is not None:
            recompute.apply(encoder, chosen)
        x = torch.randn(5, 3, 8, requires_grad=True)
        encoder(x, nn.Transformer.generate_square_subsequent_mask(5)).pow(2).sum().backward()
        return [x.grad, *(p.grad for p in encoder.parameters())]

    plain, applied = gradients(None), gradients(policy(*plans))
    assert all(torch.equal(a, b) for a, b in zip(plain, applied, strict=True))


def test_unset_variable_applies_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POLICY_ENV, raising=False)
    model = nn.Sequential(nn.Linear(2, 2), nn.GELU())
    forward = model.forward
    assert recompute.apply(model) is model and model.forward == forward


def test_the_variable_names_the_policy_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "policy.json"
    policy("blocks.*.mlp.act: gelu", "blocks.*: * except mm").write(path)
    assert json.loads(path.read_text())["plans"] == ["blocks.*.mlp.act: gelu", "blocks.*: * except mm"]
    monkeypatch.setenv(POLICY_ENV, str(path))
    recipe = load_recipe("gpt", {"size": "tiny"})
    model = recompute.apply(recipe.model())
    assert [str(plan) for plan in model._memopt_recompute_policy.policy.plans] == [  # type: ignore[union-attr]
        "blocks.*.mlp.act: gelu",
        "blocks.*: * except mm",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON"),
        ('{"plans": []}', "is not a memopt recompute policy"),
        ('{"format": "memopt-recompute-policy", "version": 7, "plans": []}', "is policy version 7"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": "a: gelu"}', "a list of 'MODULE: OP' texts"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["blocks gelu"]}', "is not 'MODULE: OP'"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: gleu"]}', "has no op aten.gleu"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: mm.bogus"]}', "has no overload 'bogus'"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: bernoulli"]}', "is random"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: native_dropout"]}', "is random"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: relu_"]}', "writes into its inputs"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: transpose"]}', "returns a view"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: * except bernoulli_"]}', "cannot keep"),
        ('{"format": "memopt-recompute-policy", "version": 1, "plans": ["a..b: gelu"]}', "not a module path"),
    ],
)
def test_a_malformed_policy_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(text)
    monkeypatch.setenv(POLICY_ENV, str(path))
    with pytest.raises(RecomputePolicyError, match=message) as raised:
        recompute.apply(nn.Linear(2, 2))
    assert "\n" not in str(raised.value) and str(raised.value).startswith(f"{POLICY_ENV}={path}")


def test_a_missing_policy_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLICY_ENV, str(tmp_path / "nowhere.json"))
    with pytest.raises(RecomputePolicyError, match=r"nowhere.json: no such file"):
        recompute.apply(nn.Linear(2, 2))


def test_spellings_of_an_op_all_match_it() -> None:
    """``aten.mm`` and ``mm.default`` both match the matmul: no spelling silently matches nothing."""
    spellings = ["mm", "aten.mm", "aten::mm", "torch.ops.aten.mm", "mm.default", "aten.mm.default"]
    assert all(RecomputePlan.parse(f"x: {s}").op.matches(torch.ops.aten.mm.default) for s in spellings)  # type: ignore[union-attr]
    assert not RecomputePlan.parse("x: mm.out").op.matches(torch.ops.aten.mm.default)  # type: ignore[union-attr]


def test_a_plan_matching_no_module_lists_the_models_modules() -> None:
    with pytest.raises(
        RecomputePolicyError, match=r"no module of the model matches blocks\.\*\.mlp \(its modules: 0, 1\)"
    ):
        recompute.apply(nn.Sequential(nn.Linear(2, 2), nn.GELU()), policy("blocks.*.mlp: gelu"))


def test_an_op_that_never_runs_is_said_after_the_first_forward() -> None:
    """``softmax`` is composite: what runs on CPU is ``_softmax``, and the error says so."""
    model = recompute.apply(nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=-1)), policy("1: softmax"))
    with pytest.raises(RecomputePolicyError, match=r"1: softmax: its op never ran .*ops that ran there: _softmax"):
        model(torch.ones(1, 2, requires_grad=True))


@pytest.mark.parametrize("op", ["native_batch_norm", "_native_batch_norm_legit"])
def test_batch_norm_is_not_recomputed(op: str) -> None:
    """Batch norm updates the running stats in training (its 2.4 schema does not say so): recomputing
    it would update them twice."""
    with pytest.raises(RecomputePolicyError, match="running statistics|writes into its inputs"):
        policy(f"1: {op}")


def test_an_input_changed_after_the_forward_stops_backward() -> None:
    class ChangesItsInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.GELU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = x * 2
            out = self.act(hidden) * x  # mul saves gelu's output, which is recomputed from `hidden`
            hidden.add_(1)  # gelu's backward saved `hidden` too: autograd itself refuses this
            return out

    model = recompute.apply(ChangesItsInput(), policy("act: gelu"))
    with pytest.raises(RuntimeError, match="modified by an inplace operation|changed in place"):
        model(torch.ones(2, requires_grad=True)).sum().backward()


def test_applying_twice_is_refused() -> None:
    model = recompute.apply(nn.Sequential(nn.Linear(2, 2), nn.GELU()), policy("1: gelu"))
    with pytest.raises(RecomputePolicyError, match="already applied"):
        recompute.apply(model, policy("1: gelu"))


@pytest.mark.subprocess
def test_the_public_face_imports_only_torch(tmp_path: Path) -> None:
    """A training script imports memopt.recompute: it needs neither ORT nor memopt's own tools."""
    import subprocess
    import sys

    probe = (
        "import sys, memopt.recompute\n"
        "heavy = {'onnxruntime', 'numba', 'textual', 'pydantic', 'pandas', 'scipy', 'typer', 'rich', 'onnx'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
