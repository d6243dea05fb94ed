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
* ``MODULE: offload`` — the module's forward runs under ``torch.autograd.graph.save_on_cpu``: what
  it saves for backward is copied to pinned host memory and back when backward needs it. A CPU
  tensor is in host memory already, and ``save_on_cpu`` keeps it as it is (``Tensor.cpu()``).
* ``optimizer: foreach-off`` / ``optimizer: fused`` — set in the optimizer's parameter groups
  (``apply_optimizer``), whose ``foreach`` and ``fused`` flags torch's optimizers read at every step.

Only torch and the standard library are imported here.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn
from torch.autograd.graph import save_on_cpu, saved_tensors_hooks
from torch.optim.optimizer import Optimizer
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakTensorKeyDictionary

from memopt.recompute.loss import check_loss_head, forward_with_chunked_loss
from memopt.recompute.policy import OpName, RecomputePlan, RecomputePolicy, RecomputePolicyError

__all__ = ["AppliedPolicy", "RecomputeWarning", "apply_optimizer", "apply_policy"]

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

    def __getstate__(self) -> dict[str, Any]:
        # What one forward left to its backward is that forward's: a copy (deepcopy, torch.save) starts without it.
        return {name: value for name, value in self.__dict__.items() if name not in ("noted", "replaced")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, noted=WeakTensorKeyDictionary(), replaced={})  # type: ignore[no-untyped-call]

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


class RecomputeWarning(UserWarning):
    """A plan that is applied but does nothing where the model runs."""


def apply_optimizer(optimizer: Optimizer, policy: RecomputePolicy) -> None:
    """Set ``policy``'s optimizer plan in ``optimizer``'s parameter groups (``RecomputePolicyError``
    where the optimizer has no such flag, or its parameters are on a device the fused kernel lacks)."""
    for plan in policy.optimizer_plans:
        name = type(optimizer).__name__
        for group in optimizer.param_groups:
            if "foreach" not in group or (plan.optimizer_step == "fused" and "fused" not in group):
                flag = "fused" if plan.optimizer_step == "fused" else "foreach"
                raise RecomputePolicyError(f"recompute plan {plan}: the optimizer {name} has no {flag!r} setting")
        if plan.optimizer_step == "fused":
            devices = {p.device.type for group in optimizer.param_groups for p in group["params"]}
            supported = _fused_devices()
            if not devices <= supported:
                raise RecomputePolicyError(
                    f"recompute plan {plan}: torch {torch.__version__} has no fused {name} for "
                    f"{', '.join(sorted(devices - supported))} parameters"
                )
        for group in optimizer.param_groups:
            group["foreach"] = False
            if "fused" in group:
                group["fused"] = plan.optimizer_step == "fused"


def _fused_devices() -> set[str]:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return set(_get_fused_kernels_supported_devices())


def apply_policy(model: nn.Module, policy: RecomputePolicy, optimizer: Optimizer | None = None) -> AppliedPolicy:
    """Wrap ``model``'s modules as ``policy`` says, and set its optimizer plan in ``optimizer``
    (``RecomputePolicyError`` where a plan matches nothing, would rerun batch norm's update of its
    running statistics, or names the optimizer and none is given)."""
    if hasattr(model, _APPLIED):
        raise RecomputePolicyError("a recompute policy is already applied to this model")
    if policy.optimizer_plans and optimizer is None:
        plan = policy.optimizer_plans[0]
        raise RecomputePolicyError(
            f"recompute plan {plan} sets how the optimizer steps: pass it, "
            "memopt.recompute.apply(model, optimizer=optimizer)"
        )
    if optimizer is not None:
        apply_optimizer(optimizer, policy)
    paths = [path for path, _ in model.named_modules() if path]
    modules = {plan: [path for path in paths if plan.matches_module(path)] for plan in policy.model_plans}
    unmatched = [plan.module for plan, matched in modules.items() if not matched]
    if unmatched:
        sample = ", ".join(paths[:6]) + (", ..." if len(paths) > 6 else "")
        raise RecomputePolicyError(
            f"no module of the model matches {', '.join(unmatched)} (its modules: {sample or 'none'})"
        )
    for plan, matched in modules.items():
        if plan.whole_module:
            for path in matched:
                _refuse_running_statistics(plan, path, model.get_submodule(path))
    applied = AppliedPolicy(policy, modules, {plan: 0 for plan in policy.plans if plan.op is not None})
    by_path: dict[str, list[RecomputePlan]] = {}
    for plan, matched in modules.items():
        for path in matched:
            by_path.setdefault(path, []).append(plan)
    for path, plans in by_path.items():
        module = model.get_submodule(path)
        op_plans = [plan for plan in plans if plan.op is not None]
        if op_plans:
            module.forward = _Noting(module, op_plans, applied)
        for plan in plans:
            if plan.whole_module:
                module.forward = _Checkpointed(module, plan.keep)
            elif plan.offload:
                module.forward = _Offloaded(module)
    offloads = [plan for plan in policy.plans if plan.offload]
    if offloads and not torch.cuda.is_available():
        warnings.warn(
            f"recompute plan {offloads[0]} moves nothing here: torch sees no CUDA device, and what the "
            "module saves is in host memory already",
            RecomputeWarning,
            stacklevel=3,
        )
    for plan in policy.plans:
        if plan.chunked_loss:
            model.forward = _ChunkedLoss(model, plan.module)
    if applied.op_calls:
        model.forward = _Hooked(model, applied)
    setattr(model, _APPLIED, applied)
    return applied


