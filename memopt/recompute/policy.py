"""The recompute policy: plans a person can read, in a file a training script reads back.

A plan names where and what:

``blocks.*.mlp.act: gelu``
    Inside every module matching ``blocks.*.mlp.act``, the outputs of ``aten.gelu`` are not
    kept for backward: backward recomputes them from the op's inputs (as ORT's ``Gelu+``).
``blocks.*.attn: *``
    Every matching module runs as one non-reentrant checkpoint region: only its inputs are
    kept, and backward reruns its forward with the RNG state replayed (dropout included).
``blocks.*: * except mm, bmm``
    The same region, but the outputs of ``mm`` and ``bmm`` are kept (selective activation
    checkpointing), so backward reruns only the cheaper ops between them.
``lm_head: chunked-loss``
    A causal LM whose output head is ``lm_head`` computes its loss a chunk of tokens at a time
    and keeps no logits (``memopt.recompute.loss``).
``blocks.*: offload``
    What every matching module saves for backward waits in (pinned) host memory until backward
    copies it back (``torch.autograd.graph.save_on_cpu``): on CUDA only, where the device's memory
    is not the host's.
``optimizer: foreach-off`` / ``optimizer: fused``
    The optimizer steps one parameter at a time (torch's single-tensor path, whose temporaries are
    one parameter's, not every parameter's at once as ``foreach``'s) or with the fused kernel (no
    temporaries); applied to the optimizer given to ``memopt.recompute.apply(model, optimizer=opt)``.

A module pattern is a dotted module path (``named_modules()``) in which ``*`` stands for one
name. An op is an aten operator, spelled ``gelu``, ``aten.gelu``, ``aten::gelu`` or with an
overload ``gelu.default``; without an overload it means every overload, so ``mm`` and
``mm.default`` both match the matmul (the SAC trap of ``aten.mm`` matching nothing is gone).
Random, in-place and view ops are refused where a plan would recompute them from their inputs
or keep their outputs: either gives wrong gradients or saves nothing.

The file is JSON: ``{"format": "memopt-recompute-policy", "version": 1, "plans": [...]}``
with each plan in the text form above. Only torch and the standard library are imported here.
"""

from __future__ import annotations

import json
import os
import reprlib
import stat
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from torch._ops import ops as torch_ops

from memopt.errors import MemoptError, path_kind

__all__ = [
    "CHUNKED_LOSS",
    "OFFLOAD",
    "OPTIMIZER",
    "OPTIMIZER_STEPS",
    "OptimizerStep",
    "POLICY_ENV",
    "OpName",
    "RecomputePlan",
    "RecomputePolicy",
    "RecomputePolicyError",
]

POLICY_ENV = "MEMOPT_RECOMPUTE_POLICY"
_FORMAT = "memopt-recompute-policy"
_VERSION = 1
_WHOLE_MODULE = "*"
_EXCEPT = " except "
_WHOLE_MODULE_ADVICE = "use a whole-module plan ('MODULE: *')"
CHUNKED_LOSS = "chunked-loss"
OFFLOAD = "offload"
OPTIMIZER = "optimizer"  # the module path an optimizer plan names: the optimizer, not a module of the model
OptimizerStep = Literal["foreach-off", "fused"]
OPTIMIZER_STEPS: tuple[OptimizerStep, ...] = get_args(OptimizerStep)
# Ops that write into an input their schema does not mark as written: batch norm's running statistics.
_UNMARKED_WRITES = frozenset(
    {"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm", "batch_norm", "_batch_norm_impl_index"}
)
_MAX_OP_NAME = 100  # aten's longest are about 50 characters
# A policy is a few kilobytes: a file past this is not one, and is not read whole.
_MAX_FILE_BYTES = 1 << 20
# What a message quotes of the user's text: enough to find it, never a megabyte echoed back.
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = 80


def _quoted(value: object) -> str:
    return _QUOTE.repr(value)


