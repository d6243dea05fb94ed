"""The vocabulary every stage speaks: what a target is, and how a run ended.

- ``target``: ``Target`` and one class per kind (built-in recipe, recipe file or module,
  Hugging Face config, the user's command, an ONNX graph file), parsed once by ``parse_target``.
- ``status``: ``RunStatus``, a run's end as the child, the run folder and the journal write it.

Plan keys and config entries are ORT's vocabulary and live in ``memopt.ort.config``.
"""

from memopt.core.status import RunStatus
from memopt.core.target import (
    BATCH_PLACEHOLDER,
    COMMAND_PREFIX,
    HF_PREFIX,
    BuiltinRecipe,
    Command,
    GraphFile,
    HfConfig,
    RecipeSource,
    RecipeTarget,
    RunnableTarget,
    Target,
    command_target,
    parse_runnable,
    parse_target,
    runnable,
)

__all__ = [
    "BATCH_PLACEHOLDER",
    "COMMAND_PREFIX",
    "HF_PREFIX",
    "BuiltinRecipe",
    "Command",
    "GraphFile",
    "HfConfig",
    "RecipeSource",
    "RecipeTarget",
    "RunStatus",
    "RunnableTarget",
    "Target",
    "command_target",
    "parse_runnable",
    "parse_target",
    "runnable",
]
