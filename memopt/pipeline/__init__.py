"""The orchestration stage: the runs that feed the pure model, and the files that keep it.

- ``calibrate``: probe a target and scan its graph once (``prepare_target``), run the
  no-config calibration trials (``calibrate`` with real trials, ``calibrate_on`` any trial
  runner) and fit the memory model and recompute costs on them and on the journal's history
  (``fit_calibration``); the model library next to the journal (``save_model``,
  ``load_saved_model``, keyed by ``model_identity``).

It sits above ``memopt.predict`` (the memory model, the simulators and the planner: pure,
no runs) and ``memopt.run`` (child processes, trials, the journal); ``memopt plan``,
``memopt trial`` and the tuner share it.
"""

from memopt.pipeline.calibrate import (
    MODEL_FILE,
    CalibrationRun,
    ScannedGraph,
    calibrate,
    calibrate_on,
    fit_calibration,
    load_saved_model,
    model_identity,
    prepare_target,
    save_model,
)

__all__ = [
    "MODEL_FILE",
    "CalibrationRun",
    "ScannedGraph",
    "calibrate",
    "calibrate_on",
    "fit_calibration",
    "load_saved_model",
    "model_identity",
    "prepare_target",
    "save_model",
]