class RecomputePolicyError(MemoptError):
    """The policy file cannot be read, or a plan in it cannot be applied as written."""


@dataclass(frozen=True)
class OpName:
    """An aten operator, with or without one overload (``None``: all of them)."""

    name: str
    overload: str | None = None

    @classmethod
    def parse(cls, text: str) -> OpName:
        spelled = text.strip()
        bare = spelled.replace("::", ".").removeprefix("torch.ops.").removeprefix("aten.")
        name, _, overload = bare.partition(".")
        if not name or len(name) > _MAX_OP_NAME or not name.replace("_", "a").isalnum() or "." in overload:
            raise RecomputePolicyError(f"{_quoted(spelled)} is not an op name (say gelu, aten.gelu or gelu.default)")
        op = cls(name, overload or None)
        op.overloads()  # refuses an op torch does not have
        return op

    def overloads(self) -> list[torch._ops.OpOverload]:
        """The overloads this name covers (``RecomputePolicyError`` where torch has none)."""
        try:
            packet = getattr(torch_ops.aten, self.name)
        except (AttributeError, RuntimeError):
            packet = None
        # The namespace's own attributes (``name``, ``__class__``, ``__init__``) are no ops.
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            raise RecomputePolicyError(f"torch {torch.__version__} has no op aten.{self.name}")
        names = packet.overloads()  # type: ignore[no-untyped-call]
        if self.overload is not None and self.overload not in names:
            raise RecomputePolicyError(
                f"aten.{self.name} has no overload {_quoted(self.overload)} (it has {', '.join(names)})"
            )
        return [getattr(packet, name) for name in ([self.overload] if self.overload else names)]

    def matches(self, func: torch._ops.OpOverload) -> bool:
        return func._schema.name == f"aten::{self.name}" and self.overload in (None, func._overloadname)

    def refuse_unsafe(self, keep: bool = False) -> None:
        """Refuse an op whose outputs cannot be recomputed from its inputs (``keep``: cannot be
        kept apart from them inside a whole-module region)."""
        for overload in self.overloads():
            schema = overload._schema
            if any(arg.is_out for arg in schema.arguments):
                continue  # the out= variant writes into the buffer it is given, never into an input
            if self.name in _UNMARKED_WRITES:
                why = "updates the running statistics in place: recomputed it would update them twice"
            elif torch.Tag.nondeterministic_seeded in overload.tags and keep:
                why = "is random: the region reruns it with the RNG state replayed, so it draws the same numbers unkept"
            elif torch.Tag.nondeterministic_seeded in overload.tags:
                why = "is random: recomputed outside a checkpoint region it draws new numbers"
            elif schema.is_mutable:
                why = "writes into its inputs: recomputed or cached it gives wrong gradients"
            elif any(ret.alias_info is not None for ret in schema.returns):
                why = "returns a view of its input: there is nothing of its own to drop or keep"
            elif keep and torch._C._dispatch_has_kernel_for_dispatch_key(
                overload.name(),  # type: ignore[no-untyped-call]
                "CompositeImplicitAutograd",
            ):
                raise RecomputePolicyError(
                    f"cannot keep {self}: aten.{overload.__name__} decomposes into other ops before selective "
                    "checkpointing sees any (matmul and linear into mm, bmm or addmm), so it would keep nothing; "
                    "keep the ops it decomposes into"
                )
            else:
                continue
            use, advice = ("keep", "leave it out of 'except'") if keep else ("recompute", _WHOLE_MODULE_ADVICE)
            raise RecomputePolicyError(f"cannot {use} {self}: aten.{overload.__name__} {why}; {advice}")

    def __str__(self) -> str:
        return self.name if self.overload is None else f"{self.name}.{self.overload}"


