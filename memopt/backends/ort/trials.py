"""Trials: one target, one batch size, one memory-optimizer config, real ORTModule steps.

A trial applies the config exactly as a user would (``ORTMODULE_MEMORY_OPT_CONFIG`` set
to the config string on ORT <=1.18, to a JSON file in the trial's folder on 1.19), runs a
warm-up step and N measured steps in a child process (``memopt.run.command.run_target``), and reads
the child's own log for the plans ORT reported ON and the nodes it recomputed. The
config is validated for the ORT release before anything is launched. Whatever the child
does (crash, hang, out of memory), the caller gets a ``TrialResult``; every finished
trial is appended to the journal before the next one starts.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from memopt.backends.ort.config import (
    CONFIG_VARIABLES,
    ENV_VAR,
    LEVEL_VAR,
    ConfigEntry,
    ConfigError,
    PlanKey,
    ValidatedConfig,
    format_config_string,
    parse_config_json,
    parse_config_string,
    plan_keys,
    render_json_config,
    takes_json_file,
    validate_entries,
)
from memopt.backends.ort.logparse import LogReadError, parse_file
from memopt.backends.ort.version import OrtVersion
from memopt.child import PROFILE_VAR
from memopt.core import Command, RunStatus
from memopt.core.trial import TrialResult, outcome_of
from memopt.core.trial import trial_key as core_trial_key
from memopt.errors import MemoptError
from memopt.run.budget import Budget, cpu_device_memory
from memopt.run.command import run_target
from memopt.run.files import config_file_argument, replace_atomically
from memopt.run.journal import Journal, journaled_trial
from memopt.run.launch import PACKAGE_ROOT, RunRequest, RunResult, new_run_dir, run_helper
from memopt.run.settings import DEFAULT_TIMEOUT_S, RunSettings, check_batch

__all__ = [
    "LEVEL_VAR",
    "REUSABLE_STATUSES",
    "StackVersions",
    "TrialError",
    "JournaledRunner",
    "RealTrialRunner",
    "TrialRunner",
    "TrialSpec",
    "config_key",
    "inherited_config_note",
    "parse_trial_config",
    "requested_off",
    "reusable",
    "run_trial",
    "stack_versions",
]

CONFIG_FILE = "memopt_config.json"
# Runs whose result does not depend on luck: reused by --resume. Crashes and timeouts rerun,
# and so does an out-of-memory record without its evidence (``reusable``).
REUSABLE_STATUSES = (RunStatus.OK, RunStatus.OUT_OF_MEMORY)


class TrialError(MemoptError):
    """A trial cannot be set up (bad config, unknown stack); nothing was launched."""


@dataclass(frozen=True)
class StackVersions:
    ort_version: str | None
    ort_package: str | None
    torch_version: str | None
    cuda: bool


@dataclass(frozen=True)
class TrialSpec:
    """What to run: how the target's runs go (``settings``), at ``batch_size``, with ``config``
    (empty: no memory-optimizer config at all)."""

    settings: RunSettings
    batch_size: int
    config: tuple[ConfigEntry, ...] = ()
    log_level: str = "DEVINFO"  # C++ INFO lines: "Total number of recomputed nodes", per-node lines
    # Save ORTModule's graphs into the run folder: a no-config trial that is also the graph probe.
    # Not part of the trial's key: saving happens as the session is built, before the measured steps.
    save_onnx: bool = False
    # The n-th run of the same key in a session (a repeat measuring its noise): not part of the
    # key either; --resume reuses the n-th newest journaled run of the key, never one twice.
    repeat: int = 0
    # A run without a config profiles its kernels for calibration, in a second session after
    # its steps, so its own exit is not measured; a run that verifies a config has no use for
    # the node times and measures its exit as the user's job would end.
    profile: bool = True

    def __post_init__(self) -> None:
        # Checked here too, so that a bad value is refused before a run folder is created.
        check_batch(self.batch_size)


def stack_versions(python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> StackVersions:
    """The ORT/torch versions a trial would run with (another interpreter is asked, not imported,
    within ``timeout_s``: a run's --timeout)."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        from memopt.backends.ort.stack import inspect_stack

        info: dict[str, Any] = asdict(inspect_stack())
    else:
        script = "import json, dataclasses; from memopt.backends.ort.stack import inspect_stack; print(json.dumps(dataclasses.asdict(inspect_stack())))"
        try:
            done = run_helper([python, "-c", script], {"PYTHONPATH": PACKAGE_ROOT, "PATH": "/usr/bin:/bin"}, timeout_s)
        except OSError as err:
            raise TrialError(f"--python {python} cannot be run: {err.strerror or err}") from None
        if done is None:
            raise TrialError(
                f"--python {python} did not say its ORT/torch versions within {timeout_s:g} s (--timeout); "
                "memopt ended it and every process it started"
            )
        lines = done.stdout.strip().splitlines()
        try:
            reported = json.loads(lines[-1]) if done.returncode == 0 and lines else None
        except ValueError:
            reported = None
        if not isinstance(reported, dict):
            said = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            raise TrialError(
                f"--python {python} is not a Python that can run memopt (exit status {done.returncode}: {said})"
            )
        info = reported
    return StackVersions(
        info.get("ort_version"),
        info.get("ort_package"),
        info.get("torch_version"),
        info.get("ort_cuda_version") is not None,
    )


def parse_trial_config(text: str, version: OrtVersion) -> ValidatedConfig:
    """``--config``: a JSON file, a config string, or a comma list of plan keys (``X+`` = ``X+:1:-1``).

    ``""`` and ``none`` mean no config. Raises ``ConfigError`` for what ORT would reject.
    """
    text = text.strip()
    if text.lower() in ("", "none", "off"):
        return ValidatedConfig((), ())
    path = config_file_argument(text, ConfigError)
    if path is not None:
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read the config file {text}: {getattr(err, 'strerror', None) or err}") from None
        if takes_json_file(version):
            return parse_config_json(content, version)
        # Older releases take the string itself; a memopt JSON file is converted for them.
        parsed = parse_config_json(content, OrtVersion(19))
        return validate_entries(parsed.entries, version, warnings=list(parsed.warnings))
    return parse_config_string(PlanKey.from_short(item for item in text.split(",") if item), version)


def inherited_config_note() -> str | None:
    """A line for users whose shell sets a memory-optimizer variable: trials replace it."""
    inherited = [f"{name}={os.environ[name]}" for name in CONFIG_VARIABLES if os.environ.get(name)]
    if not inherited:
        return None
    return f"{' and '.join(inherited)} from your environment is not used: each trial sets its own config"


def config_key(entries: tuple[ConfigEntry, ...]) -> tuple[str, ...]:
    """Entries as ORT reads them (the last one per subgraph wins), in a canonical order."""
    effective = {entry.subgraph: entry for entry in entries}
    return tuple(sorted(str(entry) for entry in effective.values() if int(entry.optimization) != 0))


def trial_key(spec: TrialSpec, versions: StackVersions) -> str:
    settings = spec.settings
    return core_trial_key(
        {
            "recipe": settings.target.identity(),
            "options": dict(settings.options),
            "batch": spec.batch_size,
            "config": list(config_key(spec.config)),
            "steps": settings.steps,
            "device": settings.device,
            "ort": versions.ort_version,
            "ort_package": versions.ort_package,
            "torch": versions.torch_version,
        }
    )


def run_trial(
    spec: TrialSpec,
    runs_dir: Path,
    *,
    journal: Journal | None = None,
    resume: bool = False,
    budget_bytes: int | None = None,
    predicted_peak_bytes: int | None = None,
    versions: StackVersions | None = None,
    budget: Budget | None = None,
    cancel: threading.Event | None = None,
) -> TrialResult:
    """Run ``spec`` in a child process and journal it (with ``resume``, reuse the journal's
    finished trial with the same key instead).

    The outcome is judged against ``budget_bytes``, or else ``budget`` resolved against the
    memory of the device the trial ran on (a percentage needs the device). ``cancel`` stops
    the child (outcome ``cancelled``). Raises ``TrialError``/``ConfigError`` only before
    launching (bad config, no ORT); anything the child does comes back as the outcome.
    """
    versions = versions or stack_versions(spec.settings.python, spec.settings.timeout_s)
    runner = JournaledRunner(
        RealTrialRunner(Path(runs_dir), versions),
        journal or Journal.in_folder(runs_dir),
        versions,
        resume,
        budget,
    )
    return runner(
        spec, budget_bytes=budget_bytes, predicted_peak_bytes=predicted_peak_bytes, cancel=cancel or threading.Event()
    )


class TrialRunner(Protocol):
    """Runs one trial and returns what it measured; ``cancel`` set means stop it now.

    The tuner and calibration see trials only through this: ``RealTrialRunner`` runs real
    ORTModule steps; tests of the search pass a fake with scripted peaks.
    """

    def __call__(
        self,
        spec: TrialSpec,
        *,
        budget_bytes: int | None,
        predicted_peak_bytes: int | None,
        cancel: threading.Event,
    ) -> TrialResult: ...


@dataclass(frozen=True)
class RealTrialRunner:
    """Real trials: the config applied as a user would, real ORTModule steps (a recipe in
    memopt's child process, or the user's command with every rank measured)."""

    runs_dir: Path
    versions: StackVersions

    def __call__(
        self,
        spec: TrialSpec,
        *,
        budget_bytes: int | None,
        predicted_peak_bytes: int | None,
        cancel: threading.Event,
    ) -> TrialResult:
        versions = self.versions
        command = isinstance(spec.settings.target, Command)

        def start(version: OrtVersion, env: dict[str, str], unset: tuple[str, ...], run_dir: Path) -> RunResult:
            request = RunRequest(
                spec.settings,
                spec.batch_size,
                log_level=job_log_level(spec.log_level, version) if command else spec.log_level,
                save_onnx=spec.save_onnx,
                env=env,
                unset_env=unset,
                cuda=versions.cuda,
            )
            run = run_target(request, run_dir, cancel)
            return _same_stack(run, versions) if command else run

        interpreter_does = "runs the command" if command else "would run the trial"
        result, run = _measured_trial(
            spec, self.runs_dir, versions, budget_bytes, predicted_peak_bytes, interpreter_does, start
        )
        if not command:
            return result
        disagreement = _processes_disagree(run.log_path) if run.ran else None
        warnings = (*result.config_warnings, disagreement) if disagreement else result.config_warnings
        return replace(result, ranks=run.ranks, config_warnings=warnings)


def _measured_trial(
    spec: TrialSpec,
    runs_dir: Path,
    versions: StackVersions,
    budget_bytes: int | None,
    predicted_peak_bytes: int | None,
    interpreter_does: str,
    start: Callable[[OrtVersion, dict[str, str], tuple[str, ...], Path], RunResult],
) -> tuple[TrialResult, RunResult]:
    """What every real trial does around its run: the config checked and put in the run's
    environment, a fresh run folder, and the run judged as a trial."""
    if versions.ort_version is None:
        raise TrialError(f"onnxruntime-training is not installed for the interpreter that {interpreter_does}")
    version = OrtVersion.parse(versions.ort_version)
    validated = validate_entries(spec.config, version) if spec.config else ValidatedConfig((), ())
    run_dir = new_run_dir(Path(runs_dir), _label(spec))
    env, unset, value = _config_env(spec.config, version, run_dir, spec.profile)
    run = start(version, env, unset, run_dir)
    result = _result(
        spec, run, trial_key(spec, versions), value, versions, validated.warnings, budget_bytes, predicted_peak_bytes
    )
    return result, run


def _processes_disagree(log_path: Path) -> str | None:
    """ORT prints its Plan table on rank 0 only, but every rank's session reports what it
    recomputed: a rank that recomputes otherwise than rank 0 runs another config."""
    try:
        summaries = parse_file(log_path).run_summaries
    except (LogReadError, OSError):
        return None
    totals = [s.total_recomputed_nodes for s in summaries if s.total_recomputed_nodes is not None]
    tables = {tuple(sorted(p.key for p in s.plans if p.enabled)) for s in summaries if s.plans}
    if len(set(totals)) > 1:
        return f"the job's processes recomputed different numbers of nodes ({', '.join(map(str, totals))}): the Plan table is rank 0's"
    if len(tables) > 1:
        return "the job's processes printed Plan tables with different plans ON: the trial reports the last one"
    return None


def job_log_level(level: str, version: OrtVersion) -> str:
    """``level`` as the job's ORT release names it: DEVINFO exists from 1.17 on."""
    return "INFO" if level == "DEVINFO" and version.minor < 17 else level


def _same_stack(run: RunResult, versions: StackVersions) -> RunResult:
    """A job that runs another ORT than memopt wrote the config for measured something else."""
    ran = (run.stack or {}).get("ort_version")
    if ran is None or versions.ort_version is None or ran == versions.ort_version:
        return run
    return replace(
        run,
        status=RunStatus.STACK_ERROR,
        error=f"the job runs ORT {ran} but memopt wrote its config for ORT {versions.ort_version}: "
        "pass --python with the interpreter the job uses",
    )


@dataclass(frozen=True)
class JournaledRunner:
    """Any runner, with every finished trial journaled under its key; with ``resume``, a trial
    the journal already holds (with a reusable status) is reused instead of run again: the
    config's runs in the order they were made (a search's first run of a config gets that
    config's first run, its repeats the later ones), so a resumed search judges the same runs in
    the same order and makes the same decisions."""

    inner: TrialRunner
    journal: Journal
    versions: StackVersions
    resume: bool = False
    budget: Budget | None = None  # judges trials given no budget_bytes, against the device they ran on

    def __call__(
        self,
        spec: TrialSpec,
        *,
        budget_bytes: int | None,
        predicted_peak_bytes: int | None,
        cancel: threading.Event,
    ) -> TrialResult:
        key = trial_key(spec, self.versions)
        if self.resume:
            result = journaled_trial(self.journal, key, reusable, passed=spec.repeat, oldest_first=True)
            if result is not None:
                return replace(
                    self._judged(result, budget_bytes),
                    reused=True,
                    predicted_peak_bytes=predicted_peak_bytes or result.predicted_peak_bytes,
                )
        self.journal.check_writable()  # refused before the trial runs, not after its result is lost
        result = self.inner(spec, budget_bytes=budget_bytes, predicted_peak_bytes=predicted_peak_bytes, cancel=cancel)
        result = replace(self._judged(result, budget_bytes), key=key)
        self.journal.append(result.to_record())
        return result

    def _judged(self, result: TrialResult, budget_bytes: int | None) -> TrialResult:
        if budget_bytes is None and self.budget is not None:
            total = result.cuda_total_memory if result.device == "cuda" else cpu_device_memory()
            # A run that died before its first step never learnt the device's size; it cannot
            # be over budget either, so its outcome (out of memory, crashed, ...) stands.
            if self.budget.bytes is not None or total is not None:
                budget_bytes = self.budget.bytes_of(total)
        return result.judged(budget_bytes)


def reusable(trial: TrialResult) -> bool:
    """A journaled verdict ``--resume`` may reuse: a run that ran, or one out of memory with the
    evidence (older memopt called any SIGKILL out of memory; such a record is run again)."""
    return trial.status in REUSABLE_STATUSES and (trial.ran or bool(trial.oom_evidence))


def _label(spec: TrialSpec) -> str:
    return f"trial-{spec.settings.target.label}-b{spec.batch_size}"


def _config_env(
    entries: tuple[ConfigEntry, ...], version: OrtVersion, run_dir: Path, profile: bool
) -> tuple[dict[str, str], tuple[str, ...], str | None]:
    """The variables that apply ``entries`` as a user would, and the inherited ones to drop.

    A run without a config also profiles its kernels where ``profile`` (a recipe's run does; a
    command's job keeps to its own steps): calibration reads the recompute cost of every plan from it."""
    if not entries:
        return {PROFILE_VAR: "1"} if profile else {}, CONFIG_VARIABLES, None
    if takes_json_file(version):
        value = str(replace_atomically(run_dir / CONFIG_FILE, render_json_config(entries)).resolve())
    else:
        value = format_config_string(entries, version)
    return {ENV_VAR: value}, (LEVEL_VAR,), value


def _result(
    spec: TrialSpec,
    run: RunResult,
    key: str,
    value: str | None,
    versions: StackVersions,
    warnings: tuple[str, ...],
    budget: int | None,
    predicted: int | None,
) -> TrialResult:
    plans_on, plans_seen, recomputed = _from_log(run.log_path) if run.status.printed_plans else ((), None, None)
    if recomputed is None and not spec.config and run.ran:
        recomputed = 0  # no config: ORT prints no count because it recomputes nothing
    median = run.median_step_s
    peak = run.memory.steady_or_run_peak
    stack = run.stack or {}
    return TrialResult(
        key=key,
        target=spec.settings.target,
        options=dict(spec.settings.options),
        batch_size=spec.batch_size,
        config=tuple(entry.key for entry in spec.config),
        config_value=value,
        outcome=outcome_of(run.status, run.memory.device_peak, budget),
        status=run.status,
        run_dir=str(run.run_dir),
        steps=spec.settings.steps,
        device=run.device,
        error=run.error,
        ort_version=stack.get("ort_version") or versions.ort_version,
        torch_version=stack.get("torch_version") or versions.torch_version,
        ort_package=stack.get("ort_package") or versions.ort_package,
        memory=replace(run.memory, peak_bytes=peak),
        cuda_total_memory=run.cuda_total_memory,
        cuda_device_name=run.cuda_device_name,
        cuda_pool=run.cuda_pool,
        step_times_s=tuple(run.step_times_s),
        median_step_s=median,
        throughput=spec.batch_size / median if median else None,
        plans_on=plans_on,
        plans_off=requested_off(spec.config, plans_on) if plans_seen else (),
        plans_seen=plans_seen,
        recomputed_nodes=recomputed,
        budget_bytes=budget,
        predicted_peak_bytes=predicted,
        config_warnings=tuple(warnings),
        wall_s=run.wall_s,
        finished_at=time.time(),
        oom_evidence=run.oom_evidence,
    )


def requested_off(entries: tuple[ConfigEntry, ...], plans_on: Iterable[str]) -> tuple[PlanKey, ...]:
    """The entries that enable something but whose subgraph and type no ON plan of ORT's table has."""
    on = {cell for key in plan_keys(plans_on) for cell in key.cells}
    return tuple(entry.key for entry in entries if int(entry.optimization) != 0 and entry.cell not in on)


def _from_log(log_path: Path) -> tuple[tuple[PlanKey, ...], int | None, int | None]:
    """Plans ORT reported ON, Plan-table rows, and recomputed nodes, from the child's log."""
    try:
        parsed = parse_file(log_path)
    except (LogReadError, OSError):
        return (), None, None
    summaries = [s for s in parsed.run_summaries if s.plans or s.total_recomputed_nodes is not None or s.node_events]
    if not summaries:
        return (), None, None
    with_plans = [s for s in summaries if s.plans]
    last = with_plans[-1] if with_plans else summaries[-1]
    plans_on = tuple(plan.key for plan in last.plans if plan.enabled)
    totals = [s.total_recomputed_nodes for s in summaries if s.total_recomputed_nodes is not None]
    if totals:
        recomputed: int | None = totals[-1]
    else:
        events = [s for s in summaries if s.node_events]
        recomputed = len(events[-1].node_events) if events else None
    return plans_on, len(last.plans), recomputed
