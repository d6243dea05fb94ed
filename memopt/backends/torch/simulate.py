"""A recipe's training steps played on fake tensors: the bytes its tensors hold at their highest.

The steps run as memopt's child runs them (``memopt.child.steps``): the model with the policy
applied, forward, loss, backward, the optimizer's step, ``zero_grad(set_to_none=True)``, the last
output and loss held until the next forward returns; two steps, so that the second runs with the
optimizer's state. They run under ``FakeTensorMode``, so the target batch of a model larger than
the machine plays in seconds, and under a dispatch mode that counts each storage an op makes until
it is freed: the live bytes at every op, parameters, buffers and the batch included.

What it leaves out is the process's share: the runtime, autograd's nodes, kernels' scratch and the
allocator's own slack. On CPU with glibc's mmap threshold pinned (``memopt.run.budget``'s
``CPU_ALLOCATOR_ENV``) that share did not move with the batch or the policy (GPT-2-small at 512 tokens: 146 MiB
at batches 1, 2 and 4, 149 with every block checkpointed; ``bench/bench_cpu_allocator.py``), so
one run measures it for every batch and policy.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memopt.backends.torch.predict import policy_saving
from memopt.backends.torch.scan import TorchScan, recipe_forward
from memopt.recipes import Recipe
from memopt.recipes.defaults import make_optimizer
from memopt.recompute import RecomputePlan, RecomputePolicy, apply_policy
from memopt.units import format_bytes

__all__ = ["LiveBytes", "SimulatedPeak", "SimulatedSteps", "simulate_steps"]

_NONE = RecomputePolicy(())

# Two steps: the first without the optimizer's state, the second with it (later ones repeat it).
_STEPS = 2


@dataclass(frozen=True)
class SimulatedSteps:
    start_bytes: int  # parameters, buffers and the batch, before the first step
    peak_bytes: int  # the highest live bytes over the steps, the start included
    # The most the optimizer's steps added to what was live when each began: its state as the first
    # step makes it, and its temporaries (foreach's: every parameter's at once; fused: none).
    optimizer_step_bytes: int = 0

    @property
    def growth_bytes(self) -> int:
        """What the steps add at their highest to what the process held before them."""
        return self.peak_bytes - self.start_bytes


class LiveBytes(TorchDispatchMode):
    """Counts each storage from the op that makes it until it is freed, and the highest count."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._alive: dict[int, weakref.ref[Any]] = {}
        self.now = 0
        self.peak = 0

    def _count(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._alive:
            return
        nbytes = storage.nbytes()

        def freed(_: object, key: int = key, nbytes: int = nbytes) -> None:
            if self._alive.pop(key, None) is not None:
                self.now -= nbytes

        self._alive[key] = weakref.ref(storage, freed)
        self.now += nbytes
        self.peak = max(self.peak, self.now)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self._count(tensor)
        return out


def simulate_steps(recipe: Recipe, batch: int, policy: RecomputePolicy, *, fake: bool = True) -> SimulatedSteps:
    """The recipe's live bytes over two training steps at ``batch`` with ``policy``, on fake
    tensors (``fake=False``: on real ones, what the fake ones are checked against).

    Raises what ``FakeTensorMode`` raises for a forward that reads its tensors' values
    (``memopt.backends.torch.scan.NEEDS_VALUES``)."""
    counter = LiveBytes()
    with FakeTensorMode() if fake else contextlib.nullcontext(), counter:  # type: ignore[no-untyped-call]
        # Built under the counter, the model, its batch and the optimizer count from the ops that make them.
        model, forward = recipe_forward(recipe, batch, recipe.options.get("seq_len"))
        optimizer = make_optimizer(recipe, model.parameters())
        if policy.plans:
            apply_policy(model, policy, optimizer)
        start = counter.peak = counter.now
        previous: Any = None
        step_bytes = 0
        for _ in range(_STEPS):
            output, loss = forward()
            previous = None
            loss.backward()  # type: ignore[no-untyped-call]
            before, peak, counter.peak = counter.now, counter.peak, counter.now
            optimizer.step()
            step_bytes, counter.peak = max(step_bytes, counter.peak - before), max(peak, counter.peak)
            optimizer.zero_grad(set_to_none=True)
            previous = output, loss
        del previous
    return SimulatedSteps(start, counter.peak, step_bytes)


@dataclass
class SimulatedPeak:
    """A ``PeakModel``: one run's measured peak at ``anchor_batch`` without recompute, plus what
    the simulated steps at a batch and policy add over the simulated steps of that run."""

    recipe: Recipe
    anchor_batch: int
    anchor_bytes: float  # the run's whole-run peak
    scanned: TorchScan  # for a policy whose steps cannot play: the scan's savings
    _played: dict[tuple[int, frozenset[RecomputePlan]], SimulatedSteps] = field(default_factory=dict)

    def played(self, batch: int, policy: RecomputePolicy) -> bool:
        """Whether the steps at ``batch`` with ``policy`` have played already (a prediction without waiting)."""
        return (batch, frozenset(policy.plans)) in self._played

    def steps(self, batch: int, policy: RecomputePolicy) -> SimulatedSteps:
        key = batch, frozenset(policy.plans)  # the same plans in any order are one policy
        if key not in self._played:
            self._played[key] = simulate_steps(self.recipe, batch, policy)
        return self._played[key]

    @property
    def process_bytes(self) -> float:
        """The run's share the tensors do not hold: the runtime, autograd's nodes, the allocator's slack."""
        return self.anchor_bytes - self.steps(self.anchor_batch, _NONE).peak_bytes

    def predict(self, policy: RecomputePolicy, batch: int) -> float:
        try:
            return self.process_bytes + self.steps(batch, policy).peak_bytes
        except Exception:  # what the policy's wrappers do, fake tensors cannot run: the scan's savings
            if not policy.plans:
                raise
            return self.predict(_NONE, batch) - policy_saving(policy, self.scanned, batch)

    def holds(self, policy: RecomputePolicy, batch: int) -> str:
        try:
            played = self.steps(batch, policy)
        except Exception:  # the policy's wrappers cannot play on fake tensors (as in predict)
            return f"{self.describe(batch)}, less the scan's savings of the policy"
        return (
            f"the runtime's own {format_bytes(int(self.process_bytes))}, the model and its batch "
            f"{format_bytes(played.start_bytes)}, and {format_bytes(played.growth_bytes)} the steps add at "
            "their highest (gradients, optimizer state, what the policy leaves for backward, the loss)"
        )

    def describe(self, batch: int) -> str:
        played = self.steps(batch, _NONE)
        return (
            f"tensors {format_bytes(played.peak_bytes)} at their highest over two steps played on fake tensors "
            f"(the model and its batch {format_bytes(played.start_bytes)}) "
            f"+ {format_bytes(int(self.process_bytes))} the run at batch {self.anchor_batch} held besides"
        )