@dataclass(frozen=True)
class RecomputePlan:
    """``module: op`` (recompute that op's outputs), ``module: *``, ``module: * except ops``,
    ``module: chunked-loss``, ``module: offload`` or ``optimizer: foreach-off|fused``."""

    module: str
    op: OpName | None = None  # None: the whole module is one checkpoint region (or one of the kinds below)
    keep: tuple[OpName, ...] = ()  # in a whole-module region: ops whose outputs stay saved
    chunked_loss: bool = False  # the module is a causal LM's head: its loss runs in chunks
    offload: bool = False  # what the module saves for backward waits in host memory
    optimizer_step: OptimizerStep | None = None  # how the optimizer steps (module is OPTIMIZER)

    def __post_init__(self) -> None:
        names = self.module.split(".")
        if not self.module or any(not name or name != name.strip() or " " in name for name in names):
            raise RecomputePolicyError(f"{_quoted(self.module)} is not a module path pattern (say blocks.*.mlp)")
        kinds = [
            self.op is not None or bool(self.keep),
            self.chunked_loss,
            self.offload,
            self.optimizer_step is not None,
        ]
        if sum(kinds) > 1:
            raise RecomputePolicyError(
                f"plan {self}: one kind of plan a line (an op, '*', '{CHUNKED_LOSS}', '{OFFLOAD}')"
            )
        if (self.module == OPTIMIZER) != (self.optimizer_step is not None):
            raise RecomputePolicyError(
                f"plan {self}: the optimizer's plans are '{OPTIMIZER}: {' or '.join(OPTIMIZER_STEPS)}', and only they name it"
            )
        if self.op is not None and self.keep:
            raise RecomputePolicyError(f"plan {self}: 'except' goes with a whole-module plan ('MODULE: * except OPS')")
        if self.op is not None:
            self.op.refuse_unsafe()
        for op in self.keep:
            op.refuse_unsafe(keep=True)

    @classmethod
    def parse(cls, text: str) -> RecomputePlan:
        module, colon, what = text.partition(":")
        what = what.strip()
        if not colon or not what:
            raise RecomputePolicyError(
                f"plan {_quoted(text)} is not 'MODULE: OP', 'MODULE: *' or 'MODULE: * except OPS'"
            )
        if what == _WHOLE_MODULE:
            return cls(module.strip())
        if what == CHUNKED_LOSS:
            return cls(module.strip(), chunked_loss=True)
        if what == OFFLOAD:
            return cls(module.strip(), offload=True)
        for step in OPTIMIZER_STEPS:
            if what == step:
                return cls(module.strip(), optimizer_step=step)
        if what.startswith(_WHOLE_MODULE + _EXCEPT):
            keep = tuple(OpName.parse(op) for op in what.removeprefix(_WHOLE_MODULE + _EXCEPT).split(","))
            return cls(module.strip(), keep=keep)
        return cls(module.strip(), OpName.parse(what))

    @property
    def whole_module(self) -> bool:
        return self.op is None and not self.chunked_loss and not self.offload and self.optimizer_step is None

    @property
    def kind(self) -> str:
        """What the plan does, in a word: op, module, loss, offload or optimizer."""
        if self.op is not None:
            return "op"
        if self.chunked_loss:
            return "loss"
        if self.offload:
            return OFFLOAD
        return OPTIMIZER if self.optimizer_step is not None else "module"

    def matches_module(self, path: str) -> bool:
        pattern = self.module.split(".")
        names = path.split(".")
        return len(names) == len(pattern) and all(fnmatchcase(n, p) for n, p in zip(names, pattern))

    def __str__(self) -> str:
        if self.op is not None:
            return f"{self.module}: {self.op}"
        if self.chunked_loss:
            return f"{self.module}: {CHUNKED_LOSS}"
        if self.offload:
            return f"{self.module}: {OFFLOAD}"
        if self.optimizer_step is not None:
            return f"{self.module}: {self.optimizer_step}"
        kept = f"{_EXCEPT}{', '.join(map(str, self.keep))}" if self.keep else ""
        return f"{self.module}: {_WHOLE_MODULE}{kept}"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once: ``json`` would keep the last of two, silently."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise RecomputePolicyError(f"{_quoted(key)} is given twice")
        seen.add(key)
    return dict(pairs)


