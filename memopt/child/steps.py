"""A recipe's training steps, measured: runs inside the child process only.

What a back end adds to the steps (its model wrapper, a check of its stack, work after the
measured steps) is its ``StepsBackend`` (ORT: the model under ORTModule; plain PyTorch: the
recompute policy applied), which the child's entry point takes from the back end it was asked for.

This module imports torch; the parent process never imports it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.optim.optimizer import Optimizer

from memopt.child import OOM_MARKERS
from memopt.child.memory import cuda_figures, proc_status_bytes, reset_rss_peak
from memopt.cuda_caching import AllocatorSettings, PoolLayout
from memopt.errors import MemoptError, one_line
from memopt.recipes import Recipe, RecipeError
from memopt.recipes.defaults import check_loss, default_loss, make_optimizer
from memopt.step_lines import step_line

__all__ = [
    "StepFailure",
    "StepReport",
    "StepsBackend",
    "TrainingStep",
    "is_out_of_memory",
    "pick_device",
    "run_steps",
]


class StepFailure(Exception):
    """A training step raised: ``out_of_memory`` tells an allocation failure from other errors."""

    def __init__(self, message: str, out_of_memory: bool) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


@dataclass
class StepReport:
    """What the measured steps did. Sizes in bytes (named as ``Memory`` names them: the parent
    reads them with ``Memory.from_record``), times in seconds."""

    device: str
    step_times_s: list[float] = field(default_factory=list)
    # When each step ended, on the machine's monotonic clock: the parent leaves out of a step's
    # time the stretches it saw memopt or this process stopped in (``memopt.run.stops``).
    step_ended_at: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    memory_kind: str = "rss"
    static_bytes: int | None = None
    peak_over_run_bytes: int | None = None
    peak_bytes: int | None = None
    cuda_reserved_bytes: int | None = None
    # CUDA: memory outside the caching allocator (context, library workspaces, other processes)
    # where the reserved bytes peaked: device total − free − reserved, the highest after a step.
    cuda_outside_bytes: int | None = None
    cuda_alloc_retries: int | None = None  # times the allocator freed its cache to find room
    cuda_ooms: int | None = None  # allocations that failed even then
    cuda_device_name: str | None = None
    cuda_total_memory: int | None = None  # the device's capacity, for budgets given as a percentage
    # CUDA: what lived in the caching allocator's pool after the warm-up step (PoolLayout.to_json).
    cuda_pool: list[dict[str, Any]] | None = None


class StepsBackend(Protocol):
    """A back end's part in the child's measured steps."""

    def check(self) -> None:
        """Raise a ``MemoptError`` saying why this back end cannot train in this interpreter."""
        ...

    def stack_record(self) -> dict[str, Any]:
        """The installed stack, as the run's result records it."""
        ...

    def has_cuda(self) -> bool:
        """Whether it trains on CUDA here where torch sees a device (``--device auto`` then picks it)."""
        ...

    def wrap(self, model: nn.Module, log_level: str, save_onnx: bool) -> nn.Module:
        """The model as this back end trains it."""
        ...

    def prepare_optimizer(self, optimizer: Optimizer) -> None:
        """Set how the optimizer made from the wrapped model's parameters steps (torch: the policy's optimizer plan)."""
        ...

    def after_steps(self, recipe: Recipe, batch_size: int, device: str, folder: Path) -> None:
        """Work after the measured steps whose files go to the run's ``folder`` (ORT: node times)."""
        ...


def pick_device(requested: str, has_cuda: bool) -> str:
    if requested == "auto":
        return "cuda" if has_cuda and torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RecipeError("--device cuda was asked for but torch sees no CUDA device")
    return requested


def is_out_of_memory(err: BaseException) -> bool:
    if isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return any(marker in str(err).lower() for marker in OOM_MARKERS)


