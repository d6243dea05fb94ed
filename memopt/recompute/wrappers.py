"""Put a recompute policy on a model: the wrappers ``memopt.recompute.apply`` installs.

Two mechanisms, one per kind of plan (``policy``):

* ``MODULE: OP`` — while a matching module runs, a dispatch mode notes each output of the op
  with the op and its inputs. While the model's forward runs, saved-tensor hooks replace such an
  output (or a view of it) by that note, and backward recomputes it from the inputs: a
  checkpoint region of one op, the cheapest recompute there is. The inputs stay alive (they
  usually are anyway: most ops save their input), except one that another plan recomputes, kept
  as that plan's note (chained plans each drop their output); an input changed in place since is refused.
* ``MODULE: *`` — the module's forward runs in a non-reentrant ``torch.utils.checkpoint`` with
  its RNG state preserved, so dropout draws the same mask again. ``* except OPS`` adds selective
  activation checkpointing: the listed ops' outputs are cached (``create_selective_checkpoint_contexts``
  from torch 2.5, the private ``_pt2_selective_checkpoint_context_fn_gen`` in 2.4). Eager SAC caches
  an op's whole output whether autograd saves it or not: keep only ops whose outputs are saved.
* ``MODULE: chunked-loss`` — the model's forward, called with labels, computes its loss over that
  head a chunk of tokens at a time (``memopt.recompute.loss``).

Only torch and the standard library are imported here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakTensorKeyDictionary

from memopt.recompute.loss import chunked_loss_forward
from memopt.recompute.policy import OpName, RecomputePlan, RecomputePolicy, RecomputePolicyError

__all__ = ["AppliedPolicy", "apply_policy"]

_APPLIED = "_memopt_recompute_policy"


class _Recompute:
    """One call of an op whose outputs backward recomputes: the op, its inputs, and the result once made.

    An input that is itself the output of another recomputed call (a linear's output into the
    GELU after it) is kept as that call's note, not as the tensor: chained op plans each drop their
    output, and backward recomputes the chain."""

    def __init__(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], applied: AppliedPolicy
    ) -> None:
        self.func = func
        flat, self.spec = tree_flatten((args, kwargs))
        self.inputs = [applied.pack(t) if isinstance(t, torch.Tensor) else t for t in flat]
        self.versions = [(t, t._version) for t in self.inputs if isinstance(t, torch.Tensor)]
        self.outputs: list[torch.Tensor] | None = None

    def inputs_changed(self) -> bool:
        return any(t._version != version for t, version in self.versions)

    def output(self, index: int) -> torch.Tensor:
        if self.outputs is None:
            if self.inputs_changed():
                raise RuntimeError(
                    f"memopt recompute: an input of aten.{self.func.__name__} was changed in place after the "
                    "forward, so its output cannot be recomputed; drop that plan from the policy"
                )
            args, kwargs = tree_unflatten([AppliedPolicy.unpack(i) for i in self.inputs], self.spec)
            with torch.no_grad():
                out = self.func(*args, **kwargs)
            self.outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return self.outputs[index]


@dataclass(frozen=True)
class _Noted:
    """Where a saved tensor sits in a recomputed output: which output, and the view taken of it."""

    call: _Recompute
    index: int
    size: torch.Size
    stride: tuple[int, ...]
    offset: int
    version: int  # the output's version as the op made it: changed in place since, it is no longer the op's


@dataclass(frozen=True)
class _Packed:
    """What autograd keeps in place of a saved tensor that backward recomputes."""

    noted: _Noted
    size: torch.Size
    stride: tuple[int, ...]
    offset: int

    def unpack(self) -> torch.Tensor:
        noted = self.noted
        out = noted.call.output(noted.index)
        if out.size() != noted.size or out.stride() != noted.stride:
            raise RuntimeError(f"memopt recompute: aten.{noted.call.func.__name__} gave another layout when rerun")
        if (self.size, self.stride, self.offset) == (noted.size, noted.stride, noted.offset):
            return out
        return out.as_strided(self.size, self.stride, out.storage_offset() + self.offset - noted.offset)


class _NoteOutputs(TorchDispatchMode):
    """Inside one module call: note the outputs of the plans' ops, for the saved-tensor hooks."""

    def __init__(self, plans: list[RecomputePlan], applied: AppliedPolicy) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.plans, self.applied = plans, applied

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        for plan in self.plans:
            self.applied.ops_seen.setdefault(plan, set()).add(func._schema.name.removeprefix("aten::"))
        chosen = [plan for plan in self.plans if plan.op is not None and plan.op.matches(func)]
        if not chosen:
            return func(*args, **kwargs)
        call = _Recompute(func, args, kwargs, self.applied)
        out = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        for index, tensor in enumerate(outputs):
            self.applied.noted[tensor] = _Noted(
                call, index, tensor.size(), tensor.stride(), tensor.storage_offset(), tensor._version
            )
        for plan in chosen:
            self.applied.op_calls[plan] += 1
        return out


