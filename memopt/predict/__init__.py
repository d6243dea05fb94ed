"""From plans to predictions: the memory model, recompute costs, and the planner.

- ``memory_model``: peak memory as static + per-sample parts less each plan's saving,
  its effectiveness learnt from measured trials.
- ``recompute_cost``: what recomputing a plan costs: its nodes' profiled kernel times (CPU), else
  their work, scaled from the graph to the target dims.
- ``planner``: the cheapest set of plans predicted to fit a budget (exact, via HiGHS).
- ``whole_run``: the start-up's peak by batch (recompute cannot lower it) and each phase's
  run-to-run spread, from the runs a session made.
- ``calibrate``: fits the model and costs from no-config runs; ``prepare_target`` loads
  and scans a target once, ``calibrate_on`` calibrates on any trial runner.
"""

from memopt.predict.calibrate import (
    MODEL_FILE,
    Calibration,
    DoesNotFit,
    PreparedTarget,
    calibrate,
    calibrate_on,
    default_calibration_batches,
    learn_from_trial,
    load_saved_model,
    model_identity,
    plan_savings,
    prepare_target,
    require_batch_dim,
    require_ran,
    save_model,
)
from memopt.predict.memory_model import MemoryModel, ModelError, Observation, PlanSavings, Prediction, fit_memory_model
from memopt.predict.planner import DEFAULT_MARGIN, PlanChoice, PlanResult, budget_limit, choose_plans
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

__all__ = [
    "BALANCE",
    "DEFAULT_MARGIN",
    "MODEL_FILE",
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
    "PreparedTarget",
    "Prediction",
    "Work",
    "calibrate",
    "calibrate_on",
    "budget_limit",
    "choose_plans",
    "default_calibration_batches",
    "fit_memory_model",
    "learn_from_trial",
    "graph_work",
    "load_saved_model",
    "model_identity",
    "nodes_work",
    "read_node_times",
    "plan_savings",
    "prepare_target",
    "require_batch_dim",
    "require_ran",
    "save_model",
    "seconds_per_unit",
]
