"""The optimizer's step and offload as plans of the torch back end: their rows (saving from the play
on fake tensors, cost timed), the play against a measured RSS, and the choice among them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support.cli import memopt
from support.torch_steps import bytes_measured_in_a_child, policy
from torch import nn

from memopt.backends.torch.offload import NOT_ON_CPU, with_offload
from memopt.backends.torch.optimizer import optimizer_rows, step_bytes, with_step_plans
from memopt.backends.torch.predict import plan_saving
from memopt.backends.torch.scan import scan_recipe
from memopt.backends.torch.simulate import simulate_steps
from memopt.backends.torch.tune import _choose, _excludes
from memopt.recipes import Recipe, load_recipe
from memopt.recompute import RecomputePlan

_WIDTH, _LAYERS = 2048, 6  # 6 × 16 MiB of weights: the step's figures stand well above RSS's noise


def _wide(foreach: bool | None) -> Recipe:
    """Six square linears of width 2048, AdamW with ``foreach`` as asked: where the step binds."""
    return Recipe(
        "wide",
        build_model=lambda: nn.Sequential(*[nn.Linear(_WIDTH, _WIDTH) for _ in range(_LAYERS)]),
        make_batch=lambda batch_size: (torch.randn(batch_size, _WIDTH), torch.randn(batch_size, _WIDTH)),
        optimizer=lambda parameters: torch.optim.AdamW(parameters, lr=1e-3, foreach=foreach),
    )


# The measured side: a real process, glibc's mmap threshold pinned as memopt's runs pin it, so a freed
# temporary leaves RSS at once; the peak RSS (VmHWM) over each step less the RSS before it. A step of
# a small model first loads the code the step runs (in a fresh environment its modules' pages alone
# were 13 MiB of the first step's RSS), so what is measured is the step's tensors.
_MEASURE = textwrap.dedent(
    f"""
    import json, sys, torch
    from torch import nn
    from memopt.child.memory import proc_status_bytes, reset_rss_peak
    from memopt.recompute import RecomputePlan, RecomputePolicy, apply_optimizer
    torch.manual_seed(0)

    def stepping(model):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=sys.argv[1] == "foreach")
        if sys.argv[2:]:
            apply_optimizer(optimizer, RecomputePolicy((RecomputePlan.parse(sys.argv[2]),)))
        for parameter in model.parameters():
            parameter.grad = torch.randn_like(parameter)
        return optimizer

    stepping(nn.Linear(8, 8)).step()
    optimizer = stepping(nn.Sequential(*[nn.Linear({_WIDTH}, {_WIDTH}) for _ in range({_LAYERS})]))
    grown = []
    for _ in range(2):
        reset_rss_peak()
        before = proc_status_bytes("VmRSS")
        optimizer.step()
        grown.append(proc_status_bytes("VmHWM") - before)
    print(json.dumps(max(grown)))
    """
)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("foreach", "plan"),
    [(True, None), (True, "optimizer: foreach-off"), (True, "optimizer: fused"), (False, None)],
)
def test_the_played_step_peak_matches_the_measured_rss_within_3_percent(foreach: bool, plan: str | None) -> None:
    """The step's own peak (the state the first step makes, and the temporaries: foreach's are
    every parameter's at once) played on fake tensors, against the RSS a real step adds."""
    played = step_bytes(_wide(foreach), RecomputePlan.parse(plan) if plan else None, "cpu")
    measured = bytes_measured_in_a_child(_MEASURE, "foreach" if foreach else "single", *([plan] if plan else []))
    assert abs(played - measured) / measured < 0.03, (played, measured)


@pytest.mark.slow
def test_the_rows_say_what_each_plan_takes_off_the_step_and_cost_it_measured() -> None:
    recipe = _wide(foreach=True)
    rows = {str(row.plan): row for row in optimizer_rows(recipe, "cpu", timed=True)}
    weights = _LAYERS * (_WIDTH * _WIDTH + _WIDTH) * 4
    # foreach's temporaries are every parameter's at once, the single tensor path's the largest's twice, fused's none.
    assert rows["optimizer: foreach-off"].saving_bytes == pytest.approx(weights - 2 * _WIDTH * _WIDTH * 4, rel=0.01)
    assert rows["optimizer: fused"].saving_bytes == pytest.approx(weights, rel=0.01)
    assert all(row.recompute_seconds >= 0 and not row.grows_with_batch for row in rows.values())
    assert rows["optimizer: fused"].seconds_at(64, 2) == rows["optimizer: fused"].recompute_seconds