def _refuse_running_statistics(plan: RecomputePlan, path: str, module: nn.Module) -> None:
    """A whole-module region reruns its forward in backward: batch norm in it would update its
    running statistics a second time each step."""
    for name, inner in module.named_modules():
        if isinstance(inner, nn.modules.batchnorm._BatchNorm) and inner.track_running_stats:
            where = f"module {path} is" if not name else f"module {path} holds {path}.{name},"
            raise RecomputePolicyError(
                f"recompute plan {plan}: {where} a {type(inner).__name__}, whose running statistics a rerun of "
                "its forward would update twice; recompute inside it with op plans ('MODULE: OP')"
            )


class _Forward:
    """A module's forward that memopt replaced: an object holding its module, not a closure over
    the module's bound forward, so a model with a policy applied copies (``copy.deepcopy``: the
    copy's wrappers run the copy's modules) and pickles (``torch.save``) as one without.

    Outside autograd (``no_grad``, ``inference_mode``) nothing is saved for backward, so there is
    nothing to recompute: the module's own forward runs, untouched."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.inner: Callable[..., Any] | None = module.__dict__.get("forward")  # None: its class's forward

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        # inspect.signature(module.forward) follows it: callers read the forward's parameters
        # (transformers' Trainer drops the dataset columns the forward does not take).
        return self.inner if self.inner is not None else functools.partial(type(self.module).forward, self.module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.inner is not None:
            return self.inner(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)


class _Noting(_Forward):
    def __init__(self, module: nn.Module, plans: list[RecomputePlan], applied: AppliedPolicy) -> None:
        super().__init__(module)
        self.plans, self.applied = plans, applied

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        with _NoteOutputs(self.plans, self.applied):
            return self.forward(*args, **kwargs)


class _ChunkedLoss(_Forward):
    """The model's forward with its loss computed chunk by chunk over the output head at ``head_path``."""

    def __init__(self, model: nn.Module, head_path: str) -> None:
        check_loss_head(model, head_path)
        super().__init__(model)
        self.head_path = head_path
        self.signature = inspect.signature(self.__wrapped__)  # once, not at every forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return forward_with_chunked_loss(self.module, self.head_path, self.forward, self.signature, args, kwargs)


class _Offloaded(_Forward):
    """The module's forward with what it saves for backward waiting in host memory, pinned where its
    inputs are on CUDA (so the copies back run asynchronously); CPU tensors stay where they are."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in tree_flatten((args, kwargs))[0])
        with save_on_cpu(pin_memory=cuda):  # type: ignore[no-untyped-call]
            return self.forward(*args, **kwargs)


class _Hooked(_Forward):
    def __init__(self, model: nn.Module, applied: AppliedPolicy) -> None:
        super().__init__(model)
        self.applied = applied

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        applied = self.applied
        applied.replaced.clear()
        with saved_tensors_hooks(applied.pack, applied.unpack):
            out = self.forward(*args, **kwargs)
        # In eval mode an op may not run at all (dropout): the check waits for a training forward.
        if self.module.training:
            applied.check_ops_ran()
        return out


class _Checkpointed(_Forward):
    def __init__(self, module: nn.Module, keep: tuple[OpName, ...]) -> None:
        super().__init__(module)
        # No context_fn where nothing is kept: torch.compile traces torch's checkpoint only without one.
        self.options: dict[str, Any] = {"context_fn": _keeping(keep)} if keep else {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        # The checkpoint saves the tensors it is given for the rerun, and where saved-tensor hooks are on
        # (an op plan's, an offload's, the user's own) autograd gives each back as a tensor object of its
        # own: the region is given each distinct tensor once and rebuilds the call from them, so a forward
        # that asks whether two inputs are one (attention's ``query is key``) takes the same path when rerun.
        given = [*args, *kwargs.values()]
        tensors = list({id(value): value for value in given if isinstance(value, torch.Tensor)}.values())
        slot = {id(tensor): index for index, tensor in enumerate(tensors)}
        slots = [slot[id(value)] if isinstance(value, torch.Tensor) else None for value in given]
        values = [None if isinstance(value, torch.Tensor) else value for value in given]  # no tensor kept here
        names, positional = list(kwargs), len(args)

        def region(*inputs: torch.Tensor) -> Any:
            call = [value if index is None else inputs[index] for value, index in zip(values, slots)]
            return self.forward(*call[:positional], **dict(zip(names, call[positional:])))

        return torch_checkpoint.checkpoint(
            region, *tensors, use_reentrant=False, preserve_rng_state=True, **self.options
        )


def _keeping(keep: tuple[OpName, ...]) -> Callable[[], tuple[Any, Any]]:
    """The selective-checkpoint contexts that cache the outputs of ``keep``'s ops, by torch release:
    partials of module functions over op names as text, so they pickle with the module and
    torch.compile takes them as constants."""
    policy = functools.partial(_kept, tuple(map(str, keep)))
    public = getattr(torch_checkpoint, "create_selective_checkpoint_contexts", None)
    if public is None:  # torch 2.4: the private generator
        return functools.partial(torch_checkpoint._pt2_selective_checkpoint_context_fn_gen, policy)
    return functools.partial(public, policy)


@functools.cache
def _op_names(names: tuple[str, ...]) -> tuple[OpName, ...]:
    return tuple(map(OpName.parse, names))


def _kept(names: tuple[str, ...], context: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Whether selective checkpointing keeps an op's output, in the answer the torch release asks for."""
    kept = any(op.matches(func) for op in _op_names(names))
    policy = getattr(torch_checkpoint, "CheckpointPolicy", None)
    if policy is None:  # torch 2.4's generator caches where the answer is True
        return kept
    return policy.MUST_SAVE if kept else policy.PREFER_RECOMPUTE
