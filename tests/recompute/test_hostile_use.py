"""memopt.recompute used as training code uses a model: copied (EMA, teacher), saved whole, run
in inference and eval mode, compiled; and policies no tune wrote (odd JSON, odd op names, a FIFO
or a device node in the variable). Real torch, real copies, real files, in this process."""

from __future__ import annotations

import copy
import inspect
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support.cli import assert_one_line_error, memopt
from support.torch_steps import policy
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from memopt import recompute
from memopt.recipes import load_recipe
from memopt.recipes.defaults import default_loss
from memopt.recompute import POLICY_ENV, RecomputePlan, RecomputePolicyError

pytestmark = pytest.mark.filterwarnings(
    # torch 2.4's own checkpoint calls its deprecated torch.cpu.amp.autocast: nothing a user can act on.
    "ignore::FutureWarning:torch.utils.checkpoint"
)

GPT_PLANS = [
    ("blocks.*.mlp.act: gelu", "blocks.*.attn: _softmax", "blocks.*.mlp.fc: addmm"),
    ("blocks.*: *",),
    ("blocks.*.attn: * except bmm",),
]


def _deep_copied(model: nn.Module, folder: Path) -> nn.Module:
    return copy.deepcopy(model)


def _saved_to_file(model: nn.Module, folder: Path) -> nn.Module:
    path = folder / "model.pt"
    torch.save(model, path)
    loaded: nn.Module = torch.load(path, weights_only=False)
    return loaded


def _gpt() -> nn.Module:
    torch.manual_seed(0)
    return load_recipe("gpt", {"size": "tiny"}).model().train()


def _step(model: nn.Module) -> dict[str, torch.Tensor]:
    """One seeded training forward and backward (dropout on): the gradients, by parameter name."""
    recipe = load_recipe("gpt", {"size": "tiny"})
    torch.manual_seed(1)
    (tokens,), target = recipe.batch(3)
    torch.manual_seed(2)
    default_loss(model(tokens), target).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _kept_bytes(model: nn.Module) -> int:
    """Bytes autograd keeps for backward that a forward's own saved-tensor hooks leave to the caller's."""
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    (tokens,), _ = load_recipe("gpt", {"size": "tiny"}).batch(3)
    with saved_tensors_hooks(pack, lambda t: t):
        model(tokens)
    return sum(kept.values())


@pytest.mark.parametrize("plans", GPT_PLANS, ids=["ops", "whole", "except"])
@pytest.mark.parametrize("copied", [_deep_copied, _saved_to_file], ids=["deepcopy", "torch.save"])
def test_a_copy_of_an_applied_model_trains_on_its_own(
    tmp_path: Path, copied: Callable[..., nn.Module], plans: tuple[str, ...]
) -> None:
    """A copy (``deepcopy``, or ``torch.save`` and ``torch.load``) keeps the policy and runs its own
    modules: training it puts gradients on the copy alone, equal to a model without the policy's."""
    original = recompute.apply(_gpt(), policy(*plans))
    duplicate = copied(original, tmp_path)
    gradients, plain = _step(duplicate), _step(_gpt())
    assert all(p.grad is None for p in original.parameters())
    assert gradients.keys() == plain.keys() and all(torch.equal(gradients[name], plain[name]) for name in plain)
    assert _kept_bytes(duplicate) < _kept_bytes(_gpt())  # the copy still recomputes


def test_the_wrapped_forward_keeps_its_signature() -> None:
    """Callers read a forward's parameters (transformers' Trainer drops the columns it does not take)."""
    model = recompute.apply(_gpt(), policy("blocks.*.mlp.act: gelu", "blocks.*: *"))
    assert list(inspect.signature(model.forward).parameters) == ["input_ids"]
    assert list(inspect.signature(model.blocks[0].forward).parameters) == ["x"]