@dataclass
class AppliedPolicy:
    """A policy put on one model: which modules each plan wraps, and how often its op ran."""

    policy: RecomputePolicy
    modules: dict[RecomputePlan, list[str]]
    op_calls: dict[RecomputePlan, int] = field(default_factory=dict)
    ops_seen: dict[RecomputePlan, set[str]] = field(default_factory=dict)  # aten names that ran in its modules
    noted: WeakTensorKeyDictionary = field(default_factory=WeakTensorKeyDictionary)
    # The op outputs the last forward left to backward to recompute: (call, output index) -> bytes.
    replaced: dict[tuple[int, int], int] = field(default_factory=dict)
    checked: bool = False

    def pack(self, tensor: torch.Tensor) -> Any:
        base = tensor if tensor._base is None else tensor._base
        noted = self.noted.get(base)  # type: ignore[no-untyped-call]
        if noted is None or base._version != noted.version:  # written in place after the op: keep it as it is
            return tensor
        self.replaced[(id(noted.call), noted.index)] = base.untyped_storage().nbytes()
        return _Packed(noted, tensor.size(), tensor.stride(), tensor.storage_offset())

    @property
    def replaced_bytes(self) -> int:
        """Bytes of op outputs the last forward did not keep for backward (what the op plans save)."""
        return sum(self.replaced.values())

    @staticmethod
    def unpack(packed: Any) -> torch.Tensor:
        return packed.unpack() if isinstance(packed, _Packed) else packed

    def check_ops_ran(self) -> None:
        """After the first forward: an op plan whose op never ran in its modules is a mistake, said once."""
        if self.checked:
            return
        self.checked = True
        idle = [plan for plan, calls in self.op_calls.items() if calls == 0]
        if idle:
            ran = ", ".join(sorted(self.ops_seen.get(idle[0], set()))) or "none"
            raise RecomputePolicyError(
                f"recompute plan {idle[0]}: its op never ran in its modules during the first forward "
                f"(ops that ran there: {ran}); scan the model again"
            )


def apply_policy(model: nn.Module, policy: RecomputePolicy) -> AppliedPolicy:
    """Wrap ``model``'s modules as ``policy`` says (``RecomputePolicyError`` where a plan matches nothing)."""
    if hasattr(model, _APPLIED):
        raise RecomputePolicyError("a recompute policy is already applied to this model")
    paths = [path for path, _ in model.named_modules() if path]
    modules = {plan: [path for path in paths if plan.matches_module(path)] for plan in policy.plans}
    unmatched = [plan.module for plan, matched in modules.items() if not matched]
    if unmatched:
        sample = ", ".join(paths[:6]) + (", ..." if len(paths) > 6 else "")
        raise RecomputePolicyError(
            f"no module of the model matches {', '.join(unmatched)} (its modules: {sample or 'none'})"
        )
    applied = AppliedPolicy(policy, modules, {plan: 0 for plan in policy.plans if plan.op is not None})
    by_path: dict[str, list[RecomputePlan]] = {}
    for plan, matched in modules.items():
        for path in matched:
            by_path.setdefault(path, []).append(plan)
    for path, plans in by_path.items():
        module = model.get_submodule(path)
        op_plans = [plan for plan in plans if plan.op is not None]
        if op_plans:
            module.forward = _noting(module.forward, op_plans, applied)
        for plan in plans:
            if plan.whole_module:
                module.forward = _checkpointed(module.forward, plan.keep)
    for plan in policy.plans:
        if plan.chunked_loss:
            model.forward = chunked_loss_forward(model, plan.module)
    if applied.op_calls:
        model.forward = _hooked(model.forward, applied)
    setattr(model, _APPLIED, applied)
    return applied


def _noting(forward: Callable[..., Any], plans: list[RecomputePlan], applied: AppliedPolicy) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _NoteOutputs(plans, applied):
            return forward(*args, **kwargs)

    return run


def _hooked(forward: Callable[..., Any], applied: AppliedPolicy) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        applied.replaced.clear()
        with saved_tensors_hooks(applied.pack, applied.unpack):
            out = forward(*args, **kwargs)
        applied.check_ops_ran()
        return out

    return run


def _checkpointed(forward: Callable[..., Any], keep: tuple[OpName, ...]) -> Callable[..., Any]:
    context_fn = _keeping(keep) if keep else torch_checkpoint.noop_context_fn

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        return torch_checkpoint.checkpoint(
            forward, *args, use_reentrant=False, preserve_rng_state=True, context_fn=context_fn, **kwargs
        )

    return run


def _keeping(keep: tuple[OpName, ...]) -> Callable[[], tuple[Any, Any]]:
    """The selective-checkpoint contexts that cache the outputs of ``keep``'s ops, by torch release."""

    def kept(func: Any) -> bool:
        return any(op.matches(func) for op in keep)

    public = getattr(torch_checkpoint, "create_selective_checkpoint_contexts", None)
    if public is None:  # torch 2.4: the private generator; its policy answers True to cache
        private = torch_checkpoint._pt2_selective_checkpoint_context_fn_gen
        return functools.partial(private, lambda mode, func, *args, **kwargs: kept(func))
    policy = torch_checkpoint.CheckpointPolicy  # type: ignore[attr-defined,unused-ignore]

    def choose(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        return policy.MUST_SAVE if kept(func) else policy.PREFER_RECOMPUTE

    return functools.partial(public, choose)