class TrainingStep:
    """A recipe's model as its back end trains it (``wrap``), with its batch and optimizer: call it
    to run one step."""

    def __init__(
        self,
        recipe: Recipe,
        batch_size: int,
        device: str,
        wrap: Callable[[nn.Module], nn.Module],
        prepare_optimizer: Callable[[Optimizer], None] = lambda optimizer: None,
    ) -> None:
        model = _call_recipe("build_model", recipe.model)
        if not isinstance(model, nn.Module):
            raise RecipeError(f"build_model() returned {type(model).__name__}; expected a torch.nn.Module")
        inputs, target = _split_batch(_call_recipe("make_batch", lambda: recipe.batch(batch_size), sized=True))
        self.device = device
        self.inputs = _to_device(inputs, device)
        self.target = target.to(device) if target is not None else None
        self.loss_fn = recipe.loss or default_loss
        self.loss_name = "loss()" if recipe.loss else "the default loss"
        if recipe.loss_only:
            model = LossOnly(model, self.loss_fn, takes_target=self.target is not None)
            if self.target is not None:  # the target becomes a model input, as the loss needs it inside
                self.inputs = (
                    {**self.inputs, "target": self.target}
                    if isinstance(self.inputs, dict)
                    else (*self.inputs, self.target)
                )
            self.target = None
            self.loss_fn, self.loss_name = _returned_loss, "the model's returned loss"
        self.model = wrap(model.to(device))
        self.optimizer = _call_recipe("optimizer", lambda: make_optimizer(recipe, self.model.parameters()))
        prepare_optimizer(self.optimizer)
        # A training loop's variables hold the last step's output and loss until the next
        # forward returns; ORT's arena places that step's tensors around them, so a trial
        # holds them too.
        self.previous: tuple[Any, Any] | None = None

    def __call__(self) -> float:
        """One training step; its loss."""
        try:
            inputs = self.inputs
            output = self.model(**inputs) if isinstance(inputs, dict) else self.model(*inputs)
            self.previous = None
            loss = _compute_loss(self.loss_fn, output, self.target, self.loss_name)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except RecipeError:
            raise
        except Exception as err:
            raise StepFailure(one_line(err), is_out_of_memory(err)) from err
        self.previous = output, loss
        return float(loss.detach())


def run_steps(
    recipe: Recipe,
    batch_size: int,
    *,
    steps: int,
    device: str,
    log_level: str,
    save_onnx: bool,
    on_step: Callable[[StepReport], None] = lambda report: None,
    profile_to: Path | None = None,
    backend: StepsBackend,
) -> StepReport:
    """Build the recipe's model as ``backend`` trains it and run one warm-up step plus ``steps`` more.

    ``step_times_s[0]`` is the warm-up step (export and session build included). With
    ``profile_to`` (a folder), the back end's work after the steps writes its files there
    (``StepsBackend.after_steps``).
    """
    report = StepReport(device=device, memory_kind="cuda_allocated" if device == "cuda" else "rss")
    if device == "cuda":
        try:  # without the caching allocator its statistics read 0: nothing to measure
            AllocatorSettings.from_environment(os.environ)
        except MemoptError as err:
            raise RecipeError(str(err)) from None
        report.cuda_device_name = torch.cuda.get_device_name()
        report.cuda_total_memory = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    step = TrainingStep(
        recipe, batch_size, device, lambda model: backend.wrap(model, log_level, save_onnx), backend.prepare_optimizer
    )
    report.static_bytes = _memory_now(device)

    for index in range(steps + 1):
        if index == 1:
            _reset_peak(device)
        started = time.monotonic()
        loss = step()
        report.step_ended_at.append(time.monotonic())
        report.step_times_s.append(report.step_ended_at[-1] - started)
        report.losses.append(loss)
        _read_peaks(report, device, steady=index >= 1)
        if device == "cuda" and index == 0:
            report.cuda_pool = _pool_layout(step).to_json()
        on_step(report)
        print(step_line(0, index + 1, steps + 1, report.step_times_s[-1]), file=sys.stderr, flush=True)
    if profile_to is not None:
        del step  # its model, and ORT's session and arena, go before the back end builds another
        backend.after_steps(recipe, batch_size, device, profile_to)
    return report


