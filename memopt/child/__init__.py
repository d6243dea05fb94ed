"""The child process's side of a run: ``python -m memopt.child REQUEST.json RESULT.json``.

It loads the recipe, checks the ORT stack and runs the measured ORTModule steps
(``steps``), then writes its result where the parent (``memopt.run.launch``) reads it.
The parent imports only what needs no torch (this module's ``ChildRequest``); the rest it
names. Nothing here imports onnx or the analysis, so a broken stack is reported, not crashed
on. A run's memory figures are ``memopt.core.memory.Memory``; the line each step prints is
``memopt.step_lines.step_line``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memopt.core.backend import BackendName

__all__ = [
    "CHILD_MODULE",
    "ChildRequest",
    "HOOK_DIR",
    "JOB_PACKAGE_ROOT_VAR",
    "JOB_SAVE_ONNX_VAR",
    "JOB_STEPS_FILE_VAR",
    "JOB_STEPS_VAR",
    "NODE_TIMES_FILE",
    "ONNX_PREFIX",
    "OOM_MARKERS",
    "PARENT_PID_VAR",
    "PROFILE_VAR",
    "RUN_DIR_VAR",
    "TIMEOUT_VAR",
    "TRAINING_EVENTS",
]

CHILD_MODULE = "memopt.child"


@dataclass(frozen=True)
class ChildRequest:
    """The request file: the parent writes it as JSON, the child reads it back."""

    recipe: str  # the target's spec
    batch_size: int
    steps: int
    device: str
    log_level: str
    save_onnx: bool
    options: Mapping[str, Any] = field(default_factory=dict)
    backend: BackendName = BackendName.ORT  # the back end whose steps the child runs

    def __post_init__(self) -> None:
        # Read back from JSON, the back end is its name: typed again here, once.
        object.__setattr__(self, "backend", BackendName(self.backend))


# What the parent tells the child through its environment: whom to watch and how long it may
# run; and a marker naming the run folder, which every process of the run inherits.
PARENT_PID_VAR = "MEMOPT_PARENT_PID"
TIMEOUT_VAR = "MEMOPT_TIMEOUT_S"
RUN_DIR_VAR = "MEMOPT_RUN_DIR"
# "1": a recipe run on CPU, after its measured steps, profiles the model in a second session
# and writes each node's kernel time to NODE_TIMES_FILE in its run folder (the recompute-cost
# estimate reads it).
PROFILE_VAR = "MEMOPT_PROFILE_NODES"
NODE_TIMES_FILE = "node_times.json"
# ORTModule's save_onnx prefix: the parent finds the saved graphs by it.
ONNX_PREFIX = "memopt"

# A user's training command (``memopt.run.command``): the variables the parent sets for
# the start-up hook (``memopt.child.job``) and the folder that hook lives in.
JOB_STEPS_FILE_VAR = "MEMOPT_JOB_STEPS_FILE"  # where each rank appends one JSON line per step
JOB_STEPS_VAR = "MEMOPT_JOB_STEPS"  # measured steps after the warm-up step
JOB_SAVE_ONNX_VAR = "MEMOPT_JOB_SAVE_ONNX"  # "1": rank 0's ORTModule saves its graphs
JOB_PACKAGE_ROOT_VAR = "MEMOPT_PACKAGE_ROOT"  # where the hook imports memopt from
HOOK_DIR = "hook"  # memopt/child/hook: put first on the job's PYTHONPATH
# The steps file's event for a job's first training forward, named for what the back end wraps:
# an ORTModule, or a model passed to ``memopt.recompute.apply``.
TRAINING_EVENTS = {"ort": "ortmodule", "torch": "recompute.apply"}

# Words in an error or a log that mean an allocation failed.
OOM_MARKERS = (
    "out of memory",
    "failed to allocate memory",
    "bad_alloc",
    "cannot allocate memory",
    "can't allocate memory",
    "not enough memory",
)