@pytest.mark.parametrize("plans", GPT_PLANS, ids=["ops", "whole", "except"])
@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inference_mode", "no_grad"])
def test_a_forward_outside_autograd_runs_the_model_as_it_is(
    mode: Callable[[], torch.autograd.grad_mode._NoParamDecoratorContextManager], plans: tuple[str, ...]
) -> None:
    """An evaluation (``generate``, a validation step) under ``inference_mode`` or ``no_grad``: the
    model's own output, and training goes on after it."""
    recipe = load_recipe("gpt", {"size": "tiny"})
    (tokens,), _ = recipe.batch(3)
    applied, plain = recompute.apply(_gpt().eval(), policy(*plans)), _gpt().eval()
    with mode():
        assert torch.equal(applied(tokens), plain(tokens))
    assert _step(applied.train()).keys() == _step(plain.train()).keys()


def test_an_evaluation_before_training_does_not_trip_the_check_of_ops() -> None:
    """Dropout runs no op in eval mode: a validation pass first (as Lightning's sanity check),
    with and without gradients, then training with ``drop: mul`` gives the gradients without the plan."""

    def dropped() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))

    def trained(model: nn.Module) -> list[torch.Tensor]:
        torch.manual_seed(1)
        model.train()(torch.randn(6, 4)).pow(2).sum().backward()
        return [p.grad for p in model.parameters() if p.grad is not None]

    model = recompute.apply(dropped(), policy("1: mul"))
    x = torch.randn(6, 4)
    with torch.no_grad():
        model.eval()(x)
    model.eval()(x).sum()  # eval with gradients on: a check of a loss's gradient, say
    with_plan, without = trained(model), trained(dropped())
    assert len(with_plan) == 4 and all(torch.equal(a, b) for a, b in zip(with_plan, without, strict=True))
    assert model._memopt_recompute_policy.op_calls == {RecomputePlan.parse("1: mul"): 1}  # type: ignore[union-attr]


def test_the_check_of_ops_still_speaks_at_the_first_training_forward() -> None:
    model = recompute.apply(nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=-1)), policy("1: softmax"))
    model.eval()(torch.ones(1, 2, requires_grad=True))
    with pytest.raises(RecomputePolicyError, match=r"1: softmax: its op never ran"):
        model.train()(torch.ones(1, 2, requires_grad=True))


