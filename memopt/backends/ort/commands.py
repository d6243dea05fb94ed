"""The ORT back end's part in the commands: what ``memopt scan``, ``trial`` and ``plan`` do under ORTModule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memopt.backends.base import PlanRequest, Progress, ScanRequest, TrialRequest
from memopt.backends.ort.calibrate import calibrate, load_saved_model, model_identity, save_model
from memopt.backends.ort.config import ConfigEntry, PlanKey, takes_json_file
from memopt.backends.ort.graph.sizes import resolve_dims
from memopt.backends.ort.predict.calibration import Calibration, learn_from_trial
from memopt.backends.ort.predict.memory_model import MemoryModel, ModelError
from memopt.backends.ort.predict.planner import PlanResult, choose_plans
from memopt.backends.ort.scan import ProbeLevel, ScanReport, scan_graph
from memopt.backends.ort.scan.parity import logged_parity
from memopt.backends.ort.scan.patterns import order_patterns
from memopt.backends.ort.scan.savings import UNKNOWN_DIM_PREFIX
from memopt.backends.ort.stack import inspect_stack
from memopt.backends.ort.target import ProbedGraph, load_target
from memopt.backends.ort.trials import TrialSpec, parse_trial_config, run_trial, stack_versions
from memopt.backends.ort.tune.export import ConfigExport, plan_export, write_config
from memopt.backends.ort.version import OrtVersion
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.run.budget import require_budget, resolve_budget
from memopt.run.journal import Journal
from memopt.run.launch import LOG_NAME

__all__ = ["OrtPlanReport", "OrtScanReport", "OrtTrialReport", "ort_plan", "ort_scan", "ort_trial"]


@dataclass(frozen=True)
class OrtScanReport:
    report: ScanReport  # its plans ordered by their saving at ``values``
    loaded: ProbedGraph  # the graph scanned, and the probe that built it
    version: str  # the ORT release whose rules applied
    values: dict[str, int]  # the dims' values savings are evaluated at
    differences: tuple[str, ...]  # where the scan differs from the Plan table ORT printed in the probe
    missing: tuple[str, ...]  # dims with no value: the savings naming them stay symbolic
    unnamed: tuple[str, ...]  # dims ORT's shape inference left unnamed


def ort_scan(request: ScanRequest, progress: Progress) -> OrtScanReport:
    """The target's training graph (a probe run of a recipe or command, or an ONNX file) and the
    stashed activations ORT could recompute in it, grouped into ORT's plans."""
    target, o = request.target, request.ort
    python = progress.interpreter(target, request.probe_batch)
    with progress.working(f"Building the training graph of {target} (ORTModule export and session, once)…"):
        loaded = load_target(
            target,
            options=request.options,
            runs_dir=request.runs_dir,
            probe_batch=request.probe_batch,
            python=python,
            loss=o.loss,
        )
    version = o.ort_version or loaded.ort_version or inspect_stack().ort_version
    if version is None:
        raise MemoptError("no ORT installed to take rules from; give --ort-version")
    level = ProbeLevel.BASIC if o.basic else ProbeLevel.ADVANCED
    report = scan_graph(loaded.graph, version, level=level, layer_boundary=o.layerwise)
    values = resolve_dims(
        report.inputs,
        report.symbols,
        batch=request.batch,
        seq=o.seq,
        target_seq=o.target_seq,
        explicit=o.dims,
        defaults=loaded.logged_dims,
    )
    # Said once the input is known good (the target loads, its ORT release has rules, its dims
    # are known names), so that bad input stays one error line.
    progress.checked()
    report = replace(report, patterns=order_patterns(report.patterns, values))
    # ORT names a dim its shape inference cannot tell empty_dim_param<k>, with no value anywhere:
    # the plans that name one stay symbolic, as in ORT's own table; the others get bytes.
    unnamed = sorted(s for s in report.symbols - set(values) if s.startswith(UNKNOWN_DIM_PREFIX))
    missing = sorted(report.symbols - set(values) - set(unnamed))
    differences = _differences_from_probe(report, loaded, version, level)
    for warning in (*report.warnings, *differences):
        progress.warn(warning)
    if not report.patterns and report.analysis.yield_order is None:
        raise MemoptError(f"{target}: {report.warnings[0] if report.warnings else 'nothing to scan'}")
    if missing:
        progress.warn(f"no value for {', '.join(missing)}: savings stay symbolic (give --batch/--seq or --dims)")
    if unnamed:
        progress.warn(
            f"ORT knows no size for {', '.join(unnamed)} (a dim its shape inference leaves unnamed): "
            "the plans naming it stay symbolic, as ORT prints them"
        )
    return OrtScanReport(report, loaded, version, values, tuple(differences), tuple(missing), tuple(unnamed))


def _differences_from_probe(report: ScanReport, loaded: ProbedGraph, version: str, level: ProbeLevel) -> list[str]:
    """One line per row where the scan differs from the Plan table ORT printed in the probe
    that built the graph (compared only where both analysed alike: same release, ORTModule's
    probe level, no layer boundaries)."""
    alike = loaded.ort_version == version and level is ProbeLevel.ADVANCED and not report.layer_boundary
    parity = logged_parity(report.patterns, loaded.log_path) if loaded.log_path is not None and alike else None
    if parity is None:
        return []
    return [f"differs from ORT's Plan table in the probe ({loaded.log_path}): {line}" for line in parity.differences()]


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


