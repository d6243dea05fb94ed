"""Inside a user's training job: count ORTModule training steps, measure each rank, report.

``memopt.child.hook``'s ``sitecustomize`` calls ``install()`` at start-up in every Python
process of the job. Nothing happens until the job imports ORTModule (or, in plain PyTorch,
``memopt.recompute``, whose ``apply`` then marks the model it applies a policy to as ORTModule's
wrapping does); then each ``ORTModule`` the job builds

- saves its graphs (rank 0 only, when the parent asks: ``DebugOptions(save_onnx=True)``,
  the one ORTModule setting no environment variable turns on), and
- marks the first training forward, from which every ``torch.optim`` optimizer step
  (torch's global step post-hook) counts as a training step: step 1 is the warm-up
  (export, session build), steps 2…N+1 are measured.

After every step the rank appends one JSON line to the steps file: its rank, the step,
the step time and its memory (CPU: peak RSS, reset after the warm-up step; CUDA:
``torch.cuda.max_memory_allocated``/reserved, reset likewise). After its last step a rank
leaves at the step boundary by a normal interpreter exit (``SystemExit``, which passes
through a training loop's ``except Exception``): every rank stops at the same step, and the
job then ends as it would by hand (atexit handlers, finalizers, module teardown), which memopt
measures when it reaps the job. A job that catches the exit runs on until memopt ends it.
Limits: a step is an optimizer step (two optimizers count twice; a
hand-written update without ``torch.optim`` is never seen); ``python -S``/``-I`` skip
``sitecustomize``; processes on other hosts write to their own host's steps file.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from memopt.child import (
    JOB_SAVE_ONNX_VAR,
    JOB_STEPS_FILE_VAR,
    JOB_STEPS_VAR,
    ONNX_PREFIX,
    PARENT_PID_VAR,
    TRAINING_EVENTS,
)
from memopt.child.memory import cuda_figures, proc_status_bytes, reset_rss_peak
from memopt.step_lines import step_line

__all__ = ["install"]

_ORTMODULE_MODULE = "onnxruntime.training.ortmodule.ortmodule"
_RECOMPUTE_MODULE = "memopt.recompute"
_PARENT_POLL_S = 1.0


def install() -> None:
    """Patch ORTModule, and memopt.recompute's ``apply``, when (and if) the job imports them;
    leave if memopt itself is gone."""
    threading.Thread(target=_leave_with_parent, name="memopt-parent-watch", daemon=True).start()
    for name, patch in ((_ORTMODULE_MODULE, _patch_ortmodule), (_RECOMPUTE_MODULE, _patch_recompute)):
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            sys.meta_path.insert(0, _PatchOnImport(name, patch))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Lets one module load as usual, then patches it."""

    def __init__(self, name: str, patch: Any) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            self.patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch_ortmodule(module: ModuleType) -> None:
    ortmodule_class = module.ORTModule
    original_init = ortmodule_class.__init__

    def __init__(self: Any, wrapped: Any, debug_options: Any = None) -> None:
        original_init(self, wrapped, _debug_options(debug_options))
        self.register_forward_pre_hook(functools.partial(_on_forward, TRAINING_EVENTS["ort"]))

    ortmodule_class.__init__ = __init__


def _patch_recompute(module: ModuleType) -> None:
    """A plain-PyTorch job (the torch back end): its steps count from the first training forward
    of the model it passes to ``memopt.recompute.apply``, as an ORTModule's do; a job started to
    be scanned captures that forward and ends there."""
    original_apply = module.apply

    def apply(model: Any, policy: Any = None) -> Any:
        from memopt.recompute.capture import capture_second_forward

        model = original_apply(model, policy)
        model.register_forward_pre_hook(functools.partial(_on_forward, TRAINING_EVENTS["torch"]))
        capture_second_forward(model)  # where memopt started the job to scan it
        return model

    setattr(module, "apply", apply)  # noqa: B010  (a module's attribute, replaced as ORTModule's __init__ is)


def _debug_options(given: Any) -> Any:
    """The user's options, with graphs saved on rank 0 where memopt asked for them."""
    if os.environ.get(JOB_SAVE_ONNX_VAR) != "1" or _rank() != 0:
        return given
    api = importlib.import_module("onnxruntime.training.ortmodule")  # complete by the time a model is wrapped
    log_level = given.log_level if given is not None else api.LogLevel.WARNING  # the environment's wins anyway
    return api.DebugOptions(log_level=log_level, save_onnx=True, onnx_prefix=ONNX_PREFIX)