def test_on_cpu_the_default_steps_one_tensor_at_a_time_so_only_fused_is_offered() -> None:
    rows = optimizer_rows(_wide(foreach=None), "cpu", timed=False)
    assert [str(row.plan) for row in rows] == ["optimizer: fused"]
    on_cuda = optimizer_rows(_wide(foreach=None), "cuda", timed=False)
    assert [str(row.plan) for row in on_cuda] == ["optimizer: foreach-off", "optimizer: fused"]


def test_the_play_with_the_optimizer_plan_lowers_the_peak_where_the_step_binds() -> None:
    recipe = _wide(foreach=True)
    plain, fused = simulate_steps(recipe, 1, policy()), simulate_steps(recipe, 1, policy("optimizer: fused"))
    assert plain.optimizer_step_bytes - fused.optimizer_step_bytes == step_bytes(recipe, None, "cpu") - step_bytes(
        recipe, RecomputePlan.parse("optimizer: fused"), "cpu"
    )
    assert fused.peak_bytes < plain.peak_bytes


def test_the_choice_takes_the_optimizer_plan_where_it_is_the_cheapest_cover() -> None:
    recipe = _wide(foreach=True)
    scanned = with_step_plans(scan_recipe(recipe, 2, timed=False), recipe, "cpu", timed=False)
    rows = {str(row.plan): row for row in scanned.rows}
    fused = plan_saving(rows["optimizer: fused"], scanned, 2)
    chosen, saving = _choose(scanned, 2, fused * 0.9)
    assert [str(p) for p in chosen.plans] == ["optimizer: fused"] and saving == fused
    # Only one way to step: the two optimizer plans exclude each other.
    listed = [*scanned.layers, *(row for row in scanned.rows if "*" not in row.plan.module)]
    index = {str(row.plan): i for i, row in enumerate(listed)}
    assert index["optimizer: foreach-off"] in _excludes(listed)[index["optimizer: fused"]]


def test_offload_rows_sit_beside_each_checkpoint_costing_their_copies() -> None:
    recipe = load_recipe("mlp", {"size": "tiny"})
    scanned = scan_recipe(recipe, 2, timed=False)
    offloaded = with_offload(scanned, bandwidth=1e10)
    checkpoints = {row.plan.module: row for row in scanned.layers if row.plan.whole_module}
    offloads = {row.plan.module: row for row in offloaded.layers if row.plan.offload}
    assert offloads.keys() == checkpoints.keys() and offloads
    for module, row in offloads.items():
        assert row.saving_bytes == checkpoints[module].saving_bytes
        assert row.recompute_seconds == pytest.approx(2 * row.saving_bytes / 1e10)
    listed = list(offloaded.layers)
    at = {str(row.plan): i for i, row in enumerate(listed)}
    module = next(iter(offloads))
    assert at[f"{module}: *"] in _excludes(listed)[at[f"{module}: offload"]]
    assert replace(scanned, rows=offloaded.rows[: len(scanned.rows)]).rows == scanned.rows


@pytest.mark.subprocess
def test_the_scan_lists_the_optimizer_plan_and_says_offload_does_not_apply_on_cpu(tmp_path: Path) -> None:
    run = memopt("scan", "--backend", "torch", "mlp", "--size", "tiny", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "optimizer: fused" in run.stdout
    assert run.stderr.count("does not apply on CPU") == 1 and NOT_ON_CPU in run.stderr.replace("\n", " ")


@pytest.mark.subprocess
def test_the_step_times_process_cuda_uses_answers_with_each_way(tmp_path: Path) -> None:
    """On CUDA the step is timed in a process of its own (run here on CPU: the same request and answer)."""
    request = {"spec": "mlp", "options": {"size": "tiny"}, "device": "cpu", "plans": ["optimizer: fused"]}
    done = subprocess.run(
        [sys.executable, "-m", "memopt.backends.torch.optimizer", json.dumps(request)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    times = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(times) == {"as made", "optimizer: fused"} and all(t > 0 for t in times.values())


def test_the_childs_training_loop_hands_its_optimizer_to_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memopt's child trains a recipe as ``run_steps`` builds it: the model wrapped, then the
    optimizer made from it and prepared by the back end, where the policy's optimizer plan lands."""
    from memopt.backends.torch.child import TorchSteps
    from memopt.child.steps import TrainingStep
    from memopt.recompute import POLICY_ENV

    path = tmp_path / "policy.json"
    policy("optimizer: fused", "0: *").write(path)
    monkeypatch.setenv(POLICY_ENV, str(path))
    steps = TorchSteps()
    step = TrainingStep(
        load_recipe("mlp", {"size": "tiny"}),
        2,
        "cpu",
        lambda model: steps.wrap(model, "WARNING", False),
        steps.prepare_optimizer,
    )
    step()
    assert [(g["fused"], g["foreach"]) for g in step.optimizer.param_groups] == [(True, False)]
    assert hasattr(step.model, "_memopt_recompute_policy")
