"""The vocabulary every stage speaks: what a target is, how a run ended, and what it measured.

- ``backend``: ``BackendName``, a training back end by name, the same from ``--backend`` to the child.
- ``target``: ``Target`` and one class per kind (built-in recipe, recipe file or module,
  Hugging Face config, the user's command, an ONNX graph file), parsed once by ``parse_target``.
- ``status``: ``RunStatus``, a run's end as the child, the run folder and the journal write it.
- ``memory``: ``Memory``, what a run measured (the same names from the child to the journal),
  and ``Phase``, the part of a run whose peak is the run's.
- ``plan``: ``PlanName``, a plan as its back end names it (ORT's ``PlanKey`` subclasses it).
- ``trial``: ``TrialResult``, what a trial found, and ``Outcome``, its verdict against a budget;
  ``records``: the schemas (and bounds) of what is read back from the journal.

``memory``, ``plan``, ``trial`` and ``records`` are imported by their module (``memopt.core.trial``), not
from here: the child process imports this package, and does without pydantic.

ORT's plan keys (their cells) and config entries are ORT's vocabulary and live in ``memopt.backends.ort.config``.
"""

from memopt.core.backend import BackendName
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
    "BackendName",
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