class _Steps:
    """This process's training steps: counted from its first ORTModule training forward."""

    def __init__(self) -> None:
        self.started = False
        self.count = 0
        self.last_end = 0.0
        self.static_bytes: int | None = None
        self.run_peak: int | None = None
        self.total = int(os.environ.get(JOB_STEPS_VAR, "2")) + 1
        self.path = Path(os.environ[JOB_STEPS_FILE_VAR])


_STEPS: _Steps | None = None


def _on_forward(event: str, module: Any, inputs: Any) -> None:
    global _STEPS
    if _STEPS is not None or not module.training:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _STEPS = _Steps()
    _STEPS.static_bytes = _memory_now(_cuda_in_use())
    _STEPS.last_end = time.monotonic()
    register_optimizer_step_post_hook(_on_optimizer_step)
    _write({"event": event})


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    steps = _STEPS
    if steps is None or steps.count >= steps.total:
        return
    cuda = _cuda_in_use()
    if cuda:
        import torch

        torch.cuda.synchronize()
    now = time.monotonic()
    steps.count += 1
    record: dict[str, Any] = {
        "event": "step",
        "step": steps.count,
        "steps": steps.total,
        "time_s": now - steps.last_end,
        "ended_at": now,  # the machine's monotonic clock, as memopt reads it (``memopt.run.stops``)
        "static_bytes": steps.static_bytes,
        **_peaks(cuda),
    }
    if steps.count == 1:
        steps.run_peak = record["peak_bytes"]
        record["stack"] = _stack()
        _reset_peak(cuda)
    else:
        steps.run_peak = max(steps.run_peak or 0, record["peak_bytes"])
    record["peak_over_run_bytes"] = steps.run_peak
    _write(record)
    steps.last_end = time.monotonic()
    if steps.count == steps.total:
        print(f"[memopt] rank {_rank()} has done its steps: it exits here", file=sys.stderr, flush=True)
        raise SystemExit(0)


def _leave_with_parent() -> None:
    """A job process ends itself when memopt was killed outright (no chance to end the group)
    or when its own parent is gone: torchrun starts each worker in a session of its own, out
    of reach of the group memopt ends, and a launcher killed outright cannot pass that on."""
    memopt_pid = int(os.environ.get(PARENT_PID_VAR, "0"))
    own_parent = os.getppid()
    while memopt_pid and _alive(memopt_pid) and os.getppid() == own_parent:
        time.sleep(_PARENT_POLL_S)
    if memopt_pid:
        os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _write(record: dict[str, Any]) -> None:
    steps = _STEPS
    if steps is None:
        return
    record = {
        "rank": _rank(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        # The ranks on this host: the ones whose steps file memopt reads.
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))),
        "pid": os.getpid(),
        **record,
    }
    line = (json.dumps(record) + "\n").encode()
    # One write on an O_APPEND descriptor: lines of several ranks never interleave.
    descriptor = os.open(steps.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
    if record["event"] == "step":
        print(
            f"{step_line(record['rank'], record['step'], record['steps'], record['time_s'])}, "
            f"peak {record['peak_bytes'] / 2**20:.1f} MiB",
            file=sys.stderr,
            flush=True,
        )


def _cuda_in_use() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def _stack() -> dict[str, Any]:
    import torch

    try:
        import onnxruntime
    except ImportError:  # a plain-PyTorch job (the torch back end) needs no ORT
        return {"ort_version": None, "ort_package": None, "torch_version": torch.__version__}
    # Which build of ORT training the job runs: onnxruntime-training-cpu or the CUDA one.
    info = importlib.import_module("onnxruntime.capi.build_and_package_info")
    package = getattr(info, "package_name", None)
    return {"ort_version": onnxruntime.__version__, "ort_package": package, "torch_version": torch.__version__}


def _peaks(cuda: bool) -> dict[str, Any]:
    if cuda:
        import torch

        device = torch.cuda.current_device()
        return {
            "device": "cuda",
            "memory_kind": "cuda_allocated",
            "peak_bytes": torch.cuda.max_memory_allocated(),
            "cuda_reserved_bytes": torch.cuda.max_memory_reserved(),
            "cuda_total_memory": torch.cuda.get_device_properties(device).total_memory,
            "cuda_device_name": torch.cuda.get_device_name(device),
            **cuda_figures(),
        }
    return {"device": "cpu", "memory_kind": "rss", "peak_bytes": proc_status_bytes("VmHWM")}


def _memory_now(cuda: bool) -> int:
    if cuda:
        import torch

        return int(torch.cuda.memory_allocated())
    return proc_status_bytes("VmRSS")


def _reset_peak(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
        return
    reset_rss_peak()
