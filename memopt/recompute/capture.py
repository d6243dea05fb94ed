"""Scan one eager training step: what autograd keeps from forward to backward, and who made it.

A dispatch mode notes, for every op output, the aten op and the innermost module running it
(module forward hooks keep the path) and the op's time; saved-tensor hooks then see each tensor
autograd keeps, counted once per storage. Parameters are not activations and are left out; a
tensor no op made (a batch input) is kept under the op ``input``. Ops that write in place
(dropout's ``bernoulli_``) are the last writer of their storage, so such tensors name an op
no plan may recompute: only a whole-module plan covers them.

Plans group the tensors by module pattern (numbered module names become ``*``) and op.

It lives beside the policy, torch and the standard library only, because it runs in two places:
memopt's own process (a recipe's step, ``capture_step``) and a user's training job (its model's
second training forward, ``capture_second_forward``, when memopt starts the job to scan it).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

from memopt.recompute.policy import OpName, RecomputePlan, RecomputePolicyError

__all__ = [
    "CAPTURE_FILE_ENV",
    "CapturedModel",
    "CapturedStep",
    "SavedTensor",
    "capture_second_forward",
    "capture_step",
    "capturing",
    "module_pattern",
    "plannable",
]

# Set by memopt in a job it starts to scan: the file the job's first training forward is captured to.
CAPTURE_FILE_ENV = "MEMOPT_CAPTURE_FILE"

BATCH_INPUT = "input"
_NUMBERED = re.compile(r"^\d+$")


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for backward, and the op and module that made it."""

    storage: int  # its storage's address during the step: the key that ties inputs to outputs
    module: str  # the innermost module running the op that made it; "" for the model's own forward or the loss
    op: str  # the aten op (BATCH_INPUT for a tensor no op made)
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    savers: frozenset[str]  # the innermost modules running when autograd saved it
    op_inputs: tuple[
        tuple[int, int], ...
    ]  # the making op's input storages (address, bytes), parameters and buffers left out


@dataclass(frozen=True)
class CapturedStep:
    saved: tuple[SavedTensor, ...]
    op_seconds: dict[tuple[str, str], float]  # (module, op) -> forward time of those calls
    module_seconds: dict[str, float]  # module path -> forward time of its calls
    # (module, op) -> bytes of those calls' outputs, saved or not: what a selective checkpoint that
    # keeps the op holds (eager SAC caches an op's whole output).
    op_output_bytes: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def saved_bytes(self) -> int:
        return sum(t.nbytes for t in self.saved)


def module_pattern(path: str) -> str:
    """A module path with its numbered names as ``*``: the pattern that names every layer alike."""
    return ".".join("*" if _NUMBERED.match(name) else name for name in path.split("."))


