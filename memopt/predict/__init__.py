"""From plans to predictions: the memory model, recompute costs, and the planner.

- ``memory_model``: peak memory as static + per-sample parts less each plan's saving,
  its effectiveness learnt from measured trials.
- ``recompute_cost``: what recomputing a plan costs: its nodes' profiled kernel times (CPU), else
  their work, scaled from the graph to the target dims.
- ``planner``: the cheapest set of plans predicted to fit a budget (exact, via HiGHS).
- ``whole_run``: the start-up's peak by batch (recompute cannot lower it) and each phase's
  run-to-run spread, from the runs a session made.
- ``calibration``: the calibration's result (``Calibration``) and its pure steps: the scan's
  plans as the model sees them, the simulator, observations of measured trials, the
  recompute costs' fit, and learning from one more trial.

Nothing here runs a process or reads the journal: the runs that feed the model, and the files
that keep it, are ``memopt.pipeline``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports

if TYPE_CHECKING:
    from memopt.predict.calibration import (
        Calibration,
        DoesNotFit,
        default_calibration_batches,
        learn_from_trial,
        plan_savings,
        require_batch_dim,
        require_ran,
    )
    from memopt.predict.choice import DEFAULT_MARGIN, budget_limit
    from memopt.predict.memory_model import (
        MemoryModel,
        ModelError,
        Observation,
        PlanSavings,
        Prediction,
        fit_memory_model,
    )
    from memopt.predict.planner import PlanChoice, PlanResult, choose_plans
    from memopt.predict.recompute_cost import (
        BALANCE,
        RecomputeCost,
        Work,
        graph_work,
        nodes_work,
        read_node_times,
        seconds_per_unit,
    )
    from memopt.predict.whole_run import FixedPeaks, PhaseSpread, RunSpread

# Imported on first use: the torch back end takes the exact choice (``choice``) alone, without the
# memory model over ORT's training graph that the rest loads.
_LAZY = {
    "memopt.predict.calibration": (
        "Calibration",
        "DoesNotFit",
        "default_calibration_batches",
        "learn_from_trial",
        "plan_savings",
        "require_batch_dim",
        "require_ran",
    ),
    "memopt.predict.choice": ("DEFAULT_MARGIN", "budget_limit"),
    "memopt.predict.memory_model": (
        "MemoryModel",
        "ModelError",
        "Observation",
        "PlanSavings",
        "Prediction",
        "fit_memory_model",
    ),
    "memopt.predict.planner": ("PlanChoice", "PlanResult", "choose_plans"),
    "memopt.predict.recompute_cost": (
        "BALANCE",
        "RecomputeCost",
        "Work",
        "graph_work",
        "nodes_work",
        "read_node_times",
        "seconds_per_unit",
    ),
    "memopt.predict.whole_run": ("FixedPeaks", "PhaseSpread", "RunSpread"),
}
__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "BALANCE",
    "DEFAULT_MARGIN",
    "Calibration",
    "DoesNotFit",
    "MemoryModel",
    "ModelError",
    "Observation",
    "PhaseSpread",
    "PlanChoice",
    "PlanResult",
    "RecomputeCost",
    "RunSpread",
    "FixedPeaks",
    "PlanSavings",
    "Prediction",
    "Work",
    "budget_limit",
    "choose_plans",
    "default_calibration_batches",
    "fit_memory_model",
    "learn_from_trial",
    "graph_work",
    "nodes_work",
    "read_node_times",
    "plan_savings",
    "require_batch_dim",
    "require_ran",
    "seconds_per_unit",
]
