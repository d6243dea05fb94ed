"""From ORT's plans to predictions: the memory model, recompute costs, and the planner.

- ``memory_model``: peak memory as static + per-sample parts less each plan's saving,
  its effectiveness learnt from measured trials.
- ``recompute_cost``: what recomputing a plan costs: its nodes' profiled kernel times (CPU), else
  their work, scaled from the graph to the target dims.
- ``planner``: the cheapest set of plans predicted to fit a budget (exact, via HiGHS).
- ``calibration``: the calibration's result (``Calibration``) and its pure steps: the scan's
  plans as the model sees them, the simulator, observations of measured trials, the
  recompute costs' fit, and learning from one more trial.

Nothing here runs a process or reads the journal: the runs that feed the model, and the files
that keep it, are ``memopt.backends.ort.calibrate``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports

if TYPE_CHECKING:
    from memopt.backends.ort.predict.calibration import (
        Calibration,
        DoesNotFit,
        default_calibration_batches,
        learn_from_trial,
        plan_savings,
        require_batch_dim,
        require_ran,
    )
    from memopt.backends.ort.predict.memory_model import (
        MemoryModel,
        ModelError,
        Observation,
        PlanSavings,
        Prediction,
        fit_memory_model,
    )
    from memopt.backends.ort.predict.planner import PlanChoice, PlanResult, choose_plans
    from memopt.backends.ort.predict.recompute_cost import (
        BALANCE,
        RecomputeCost,
        Work,
        graph_work,
        nodes_work,
        read_node_times,
        seconds_per_unit,
    )

# Imported on first use: the simulated arena's placement loop compiles (numba) on import.
_LAZY = {
    "memopt.backends.ort.predict.calibration": (
        "Calibration",
        "DoesNotFit",
        "default_calibration_batches",
        "learn_from_trial",
        "plan_savings",
        "require_batch_dim",
        "require_ran",
    ),
    "memopt.backends.ort.predict.memory_model": (
        "MemoryModel",
        "ModelError",
        "Observation",
        "PlanSavings",
        "Prediction",
        "fit_memory_model",
    ),
    "memopt.backends.ort.predict.planner": ("PlanChoice", "PlanResult", "choose_plans"),
    "memopt.backends.ort.predict.recompute_cost": (
        "BALANCE",
        "RecomputeCost",
        "Work",
        "graph_work",
        "nodes_work",
        "read_node_times",
        "seconds_per_unit",
    ),
}
__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "BALANCE",
    "Calibration",
    "DoesNotFit",
    "MemoryModel",
    "ModelError",
    "Observation",
    "PlanChoice",
    "PlanResult",
    "PlanSavings",
    "Prediction",
    "RecomputeCost",
    "Work",
    "choose_plans",
    "default_calibration_batches",
    "fit_memory_model",
    "graph_work",
    "learn_from_trial",
    "nodes_work",
    "plan_savings",
    "read_node_times",
    "require_batch_dim",
    "require_ran",
    "seconds_per_unit",
]