@dataclass(frozen=True)
class RecomputePolicy:
    """The chosen plans, applied together (``memopt.recompute.apply``)."""

    plans: tuple[RecomputePlan, ...]

    def __post_init__(self) -> None:
        if len(self.optimizer_plans) > 1:
            raise RecomputePolicyError(
                f"plans {', '.join(map(str, self.optimizer_plans))}: the optimizer steps one way; keep one of them"
            )

    @property
    def optimizer_plans(self) -> tuple[RecomputePlan, ...]:
        return tuple(plan for plan in self.plans if plan.optimizer_step is not None)

    @property
    def model_plans(self) -> tuple[RecomputePlan, ...]:
        return tuple(plan for plan in self.plans if plan.optimizer_step is None)

    def to_json(self) -> str:
        return json.dumps({"format": _FORMAT, "version": _VERSION, "plans": [str(p) for p in self.plans]}, indent=2)

    @classmethod
    def from_json(cls, text: str, source: str = "the policy") -> RecomputePolicy:
        try:
            data: Any = json.loads(text, object_pairs_hook=_unique_keys)
        except RecursionError:
            raise RecomputePolicyError(f"{source} is not a memopt recompute policy (JSON nested too deeply)") from None
        except ValueError as err:  # JSONDecodeError, and an integer of more digits than Python converts
            raise RecomputePolicyError(f"{source} is not JSON: {err}") from None
        except RecomputePolicyError as err:
            raise RecomputePolicyError(f"{source}: {err}") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise RecomputePolicyError(f'{source} is not a memopt recompute policy (no "format": "{_FORMAT}")')
        version = data.get("version")
        if type(version) is not int or version != _VERSION:  # true and 1.0 equal 1, and are not what memopt writes
            raise RecomputePolicyError(f"{source} is policy version {_quoted(version)}; this memopt reads {_VERSION}")
        unknown = sorted(set(data) - {"format", "version", "plans"})
        plans = data.get("plans")
        if unknown or not isinstance(plans, list) or not all(isinstance(p, str) for p in plans):
            raise RecomputePolicyError(
                f"{source}: expected only \"plans\", a list of 'MODULE: OP' texts, beside the format"
            )
        try:
            return cls(tuple(RecomputePlan.parse(p) for p in plans))
        except RecomputePolicyError as err:
            raise RecomputePolicyError(f"{source}: {err}") from None

    @classmethod
    def read(cls, path: Path) -> RecomputePolicy:
        """The policy in the regular file ``path``: a FIFO, a device or a folder is refused unread
        (a FIFO without a writer would block, ``/dev/zero`` never ends), and so is a file too
        large to be a policy."""
        source = f"{POLICY_ENV}={path}"
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                raise RecomputePolicyError(f"{source} is {path_kind(mode)}, not a policy file")
            # Non-blocking: a FIFO put in the file's place since the stat opens without waiting for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(fd, "rb") as handle:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise RecomputePolicyError(f"{source} is {path_kind(mode)}, not a policy file")
                data = handle.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            raise RecomputePolicyError(f"{source}: no such file") from None
        except OSError as err:
            raise RecomputePolicyError(f"{source}: cannot read it ({err.strerror or err})") from None
        if len(data) > _MAX_FILE_BYTES:
            raise RecomputePolicyError(f"{source} is over {_MAX_FILE_BYTES >> 20} MiB: too large to be a policy")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecomputePolicyError(f"{source}: cannot read it ({err})") from None
        return cls.from_json(text, source)

    def write(self, path: Path) -> None:
        path.write_text(self.to_json() + "\n", encoding="utf-8")

    def __str__(self) -> str:
        return "; ".join(map(str, self.plans)) or "no recompute"
