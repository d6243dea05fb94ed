"""Child-process entry point: ``python -m memopt.child REQUEST.json RESULT.json``.

Runs one recipe as the requested back end trains it (its ``StepsBackend``: ORTModule, or plain
PyTorch with the recompute policy) and writes a result whatever happens, so the parent can tell a
recipe problem from a broken stack, an out-of-memory step or a crash.
Its stdout/stderr are the run's log.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memopt.backends import backend_for
from memopt.child import PARENT_PID_VAR, PROFILE_VAR, TIMEOUT_VAR, ChildRequest
from memopt.child.watchdog import guard
from memopt.core import RecipeTarget, RunStatus, parse_target
from memopt.errors import MemoptError, one_line
from memopt.recipes import RecipeError


def main(request_path: str, result_path: str) -> int:
    if os.environ.get(PARENT_PID_VAR, "").isdigit():
        guard(int(os.environ[PARENT_PID_VAR]), float(os.environ.get(TIMEOUT_VAR) or 0) or None)
    request = ChildRequest(**json.loads(Path(request_path).read_text()))
    backend = backend_for(request.backend).child_steps()
    result: dict[str, Any] = {
        "status": RunStatus.RUNNING,
        "stack": backend.stack_record(),
        "python": platform.python_version(),
    }

    def write(**update: Any) -> None:
        result.update(update)
        temporary = Path(result_path + ".tmp")
        temporary.write_text(json.dumps(result, indent=2))
        os.replace(temporary, result_path)

    write()
    try:
        backend.check()
    except MemoptError as err:
        return _fail(write, RunStatus.STACK_ERROR, err)
    try:
        from memopt.child.steps import StepFailure, is_out_of_memory, pick_device, run_steps
    except ImportError as err:  # torch or ORTModule cannot be imported in this environment
        return _fail(write, RunStatus.STACK_ERROR, MemoptError(f"importing ORTModule failed: {one_line(err)}"))
    try:
        target = parse_target(request.recipe)
        if not isinstance(target, RecipeTarget):
            raise RecipeError(f"{target} is not a recipe")
        recipe = target.load(request.options)
        for name, text in recipe.files.items():
            (Path(result_path).parent / name).write_text(text)
        for note in recipe.notes:
            print(f"[memopt] {request.recipe}: {note}", file=sys.stderr, flush=True)
        device = pick_device(request.device, has_cuda=backend.has_cuda())
        write(device=device)
        print(f"[memopt] {request.recipe} batch {request.batch_size} on {device}", file=sys.stderr, flush=True)
        run_steps(
            recipe,
            request.batch_size,
            steps=request.steps,
            device=device,
            log_level=request.log_level,
            save_onnx=request.save_onnx,
            on_step=lambda report: write(steps=asdict(report)),
            profile_to=Path(result_path).parent if os.environ.get(PROFILE_VAR) == "1" else None,
            backend=backend,
        )
    except RecipeError as err:
        return _fail(write, RunStatus.RECIPE_ERROR, err)
    except StepFailure as err:
        return _fail(write, RunStatus.OUT_OF_MEMORY if err.out_of_memory else RunStatus.STEP_ERROR, err)
    except ImportError as err:  # ORTModule itself, imported when the steps start
        return _fail(write, RunStatus.STACK_ERROR, MemoptError(f"importing ORTModule failed: {one_line(err)}"))
    except Exception as err:  # anything else the model, torch or ORT raised
        return _fail(
            write, RunStatus.OUT_OF_MEMORY if is_out_of_memory(err) else RunStatus.CRASHED, MemoptError(one_line(err))
        )
    write(status=RunStatus.OK)
    return 0


def _fail(write: Any, status: RunStatus, err: Exception) -> int:
    traceback.print_exc()
    write(status=status, error=str(err))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
