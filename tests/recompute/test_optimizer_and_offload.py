"""The optimizer's plans (``optimizer: foreach-off``, ``optimizer: fused``) and offload (``MODULE:
offload``) through ``memopt.recompute.apply``: parsing, the API with and without the optimizer,
and what training computes with each, on real PyTorch steps.

Tolerances: the single-tensor and foreach paths do the same arithmetic per element, so the
parameters after several steps are bitwise equal on CPU; the fused kernel evaluates AdamW's update
in one expression with its own rounding order, so its parameters agree within atol 1e-6 and rtol
1e-5 after 5 steps at lr 1e-2 (measured: at most 4.5e-8 apart on torch 2.4.1 and 2.13.0). Offload
only moves saved tensors (on CPU it keeps them where they are), so gradients are bitwise equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.cli import assert_one_line_error, memopt
from support.torch_steps import policy
from torch import nn

from memopt import recompute
from memopt.recompute import RecomputePlan, RecomputePolicy, RecomputePolicyError, RecomputeWarning


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 64), nn.GELU(), nn.Sequential(nn.Linear(64, 64), nn.GELU()), nn.Dropout(0.1), nn.Linear(64, 10)
    )


def _trained(plans: RecomputePolicy | None, steps: int = 5, **adamw: bool) -> list[torch.Tensor]:
    """The parameters after ``steps`` seeded AdamW steps at lr 1e-2, with ``plans`` applied through ``apply``."""
    model = _model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, **adamw)
    if plans is not None:
        recompute.apply(model, plans, optimizer=optimizer)
    torch.manual_seed(1)
    inputs, labels = torch.randn(16, 32), torch.randint(0, 10, (16,))
    for _ in range(steps):
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "line", ["optimizer: foreach-off", "optimizer: fused", "blocks.*: offload", "model.layers.3: offload"]
)
def test_the_new_plan_kinds_read_back_as_written(line: str, tmp_path: Path) -> None:
    plan = RecomputePlan.parse(line)
    assert str(plan) == line and RecomputePlan.parse(str(plan)) == plan
    path = tmp_path / "policy.json"
    RecomputePolicy((plan, RecomputePlan.parse("blocks.*.mlp.act: gelu"))).write(path)
    assert RecomputePolicy.read(path).plans == (plan, RecomputePlan.parse("blocks.*.mlp.act: gelu"))
    assert plan.kind in ("optimizer", "offload") and not plan.whole_module


@pytest.mark.parametrize(
    ("plans", "says"),
    [
        (["optimizer: *"], "the optimizer's plans are 'optimizer: foreach-off or fused'"),
        (["blocks.*: fused"], "only they name it"),
        (["optimizer: foreach-off", "optimizer: fused"], "the optimizer steps one way"),
        (["optimizer: gelu"], "the optimizer's plans are"),
    ],
)
def test_a_bad_optimizer_line_is_one_policy_error(plans: list[str], says: str) -> None:
    text = json.dumps({"format": "memopt-recompute-policy", "version": 1, "plans": plans})
    with pytest.raises(RecomputePolicyError, match=says.replace("(", r"\(").replace("*", r"\*")):
        RecomputePolicy.from_json(text)


@pytest.mark.subprocess
def test_a_bad_optimizer_line_is_one_error_line_on_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"format": "memopt-recompute-policy", "version": 1, "plans": ["optimizer: fast"]}))
    run = memopt(
        "trial", "--backend", "torch", "mlp", "--size", "tiny", "-b", "2", "--config", str(config), cwd=tmp_path
    )
    assert_one_line_error(run, "optimizer")


def test_apply_without_the_optimizer_refuses_an_optimizer_plan_naming_the_fix() -> None:
    model = _model()
    with pytest.raises(RecomputePolicyError, match=r"pass it, memopt.recompute.apply\(model, optimizer=optimizer\)"):
        recompute.apply(model, policy("optimizer: fused", "2: *"))
    assert not hasattr(model, "_memopt_recompute_policy")  # nothing half-applied


@pytest.mark.parametrize(
    ("line", "foreach", "fused"), [("optimizer: foreach-off", False, False), ("optimizer: fused", False, True)]
)
def test_apply_with_the_optimizer_sets_how_every_group_steps(line: str, foreach: bool, fused: bool) -> None:
    model = _model()
    optimizer = torch.optim.AdamW(
        [{"params": model[0].parameters()}, {"params": model[4].parameters(), "lr": 1e-3}], foreach=True
    )
    assert recompute.apply(model, policy(line, "2: *"), optimizer=optimizer) is model
    assert [(g["foreach"], g["fused"]) for g in optimizer.param_groups] == [(foreach, fused)] * 2


def test_apply_with_the_optimizer_and_no_optimizer_plan_leaves_it_alone() -> None:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    recompute.apply(model, policy("2: *"), optimizer=optimizer)
    assert optimizer.param_groups[0]["foreach"] is True


def test_an_optimizer_without_the_setting_is_refused() -> None:
    model = _model()
    with pytest.raises(RecomputePolicyError, match="LBFGS has no 'foreach' setting"):
        recompute.apply(model, policy("optimizer: foreach-off"), optimizer=torch.optim.LBFGS(model.parameters()))
    with pytest.raises(RecomputePolicyError, match="RMSprop has no 'fused' setting"):
        recompute.apply(_model(), policy("optimizer: fused"), optimizer=torch.optim.RMSprop(model.parameters()))


def test_the_policy_file_applies_to_the_optimizer_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "policy.json"
    policy("optimizer: foreach-off").write(path)
    monkeypatch.setenv(recompute.POLICY_ENV, str(path))
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    recompute.apply(model, optimizer=optimizer)
    assert optimizer.param_groups[0]["foreach"] is False


def test_foreach_off_trains_bitwise_as_foreach() -> None:
    foreach = _trained(None, foreach=True)
    single = _trained(policy("optimizer: foreach-off"), foreach=True)
    assert all(torch.equal(a, b) for a, b in zip(foreach, single))


def test_fused_trains_within_its_stated_tolerance() -> None:
    single = _trained(None, foreach=False)
    fused = _trained(policy("optimizer: fused"))
    for a, b in zip(single, fused):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def test_offload_keeps_gradients_and_parameters_bitwise_and_warns_once_on_cpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("the warning is for a machine without CUDA")
    plain = _trained(None, foreach=False)
    with pytest.warns(RecomputeWarning, match="moves nothing here: torch sees no CUDA device") as said:
        offloaded = _trained(policy("0: offload", "2: offload", "2.1: gelu"), foreach=False)
    assert len(said) == 1
    assert all(torch.equal(a, b) for a, b in zip(plain, offloaded))


def test_offload_runs_its_modules_under_save_on_cpu() -> None:
    """What the offloaded module saves goes through save_on_cpu's hooks (which keep a CPU tensor as it is)."""
    model = _model()
    with pytest.warns(RecomputeWarning):
        recompute.apply(model, policy("2: offload"))
    packed: list[torch.Size] = []
    original = torch.autograd.graph.saved_tensors_hooks.__enter__

    def counting(self: torch.autograd.graph.saved_tensors_hooks) -> None:
        pack = self.pack_hook
        self.pack_hook = lambda t: (packed.append(t.shape), pack(t))[1]
        original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.autograd.graph.saved_tensors_hooks, "__enter__", counting)
        model(torch.randn(4, 32)).sum().backward()
    assert torch.Size([4, 64]) in packed  # the inner linear's input and the GELU's
