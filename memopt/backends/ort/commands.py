"""The ORT back end's part in the commands that run trials: what ``memopt trial`` does under ORTModule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memopt.backends.base import Progress, TrialRequest
from memopt.backends.ort.calibrate import load_saved_model, model_identity, save_model
from memopt.backends.ort.config import ConfigEntry, PlanKey
from memopt.backends.ort.predict.calibration import learn_from_trial
from memopt.backends.ort.predict.memory_model import MemoryModel, ModelError
from memopt.backends.ort.trials import TrialSpec, parse_trial_config, run_trial, stack_versions
from memopt.backends.ort.version import OrtVersion
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.run.journal import Journal
from memopt.run.launch import LOG_NAME

__all__ = ["OrtTrialReport", "ort_trial"]


@dataclass(frozen=True)
class OrtTrialReport:
    result: TrialResult
    warnings: tuple[str, ...]  # what the config's check and the run said of the config, once each

    def record(self) -> dict[str, Any]:
        return self.result.to_record()


def ort_trial(request: TrialRequest, progress: Progress) -> OrtTrialReport:
    """The config checked against the installed release, run under ORTModule; the saved memory
    model predicts the trial first and learns from it after."""
    settings, batch = request.settings, request.batch
    versions = stack_versions(settings.python, settings.timeout_s)
    if versions.ort_version is None:
        raise MemoptError("the ORT training stack cannot run: onnxruntime-training is not installed")
    validated = parse_trial_config(request.config, OrtVersion.parse(versions.ort_version))
    progress.checked()
    spec = TrialSpec(settings, batch, validated.entries)

    identity_device = "cuda" if versions.cuda and settings.device != "cpu" else "cpu"
    identity = model_identity(settings.target, settings.options, versions, identity_device)
    model = load_saved_model(settings.runs_dir, identity)
    plan_keys = _plan_keys(model, validated.entries) if model else ()
    predicted = None
    if model is not None:
        try:
            predicted = int(model.predict(batch, plan_keys).peak_bytes)
        except ModelError:
            predicted = None
    entries, steps = len(validated.entries), settings.steps + 1
    with progress.working(f"Trial of {settings.target} at batch {batch} ({entries} config entries, {steps} steps)…"):
        result = run_trial(
            spec,
            settings.runs_dir,
            journal=Journal.in_folder(settings.runs_dir),
            resume=request.resume,
            budget=request.budget,
            predicted_peak_bytes=predicted,
            versions=versions,
        )
    if result.status.fatal:
        raise MemoptError(
            f"{result.status.failure(settings.target.noun)}: {result.error} (log: {Path(result.run_dir) / LOG_NAME})"
        )
    learnt = learn_from_trial(model, result, plan_keys) if model is not None and not result.reused else None
    if learnt is not None:
        save_model(settings.runs_dir, identity, learnt)
    return OrtTrialReport(result, tuple(dict.fromkeys((*validated.warnings, *result.config_warnings))))


def _plan_keys(model: MemoryModel, entries: Sequence[ConfigEntry]) -> tuple[PlanKey, ...]:
    enabled = {e.cell for e in entries if int(e.optimization)}
    return tuple(p.key for p in model.plans if enabled and set(p.entries) <= enabled)