@dataclass(frozen=True)
class OrtPlanReport:
    request: PlanRequest
    calibration: Calibration
    result: PlanResult
    export: ConfigExport | None  # None: no config is predicted to fit, so none is written or exported
    config_file: Path | None  # where the config went, where its release reads one from a file
    trial: TrialResult | None  # ``verify``'s run of it

    @property
    def fits(self) -> bool:
        return self.result.feasible and (self.trial is None or not self.trial.outcome.does_not_fit)

    def summary(self) -> dict[str, Any]:
        result, cal, export, trial = self.result, self.calibration, self.export, self.trial
        model = cal.model
        return {
            "recipe_graph": cal.graph_source,
            "device": cal.device,
            "ort_version": str(cal.ort_version),
            "target_batch": result.target_batch,
            "budget_bytes": result.budget_bytes,
            "limit_bytes": round(result.limit_bytes),
            "baseline_bytes": round(result.baseline_bytes),
            "predicted_bytes": round(result.predicted_bytes),
            "feasible": result.feasible,
            "needs_recompute": result.needs_recompute,
            "cost_s": result.cost_s,
            "baseline_step_s": result.baseline_step_s,
            "overhead": result.overhead,
            "solver": result.solver,
            "max_batch_all_plans": result.max_batch_all_plans,
            "max_batch_no_plans": result.max_batch_no_plans,
            "plans": [
                {
                    "key": c.key,
                    "count": c.count,
                    "frequency": c.frequency,
                    "saving_bytes": c.saving_bytes,
                    "cost_s": c.cost_s,
                }
                for c in result.choices
            ],
            "config": [str(e) for e in result.entries],
            "refused": list(cal.refused),
            "config_value": export.value if export is not None else None,
            "export": export.lines[0] if export is not None else None,
            "config_file": str(self.config_file) if self.config_file is not None else None,
            "model": {
                "description": model.describe(),
                "cost_source": cal.cost_source,
                "arena_check": cal.arena_check or None,
                "fixed_bytes": round(model.static_bytes),
                "activation_scale": model.activation_scale,
                "outside_bytes": round(model.outside_bytes),
                "on_card": dict(
                    zip(
                        ("allocated_bytes", "reserved_bytes", "outside_bytes"),
                        (round(part) for part in model.on_card(result.target_batch, result.plans, result.counts)),
                    )
                )
                if model.simulated and cal.device == "cuda"
                else None,
                "peak_at": model.timeline(result.target_batch, result.plans).where() if model.simulated else None,
            },
            "verification": trial.to_record() if trial is not None else None,
        }


def ort_plan(request: PlanRequest, progress: Progress) -> OrtPlanReport:
    """Calibrate (a graph probe and no-config trials, or the journal's), choose the cheapest plans
    predicted to fit, write their config; with ``verify``, run it once and learn from the run."""
    settings = request.settings
    run, target_batch, out = settings.run, settings.target_batch, request.out
    versions = stack_versions(run.python, run.timeout_s)
    if (
        out is not None
        and versions.ort_version is not None
        and not takes_json_file(OrtVersion.parse(versions.ort_version))
    ):
        raise MemoptError(f"ORT {versions.ort_version} takes the config string itself; --out is for 1.19 JSON files")
    require_budget(settings.budget, run.device, versions.cuda)
    progress.checked()
    with progress.result_kept(), progress.working(f"Calibrating {run.target}: graph probe and no-config trials…"):
        cal = calibrate(
            run,
            target_batch,
            calibration_batches=settings.ort.calibration_batches,
            resume=settings.resume,
            versions=versions,
        )
    for line in cal.refused:
        progress.warn(line)
    budget_bytes = resolve_budget(settings.budget, cal.device, cal.device_total)
    with progress.result_kept():
        result = choose_plans(
            cal.model,
            cal.costs_s,
            target_batch,
            budget_bytes,
            cal.ort_version,
            margin=settings.margin,
            baseline_step_s=cal.baseline_step_s,
        )
    # A config that is not predicted to fit is no answer: nothing is written or exported.
    export, config_file = _write_config(result, cal, request) if result.feasible else (None, None)
    trial = None
    if request.verify and result.feasible:
        with progress.working(f"Verifying at batch {target_batch}…"):
            trial = run_trial(
                TrialSpec(run, target_batch, result.entries),
                run.runs_dir,
                journal=Journal.in_folder(run.runs_dir),
                budget_bytes=budget_bytes,
                predicted_peak_bytes=int(result.predicted_bytes),
                versions=versions,
            )
        learnt = learn_from_trial(cal.model, trial, result.plans, result.counts)
        if learnt is not None:
            save_model(run.runs_dir, cal.identity, learnt)
    return OrtPlanReport(request, cal, result, export, config_file, trial)


def _write_config(result: PlanResult, cal: Calibration, request: PlanRequest) -> tuple[ConfigExport, Path | None]:
    """The config of a feasible plan and the file written for it, where ORT 1.19 reads one.
    With ``--out`` the file is written even when no recompute is needed: it gets the empty
    config, so a job that exports it runs as with no config, never with an older config."""
    version, run, out = cal.ort_version, request.settings.run, request.out
    export = plan_export(result.entries, version, run.runs_dir, run.target, result.target_batch, out, kind="plan")
    if takes_json_file(version) and (result.entries or out is not None):
        return export, write_config(export, overwrite=out is None or request.force)
    return export, None


def _plan_keys(model: MemoryModel, entries: Sequence[ConfigEntry]) -> tuple[PlanKey, ...]:
    enabled = {e.cell for e in entries if int(e.optimization)}
    return tuple(p.key for p in model.plans if enabled and set(p.entries) <= enabled)