class LossOnly(nn.Module):
    """A model whose ``forward`` returns only its scalar loss: the loss runs inside ORT's graph.

    With ``takes_target``, a dict batch passes the target as ``target``, a tuple batch as its
    last input.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[Any, Any], Any], takes_target: bool) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.takes_target = takes_target

    def forward(self, *inputs: Any, **named: Any) -> Any:
        target = None
        if self.takes_target and named:
            target = named.pop("target")
        elif self.takes_target:
            *inputs, target = inputs  # type: ignore[assignment]  # a tuple's unpacked rest is a list
        return self.loss_fn(self.model(*inputs, **named), target)


def _returned_loss(output: Any, target: None) -> Any:
    del target  # the model computed its loss, with the target as an input
    return output


def _compute_loss(loss_fn: Callable[[Any, Any], Any], output: Any, target: Any, name: str) -> Any:
    """The step's loss; a loss that cannot be computed is the recipe's problem, not a crash."""
    try:
        loss = loss_fn(output, target)
    except RecipeError:
        raise
    except Exception as err:
        if is_out_of_memory(err):
            raise
        raise RecipeError(f"{name} failed on the model's output: {one_line(err)}") from err
    return check_loss(loss)


def _call_recipe(name: str, call: Callable[[], Any], *, sized: bool = False) -> Any:
    """``sized``: the call allocates the batch, so a size beyond what torch can even describe
    (an overflow of its 64-bit sizes) is one that does not fit either."""
    try:
        return call()
    except RecipeError:
        raise
    except Exception as err:
        too_large = sized and (isinstance(err, OverflowError) or "overflow" in str(err).lower())
        if too_large or is_out_of_memory(err):  # a batch too large for the device is not a broken recipe
            raise StepFailure(f"{name}() ran out of memory: {one_line(err)}", out_of_memory=True) from err
        raise RecipeError(f"{name}() failed: {one_line(err)}") from err


def _split_batch(batch: Any) -> tuple[tuple[torch.Tensor, ...] | dict[str, torch.Tensor], torch.Tensor | None]:
    expected = "expected (inputs, target) with inputs a tensor, tuple or dict of tensors and target a tensor or None"
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        got = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise RecipeError(f"make_batch() returned {got}; {expected}")
    inputs, target = batch
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    values = inputs.values() if isinstance(inputs, dict) else inputs
    if not isinstance(inputs, (tuple, list, dict)) or not all(isinstance(v, torch.Tensor) for v in values):
        raise RecipeError(f"make_batch() returned inputs of type {_describe(inputs)}; {expected}")
    if target is not None and not isinstance(target, torch.Tensor):
        raise RecipeError(f"make_batch() returned a target of type {type(target).__name__}; {expected}")
    return (dict(inputs) if isinstance(inputs, dict) else tuple(inputs)), target


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[{', '.join(type(v).__name__ for v in value)}]"
    return type(value).__name__


def _to_device(inputs: tuple[torch.Tensor, ...] | dict[str, torch.Tensor], device: str) -> Any:
    if isinstance(inputs, dict):
        return {key: value.to(device) for key, value in inputs.items()}
    return tuple(value.to(device) for value in inputs)


def _memory_now(device: str) -> int:
    if device == "cuda":
        return torch.cuda.memory_allocated()
    return proc_status_bytes("VmRSS")


def _reset_peak(device: str) -> None:
    """Start the steady-state peak after the warm-up step (export and session build)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return
    reset_rss_peak()  # where impossible, the steady peak includes the warm-up step


def _read_peaks(report: StepReport, device: str, steady: bool) -> None:
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
        report.cuda_reserved_bytes = max(report.cuda_reserved_bytes or 0, torch.cuda.max_memory_reserved())
        figures = cuda_figures()
        report.cuda_outside_bytes = max(report.cuda_outside_bytes or 0, figures["cuda_outside_bytes"])
        report.cuda_alloc_retries, report.cuda_ooms = figures["cuda_alloc_retries"], figures["cuda_ooms"]
    else:
        peak = proc_status_bytes("VmHWM")
    report.peak_over_run_bytes = max(report.peak_over_run_bytes or 0, peak)
    if steady:
        report.peak_bytes = max(report.peak_bytes or 0, peak)


def _pool_layout(step: TrainingStep) -> PoolLayout:
    """What lives in the caching allocator's pool now: the weights, the optimizer's state, the
    blocks the warm-up step left cached, and the outputs the loop holds until the next step."""
    loop = {tensor.untyped_storage().data_ptr() for tensor in _tensors(step.previous)}
    return PoolLayout.from_snapshot(torch.cuda.memory_snapshot(), loop)  # type: ignore[no-untyped-call]


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The CUDA tensors in a step's output (a tensor, or containers and model outputs of them)."""
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