class _NoteProducers(TorchDispatchMode):
    def __init__(self, modules: list[str], seconds: dict[tuple[str, str], float], params: set[int]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.modules, self.seconds, self.params = modules, seconds, params
        self.output_bytes: dict[tuple[str, str], int] = {}
        self.producer: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # type: ignore[no-untyped-call]
        # Every output lives until the capture ends: no storage address is reused within it, so an
        # op's inputs, noted by address, are told apart from later tensors.
        self.outputs: list[torch.Tensor] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        started = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        op = func._schema.name.removeprefix("aten::")
        where = (self.modules[-1], op)
        self.seconds[where] = self.seconds.get(where, 0.0) + time.perf_counter() - started
        storages = [t.untyped_storage() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        inputs = tuple((s._cdata, s.nbytes()) for s in storages if s._cdata not in self.params)
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self.output_bytes[where] = self.output_bytes.get(where, 0) + tensor.untyped_storage().nbytes()
                self.producer[tensor] = (*where, inputs)  # an in-place op returns its input: the last writer names it
                self.outputs.append(tensor)
        return out


@contextmanager
def _module_paths(model: nn.Module, stack: list[str], seconds: dict[str, float]) -> Iterator[None]:
    starts: list[float] = []

    def enter(path: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            stack.append(path)
            starts.append(time.perf_counter())

        return hook

    def leave(path: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            stack.pop()
            seconds[path] = seconds.get(path, 0.0) + time.perf_counter() - starts.pop()

        return hook

    handles = []
    for path, module in model.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(enter(path)))
            handles.append(module.register_forward_hook(leave(path), always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class _Capture:
    """What ``capturing`` has noted; ``step`` once its block has ended."""

    step: CapturedStep | None = None


@contextmanager
def capturing(model: nn.Module) -> Iterator[_Capture]:
    """Note each storage autograd keeps for backward while the block runs (forward only)."""
    params = {p.untyped_storage()._cdata for p in (*model.parameters(), *model.buffers())}
    stack = [""]
    op_seconds: dict[tuple[str, str], float] = {}
    module_seconds: dict[str, float] = {}
    saved: dict[int, SavedTensor] = {}
    savers: dict[int, set[str]] = {}
    mode = _NoteProducers(stack, op_seconds, params)
    capture = _Capture()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        base = tensor if tensor._base is None else tensor._base
        storage = base.untyped_storage()
        address = storage._cdata
        if address in params:
            return tensor
        savers.setdefault(address, set()).add(stack[-1])
        if address not in saved:
            module, op, inputs = mode.producer.get(base, ("", BATCH_INPUT, ()))  # type: ignore[no-untyped-call]
            saved[address] = SavedTensor(
                address, module, op, storage.nbytes(), tuple(base.shape), str(base.dtype), frozenset(), inputs
            )
        return tensor

    with _module_paths(model, stack, module_seconds), saved_tensors_hooks(pack, lambda t: t), mode:
        yield capture
    mode.outputs.clear()
    kept = tuple(replace(t, savers=frozenset(savers[t.storage])) for t in saved.values())
    capture.step = CapturedStep(kept, op_seconds, module_seconds, mode.output_bytes)


def capture_step(model: nn.Module, forward_and_loss: Callable[[], torch.Tensor]) -> CapturedStep:
    """Run ``forward_and_loss`` once (no backward) and note each storage autograd keeps for backward."""
    with capturing(model) as capture:
        loss = forward_and_loss()
        del loss
    assert capture.step is not None
    return capture.step


@dataclass(frozen=True)
class CapturedModel:
    """A step captured in a user's job, with what a scan needs to know of the model's modules."""

    step: CapturedStep
    modules: tuple[str, ...]  # every named submodule's path
    batch_norm: tuple[str, ...]  # those holding batch norm: no whole-module plan over them

    def to_json(self) -> str:
        step = {
            "saved": [{**asdict(t), "savers": sorted(t.savers)} for t in self.step.saved],
            "op_seconds": [[module, op, seconds] for (module, op), seconds in self.step.op_seconds.items()],
            "module_seconds": self.step.module_seconds,
            "op_output_bytes": [[module, op, nbytes] for (module, op), nbytes in self.step.op_output_bytes.items()],
        }
        return json.dumps({"modules": self.modules, "batch_norm": self.batch_norm, "step": step})

    @classmethod
    def from_json(cls, text: str) -> CapturedModel:
        data = json.loads(text)
        saved = tuple(
            SavedTensor(
                t["storage"],
                t["module"],
                t["op"],
                t["nbytes"],
                tuple(t["shape"]),
                t["dtype"],
                frozenset(t["savers"]),
                tuple((address, nbytes) for address, nbytes in t["op_inputs"]),
            )
            for t in data["step"]["saved"]
        )
        op_seconds = {(module, op): seconds for module, op, seconds in data["step"]["op_seconds"]}
        output_bytes = {(module, op): nbytes for module, op, nbytes in data["step"]["op_output_bytes"]}
        step = CapturedStep(saved, op_seconds, dict(data["step"]["module_seconds"]), output_bytes)
        return cls(step, tuple(data["modules"]), tuple(data["batch_norm"]))


def capture_second_forward(model: nn.Module) -> None:
    """In a job memopt started to scan it (``CAPTURE_FILE_ENV`` set): capture the model's second
    training forward to that file, then end the process (rank 0 writes; every rank leaves, by
    ``SystemExit``, which passes through a training loop's ``except Exception``). The first is
    a warm-up, whose op times (kernels chosen, caches filled) are not a step's."""
    path = os.environ.get(CAPTURE_FILE_ENV)
    if not path:
        return
    original = model.forward
    training_forwards = 0

    def forward(*args: Any, **kwargs: Any) -> Any:
        nonlocal training_forwards
        training_forwards += model.training
        if training_forwards < 2 or not model.training:
            return original(*args, **kwargs)
        with capturing(model) as capture:
            output = original(*args, **kwargs)
        del output
        assert capture.step is not None
        if os.environ.get("RANK", "0") == "0":
            modules = tuple(name for name, _ in model.named_modules() if name)
            batch_norm = tuple(
                name for name, module in model.named_modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)
            )
            # In memopt's own run folder, written by rank 0 alone: a rename is atomic enough here, and
            # memopt.run.files (pydantic, psutil) is no import for a user's job.
            temporary = Path(path + ".tmp")
            temporary.write_text(CapturedModel(capture.step, modules, batch_norm).to_json())
            temporary.replace(path)
        raise SystemExit(0)

    model.forward = forward


def plannable(op: str) -> bool:
    """Whether an op's outputs can be recomputed from its inputs (``OpName.refuse_unsafe``)."""
    if op == BATCH_INPUT:
        return False
    try:
        RecomputePlan("x", OpName.parse(op))
    except RecomputePolicyError:
        return False
    return True
