"""The child process's side of a run: ``python -m memopt.child REQUEST.json RESULT.json``.

It loads the recipe, checks the ORT stack and runs the measured ORTModule steps
(``steps``), then writes its result where the parent (``memopt.run.launch``) reads it.
The parent never imports this package's modules (they import torch); it names the module.
Nothing here imports onnx or the analysis, so a broken stack is reported, not crashed on.
"""

__all__ = ["CHILD_MODULE", "ONNX_PREFIX", "PARENT_PID_VAR", "RUN_DIR_VAR", "TIMEOUT_VAR"]

CHILD_MODULE = "memopt.child"
# What the parent tells the child through its environment: whom to watch and how long it may
# run; and a marker naming the run folder, which every process of the run inherits.
PARENT_PID_VAR = "MEMOPT_PARENT_PID"
TIMEOUT_VAR = "MEMOPT_TIMEOUT_S"
RUN_DIR_VAR = "MEMOPT_RUN_DIR"
# ORTModule's save_onnx prefix: the parent finds the saved graphs by it.
ONNX_PREFIX = "memopt"
