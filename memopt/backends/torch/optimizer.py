"""The optimizer's step as plans: ``optimizer: foreach-off`` and ``optimizer: fused``.

torch's AdamW steps in one of three ways (``foreach``/``fused`` in its parameter groups, read at
every step): ``foreach`` computes each intermediate for every parameter at once (temporaries the
size of all parameters; torch's default on CUDA), the single-tensor path one parameter at a time
(temporaries of the largest parameter; the default on CPU), the fused kernel without temporaries.
Where the step is the peak (parameters, gradients and AdamW's state are most of it), that is the
part recompute cannot reach.

Each plan's saving is what it takes off the step's own peak, played on fake tensors (the model's
parameters with gradients, two steps so the second runs with the state): a figure that does not
grow with the batch. Its cost is the step's time with the plan less without it, timed on the
real model (a negative difference, the fused kernel being faster, costs nothing).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import Optimizer

from memopt.backends.torch.scan import TorchPlanRow, TorchScan
from memopt.backends.torch.simulate import LiveBytes
from memopt.errors import MemoptError, one_line
from memopt.graph.polynomial import Polynomial
from memopt.recipes import Recipe, load_hf_recipe, load_recipe
from memopt.recipes.defaults import make_optimizer
from memopt.recipes.hf import HF_PREFIX
from memopt.recompute import RecomputePlan, RecomputePolicy, RecomputePolicyError, apply_optimizer
from memopt.recompute.policy import OPTIMIZER, OPTIMIZER_STEPS
from memopt.run.launch import helper_last_line

__all__ = ["optimizer_rows", "step_bytes", "step_seconds", "step_times", "with_step_plans"]

_STEPS = 2  # the first makes the state, the second steps with it
_TIMED_STEPS = 3  # each way, after one warm-up step; the median is taken
_TIMING_TIMEOUT_S = 600
_AS_MADE = "as made"  # step_times' key for the optimizer as the recipe makes it


def optimizer_rows(recipe: Recipe, device: str, *, timed: bool, python: str | None = None) -> tuple[TorchPlanRow, ...]:
    """A row for each optimizer plan the recipe's optimizer takes that lowers its step's peak on
    ``device`` (``cpu`` or ``cuda``: the default path differs); ``timed``: its cost measured on the
    real model (on CUDA in a short process of ``python``'s), else none."""
    baseline = step_bytes(recipe, None, device)
    savings: dict[RecomputePlan, int] = {}
    for step in OPTIMIZER_STEPS:
        plan = RecomputePlan(OPTIMIZER, optimizer_step=step)
        try:
            savings[plan] = baseline - step_bytes(recipe, plan, device)
        except RecomputePolicyError:  # the recipe's optimizer has no such setting, or no fused kernel here
            continue
    lowering = [plan for plan, saving in savings.items() if saving > 0]
    seconds = step_times(recipe, device, lowering, python) if timed and lowering else {}
    return tuple(
        TorchPlanRow(
            plan,
            tensors=0,
            modules=0,
            saving_bytes=savings[plan],
            saving=Polynomial.constant(Fraction(savings[plan])),
            recompute_seconds=max(0.0, seconds[str(plan)] - seconds[_AS_MADE]) if seconds else 0.0,
            peak_share=1.0,
            grows_with_batch=False,
        )
        for plan in lowering
    )


def step_times(recipe: Recipe, device: str, plans: list[RecomputePlan], python: str | None = None) -> dict[str, float]:
    """The step's median time as the recipe makes its optimizer (``_AS_MADE``) and with each plan.
    On CUDA in a short process of its own: a CUDA context in memopt's own process would hold
    device memory while its runs are measured."""
    if device != "cuda":
        return _times_here(recipe, device, plans)
    request = {"spec": recipe.spec, "options": dict(recipe.options), "device": device, "plans": list(map(str, plans))}
    doing = f"timing the optimizer's step on {device}"
    printed = helper_last_line(
        [python or sys.executable, "-m", __name__, json.dumps(request)], _TIMING_TIMEOUT_S, doing
    )
    try:
        times: dict[str, float] = json.loads(printed)
    except ValueError as err:
        raise MemoptError(f"{doing} failed: {one_line(err)}") from err
    return times


def _times_here(recipe: Recipe, device: str, plans: list[RecomputePlan]) -> dict[str, float]:
    return {_AS_MADE: step_seconds(recipe, None, device)} | {
        str(plan): step_seconds(recipe, plan, device) for plan in plans
    }


def _main(argv: list[str]) -> None:
    """``python -m memopt.backends.torch.optimizer REQUEST``: ``step_times`` here, as JSON on stdout."""
    request = json.loads(argv[0])
    spec, options = request["spec"], request["options"]
    recipe = load_hf_recipe(spec, options) if spec.startswith(HF_PREFIX) else load_recipe(spec, options)
    plans = [RecomputePlan.parse(plan) for plan in request["plans"]]
    print(json.dumps(_times_here(recipe, request["device"], plans)))


def _stepping(recipe: Recipe, plan: RecomputePlan | None, device: str, placed: str) -> Optimizer:
    """The recipe's optimizer over its model's parameters on ``placed``, each with a gradient, as
    ``plan`` sets it (None: as the recipe makes it, ``foreach`` left to torch resolved as on ``device``)."""
    torch.manual_seed(0)
    model = recipe.model()
    if placed != "cpu":  # built on CPU; moving fake parameters swaps tensors, which torch 2.13 refuses under a counter
        model = model.to(placed)
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.randn_like(parameter) * 1e-3
    optimizer = make_optimizer(recipe, model.parameters())
    if plan is not None:
        apply_optimizer(optimizer, RecomputePolicy((plan,)))
    elif placed != device:
        # torch resolves an unset foreach from where the parameters are (on CUDA: foreach): played
        # on fake CPU tensors, say what it picks on the device.
        for group in optimizer.param_groups:
            if group.get("foreach") is None and not group.get("fused"):
                group["foreach"] = device == "cuda" and not group.get("differentiable", False)
    return optimizer


def step_bytes(recipe: Recipe, plan: RecomputePlan | None, device: str) -> int:
    """The most the optimizer's step adds to what is live when it begins (state and temporaries),
    played on fake tensors."""
    counter = LiveBytes()
    with FakeTensorMode(), counter:  # type: ignore[no-untyped-call]
        optimizer = _stepping(recipe, plan, device, "cpu")
        most = 0
        for _ in range(_STEPS):
            counter.peak = before = counter.now
            optimizer.step()
            most = max(most, counter.peak - before)
    return most


def step_seconds(recipe: Recipe, plan: RecomputePlan | None, device: str) -> float:
    """The median time of the optimizer's step on the real model (parameters on ``device``)."""
    optimizer = _stepping(recipe, plan, device, device)
    sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else lambda: None
    times = []
    for index in range(_TIMED_STEPS + 1):
        sync()
        started = time.perf_counter()
        optimizer.step()
        sync()
        if index:  # the first makes the state
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def with_step_plans(
    scanned: TorchScan, recipe: Recipe, device: str, *, timed: bool = True, python: str | None = None
) -> TorchScan:
    """The scan with the optimizer plans that lower the recipe's step peak on ``device``, beside its recompute plans."""
    return replace(scanned, rows=(*scanned.rows, *optimizer_rows(recipe, device, timed=timed, python=python)))


if __name__ == "__main__":
    _main(sys.argv[1:])