@pytest.mark.slow
@pytest.mark.parametrize("plans", [("0: *",), ("0: * except addmm",)], ids=["whole", "except"])
def test_a_whole_module_plan_compiles(plans: tuple[str, ...]) -> None:
    """``torch.compile`` (backend ``aot_eager``: AOTAutograd's real trace, no code generation, quick on CPU)
    of a model with whole-module regions trains to the gradients of the model without them."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 8)), nn.Linear(8, 2))

    torch._dynamo.reset()
    x = torch.randn(3, 4)
    applied, plain = recompute.apply(model(), policy(*plans)), model()
    torch.compile(applied, backend="aot_eager")(x).pow(2).sum().backward()
    plain(x).pow(2).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(applied.parameters(), plain.parameters(), strict=True))


def _with_batch_norm() -> nn.Module:
    return nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), nn.ReLU())


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("0.1: *", r"module 0\.1 is a BatchNorm2d, whose running statistics"),
        ("0: * except convolution", r"module 0 holds 0\.1, a BatchNorm2d, whose running statistics"),
    ],
)
def test_a_whole_module_plan_over_batch_norm_is_refused(plan: str, message: str) -> None:
    with pytest.raises(RecomputePolicyError, match=message):
        recompute.apply(_with_batch_norm(), policy(plan))


def test_batch_norm_without_running_statistics_may_be_rerun() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False))
    recompute.apply(model, policy("1: *"))(torch.randn(2, 3, 5, 5)).sum().backward()


@pytest.mark.torch
def test_a_trial_of_a_whole_module_plan_over_batch_norm_is_one_error(tmp_path: Path) -> None:
    run = memopt(
        "trial", "cnn", "--size", "tiny", "--batch", "2", "--backend", "torch", "--config", "1: *",
        "--runs-dir", str(tmp_path),
    )  # fmt: skip
    assert_one_line_error(run, "module 1 is a BatchNorm2d", after_backend_line=True)


POLICY = '{{"format": "memopt-recompute-policy", "version": {version}, "plans": [{plans}]}}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (POLICY.format(version="true", plans=""), "is policy version True"),
        (POLICY.format(version="1.0", plans=""), "is policy version 1.0"),
        (POLICY.format(version="1" * 5000, plans=""), "is not JSON"),
        (
            '{"format": "memopt-recompute-policy", "version": 1, "plans": ["a: gelu"], "plans": []}',
            "'plans' is given twice",
        ),
        (POLICY.format(version=1, plans='"a: __class__"'), "has no op aten.__class__"),
        (POLICY.format(version=1, plans='"a: name"'), "has no op aten.name"),
        (POLICY.format(version=1, plans='"a: __init__"'), "has no op aten.__init__"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            POLICY.format(version=1, plans='"a: * except bernoulli"'),
            "cannot keep bernoulli: .* leave it out of 'except'",
        ),
    ],
    ids=["true", "float", "digits", "twice", "__class__", "name", "__init__", "nested", "keep-random"],
)
def test_a_policy_no_tune_wrote_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(text)
    monkeypatch.setenv(POLICY_ENV, str(path))
    with pytest.raises(RecomputePolicyError, match=message) as raised:
        recompute.apply(nn.Linear(2, 2))
    assert "\n" not in str(raised.value) and "whole-module plan" not in str(raised.value)


@pytest.mark.parametrize("where", ["op", "module", "plan"])
def test_a_long_name_is_not_echoed_whole(where: str) -> None:
    name = "x" * 1_000_000
    text = {"op": f"a: {name}", "module": f"a {name}: gelu", "plan": name}[where]
    with pytest.raises(RecomputePolicyError) as raised:
        RecomputePlan.parse(text)
    assert len(str(raised.value)) < 300


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("config", "fragment"),
    [("nested.json", "nested too deeply"), ("0: __class__", "has no op aten.__class__")],
)
def test_the_command_line_says_a_bad_policy_in_one_line(tmp_path: Path, config: str, fragment: str) -> None:
    (tmp_path / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    run = memopt(
        "trial", "cnn", "--size", "tiny", "--batch", "2", "--backend", "torch", "--config", config,
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    assert_one_line_error(run, fragment)


def _refused_promptly(path: Path, message: str) -> None:
    """``apply`` with ``path`` in the variable ends in the error, within seconds (a blocked read never would)."""
    raised: list[BaseException] = []

    def read() -> None:
        try:
            recompute.apply(nn.Linear(2, 2))
        except BaseException as err:  # handed to the test's thread
            raised.append(err)

    os.environ[POLICY_ENV] = str(path)
    try:
        reader = threading.Thread(target=read, daemon=True)  # daemon: a reader blocked for good dies with pytest
        reader.start()
        reader.join(30)
    finally:
        del os.environ[POLICY_ENV]
    assert not reader.is_alive(), f"apply still reading {path} after 30 s"
    assert len(raised) == 1 and isinstance(raised[0], RecomputePolicyError), raised
    assert message in str(raised[0])


def test_a_fifo_in_the_variable_is_refused_unread(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.json"
    os.mkfifo(fifo)
    _refused_promptly(fifo, "is a FIFO (named pipe), not a policy file")


def test_a_device_node_in_the_variable_is_refused_unread(tmp_path: Path) -> None:
    """A node of /dev/zero's numbers made in a temporary folder (as root; the system's are not touched)."""
    node = tmp_path / "zero"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device node needs root")
    _refused_promptly(node, "is a character device, not a policy file")


def test_a_file_too_large_to_be_a_policy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_bytes(b" " * (2 << 20))
    _refused_promptly(path, "too large to be a policy")
