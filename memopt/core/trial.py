"""What a trial found, on either back end: the measured figures of one config at one batch size
(``TrialResult``, its back end's own figures in a typed section), its verdict against a budget
(``Outcome``), its key (``trial_key``), as the journal records them and every stage reads them back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_origin, get_type_hints

from pydantic import TypeAdapter

from memopt.core.memory import Memory, Phase
from memopt.core.plan import PlanName, plan_names
from memopt.core.records import (
    LEAST_PEAK_BYTES,
    Count,
    Pid,
    PoolSegment,
    Positive,
    Rate,
    Timestamp,
    checked_record,
    record_type,
    report_damaged,
)
from memopt.core.status import RunStatus
from memopt.core.target import Target, parse_target
from memopt.units import format_mib

__all__ = ["Outcome", "TorchTrialDetails", "TrialResult", "outcome_of", "trial_key"]


class Outcome(str, Enum):
    """What a trial found. A ``str`` so journal records and JSON keep the plain word."""

    OK = "ok"
    OVER_BUDGET = "over_budget"
    OUT_OF_MEMORY = "out_of_memory"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"  # stopped by the user; says nothing about the config
    RECIPE_ERROR = "recipe_error"  # this and the next: the trial could not run at all
    STACK_ERROR = "stack_error"

    def __str__(self) -> str:
        return self.value

    @property
    def fits(self) -> bool:
        """The verdict that the trial worked: it ran, within the budget where there was one."""
        return self is Outcome.OK

    @property
    def fatal(self) -> bool:
        """No other config can run either: the recipe or the ORT stack is broken."""
        return self in (Outcome.RECIPE_ERROR, Outcome.STACK_ERROR)

    @property
    def does_not_fit(self) -> bool:
        """The config ran and needed more memory than the budget or the device has."""
        return self in (Outcome.OVER_BUDGET, Outcome.OUT_OF_MEMORY)

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


_STATUS_TO_OUTCOME = {
    RunStatus.OK: Outcome.OK,
    RunStatus.OUT_OF_MEMORY: Outcome.OUT_OF_MEMORY,
    RunStatus.STEP_ERROR: Outcome.CRASHED,
    RunStatus.CRASHED: Outcome.CRASHED,
    RunStatus.TIMED_OUT: Outcome.TIMED_OUT,
    RunStatus.CANCELLED: Outcome.CANCELLED,
    RunStatus.RECIPE_ERROR: Outcome.RECIPE_ERROR,
    RunStatus.STACK_ERROR: Outcome.STACK_ERROR,
}


def trial_key(identity: Mapping[str, Any]) -> str:
    """A trial's key in the journal: a digest of what decides its outcome (``identity``, which
    each back end gathers: recipe, options, batch, plans, steps, device, stack)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class TorchTrialDetails:
    """What only a plain-PyTorch trial has: the allocator's settings it ran with (CPU: glibc's
    mmap threshold, memopt's or the user's), which its export line repeats."""

    allocator: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialResult:
    """What a trial measured, on either back end. Bytes and seconds; ``peak_bytes`` is the peak over the measured
    steps (CPU: peak RSS reset after the warm-up step; CUDA: max_memory_allocated). ``config``
    holds the back end's plan names (ORT's entries, the torch policy's plans); ``torch`` is set
    on a plain-PyTorch trial, whose ORT figures (``plans_on``, ``ort_version``, …) stay empty."""

    key: str
    target: Target  # journaled as "recipe", its spec
    options: Mapping[str, Any]
    batch_size: Positive
    config: tuple[PlanName, ...]  # the plans the trial enabled (ORT: each entry as "<subgraph>:<type>:<count>")
    config_value: str | None  # the back end's variable: ORTMODULE_MEMORY_OPT_CONFIG, MEMOPT_RECOMPUTE_POLICY
    outcome: Outcome
    status: RunStatus  # the run's own status (RunResult.status)
    run_dir: str
    steps: int
    device: str | None = None
    error: str | None = None
    ort_version: str | None = None
    torch_version: str | None = None
    ort_package: str | None = None
    memory: Memory = Memory()  # journaled flat, its figures beside the other fields
    cuda_total_memory: int | None = None
    cuda_device_name: str | None = None
    cuda_pool: tuple[Mapping[str, Any], ...] = ()  # the allocator's pool after the warm-up step
    step_times_s: tuple[float, ...] = ()  # [0] is the warm-up step
    median_step_s: float | None = None
    throughput: Rate | None = None  # samples per second over the measured steps
    plans_on: tuple[PlanName, ...] = ()  # Plan-table "Configs" ORT reported ON
    # Requested entries ("<subgraph>:<type>:<count>") that ORT's Plan table did not report ON:
    # ORT ignored them (a name it does not know, or a plan it left OFF), so they saved nothing.
    plans_off: tuple[PlanName, ...] = ()
    plans_seen: int | None = None  # rows in ORT's Plan table
    recomputed_nodes: int | None = None  # "Total number of recomputed nodes", else node lines counted
    budget_bytes: int | None = None
    predicted_peak_bytes: int | None = None
    config_warnings: tuple[str, ...] = ()
    wall_s: float = 0.0
    finished_at: Timestamp = 0.0
    reused: bool = False
    ranks: tuple[Mapping[str, Any], ...] = ()  # a command's processes: rank, peak_bytes, … each
    oom_evidence: str | None = None  # RunResult.oom_evidence
    torch: TorchTrialDetails | None = None  # a plain-PyTorch trial's own figures

    def __post_init__(self) -> None:
        for name in ("config", "plans_on", "plans_off"):  # names read back from text are PlanNames again
            object.__setattr__(self, name, plan_names(getattr(self, name)))

    @property
    def fits(self) -> bool:
        """The verdict: it ran, within the budget where there was one (``Outcome.fits``)."""
        return self.outcome.fits

    def within(self, limit_bytes: float) -> bool:
        """It ran, and what runs out (``Memory.device_peak``) stayed at or under ``limit_bytes``."""
        peak = self.memory.device_peak
        return self.ran and peak is not None and peak <= limit_bytes

    @property
    def measured_step_times_s(self) -> tuple[float, ...]:
        return self.step_times_s[1:]

    @property
    def start_up_binds(self) -> str | None:
        """When the start-up peaked above the measured steps, a line saying so: recompute lowers
        the steps' activations, not what the export and the session build hold."""
        memory = self.memory
        if memory.binding_phase is not Phase.START_UP or memory.peak_bytes is None:
            return None
        return (
            f"the start-up (ONNX export, session build, warm-up step) peaked at "
            f"{format_mib(memory.whole_run_peak)}, above the steps' {format_mib(memory.peak_bytes)}: "
            "it binds, and recompute cannot lower it"
        )

    @property
    def ran(self) -> bool:
        """The training steps ran to the end (within budget or not): ``RunStatus.ran``."""
        return self.status.ran

    @property
    def prediction_error(self) -> float | None:
        """(predicted − measured) / measured peak."""
        measured = self.predicted_figure_bytes
        if self.predicted_peak_bytes is None or not measured:
            return None
        return (self.predicted_peak_bytes - measured) / measured

    @property
    def predicted_figure_bytes(self) -> int | None:
        """The measured figure the memory model predicts and learns from: ORT's,
        ``Memory.predicted_figure``; the torch back end's model predicts what runs out
        (``Memory.device_peak``), start-up and exit included."""
        return self.memory.device_peak if self.torch is not None else self.memory.predicted_figure

    @property
    def shown_peak_bytes(self) -> int | None:
        """The peak a view shows beside the prediction: the measured steps' (ORT), what runs out (torch)."""
        return self.memory.device_peak if self.torch is not None else self.memory.peak_bytes

    @property
    def at_the_edge(self) -> str | None:
        """When the caching allocator had to free its cache to find room, a line saying so."""
        if not self.memory.at_the_edge:
            return None
        return (
            f"running at the edge: PyTorch's allocator freed its cache {self.memory.cuda_alloc_retries} time(s) to find"
            " room (num_alloc_retries); a little more memory elsewhere and it runs out"
        )

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"recipe": self.target.spec}
        for name, value in asdict(self).items():
            if name == "memory":
                record.update(value)  # flat: the record keeps each figure's own key
            elif name != "target":
                record[name] = value
        record["options"] = dict(self.options)
        record["ranks"] = [dict(rank) for rank in self.ranks]
        record["prediction_error"] = self.prediction_error
        record["whole_run_peak_bytes"] = self.memory.whole_run_peak
        record["device_peak_bytes"] = self.memory.device_peak
        record["at_the_edge"] = self.memory.at_the_edge
        phase = self.memory.binding_phase
        record["binding_phase"] = str(phase) if phase else None
        return record

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], where: str, runs_dir: Path | None = None, names: Mapping[str, str] = {}
    ) -> TrialResult | None:
        """The trial a journal record holds; None (reported as one ``DamagedRecord`` warning naming
        ``where`` and the field) when the record does not hold a trial: a field of the wrong type
        or past its bounds, a peak no run that ran can have, or (given the journal's ``runs_dir``)
        a run folder outside it. ``names``: a field's name in an older record, for the warning."""
        checked = checked_record(_TRIAL_RECORD, record, where, "trial", names)
        if checked is None:
            return None
        # A list the record lacks (an older or a hand-made record) is an empty one.
        values = {name: checked.get(name, ()) for name in _TRIAL_FIELDS if name in checked or name in _LISTS}
        values["target"] = parse_target(str(checked.get("recipe")))
        values["memory"] = Memory(**{name: checked[name] for name in _MEMORY_FIELDS if name in checked})
        values["status"] = RunStatus(checked["status"])
        values["outcome"] = Outcome(checked.get("outcome", Outcome.CRASHED))
        if checked.get("torch") is not None:
            values["torch"] = TorchTrialDetails(**checked["torch"])
        if runs_dir is not None:
            values["run_dir"] = _in_runs_folder(values["run_dir"], runs_dir)
        trial = cls(**values)
        impossible = trial._impossible(runs_dir)
        if impossible is not None:
            name, why, value = impossible
            report_damaged(f"{where}: skipped a damaged trial record ({names.get(name, name)}: {why}, got {value!r})")
            return None
        return trial

    def _impossible(self, runs_dir: Path | None) -> tuple[str, str, object] | None:
        """The field no real trial could have written, what is wrong with it and its value; None where all hold."""
        memory = self.memory
        peak = memory.device_peak
        # Each RSS figure counts the interpreter; on CUDA only what runs out counts the context.
        if memory.memory_kind == "rss":
            sizes = {name: getattr(memory, name) for name in _RSS_FIGURES}
        else:
            sizes = {"peak_bytes": peak}
        for name, size in sizes.items():
            if self.ran and size is not None and size < LEAST_PEAK_BYTES:
                return name, f"a run that ran holds at least {LEAST_PEAK_BYTES} bytes", size
        # The whole run's peak, measured (start-up included), is at least what the run held before its first step.
        static = memory.static_bytes
        if peak is not None and static is not None and memory.peak_over_run_bytes is not None and peak < static:
            return "static_bytes", f"above the whole run's peak {peak}", static
        if runs_dir is not None and not _inside(Path(self.run_dir), runs_dir):
            return "run_dir", f"outside the runs folder {runs_dir}", self.run_dir
        return None

    def judged(self, budget_bytes: int | None) -> TrialResult:
        """This result with its outcome decided against ``budget_bytes``."""
        return replace(
            self, budget_bytes=budget_bytes, outcome=outcome_of(self.status, self.memory.device_peak, budget_bytes)
        )


# The journal record, derived from the dataclasses: ``TrialResult``'s fields with its ``Memory``
# flat beside them, each checked as its type says (see ``record_type``), except where the
# record holds a field in another form: the target as its spec ("recipe"), the verdict and the
# run's status as their words, plan keys as their text, and each rank's figures and the CUDA pool as their records.
_MEMORY_FIELDS = get_type_hints(Memory, include_extras=True)
_RSS_FIGURES = ("static_bytes", "peak_bytes", "peak_over_run_bytes", "exit_peak_bytes")
_RANK_RECORD = {**_MEMORY_FIELDS, "rank": Count, "pid": Pid | None, "steps": Count}
_JOURNALED_AS: dict[str, Any] = {
    "recipe": str,
    "outcome": Literal[tuple(outcome.value for outcome in Outcome)],
    "status": Literal[tuple(status.value for status in RunStatus)],
    "config": tuple[str, ...],
    "plans_on": tuple[str, ...],
    "plans_off": tuple[str, ...],
    "cuda_pool": tuple[PoolSegment, ...],
    "ranks": tuple[record_type("RankRecord", _RANK_RECORD), ...],  # type: ignore[misc]
    "torch": record_type("TorchRecord", {"allocator": dict[str, str]}) | None,
}
_TRIAL_FIELDS = {
    name: kind
    for name, kind in get_type_hints(TrialResult, include_extras=True).items()
    if name not in ("target", "memory")
}
_LISTS = {name for name, kind in _TRIAL_FIELDS.items() if get_origin(kind) is tuple}
# What every trial record holds: the recipe and the fields without a default, but the lists (an
# older record may lack one: it is empty) and the outcome (an older record's is crashed).
_REQUIRED = {
    "recipe",
    *(f.name for f in fields(TrialResult) if f.default is MISSING and f.default_factory is MISSING),
} - {"target", "outcome", *_LISTS}
_TRIAL_RECORD = TypeAdapter(
    record_type("TrialRecord", {**_TRIAL_FIELDS, **_MEMORY_FIELDS, **_JOURNALED_AS}, required=_REQUIRED)
)


def _inside(run_dir: Path, runs_dir: Path) -> bool:
    """Whether ``run_dir`` (as journaled: absolute, or from the folder memopt ran in) lies in ``runs_dir``."""
    return run_dir.resolve().is_relative_to(runs_dir.resolve())


def _in_runs_folder(run_dir: str, runs_dir: Path) -> str:
    """``run_dir`` where the journal's runs folder now is: a runs folder moved, or named another
    way (from another folder, or through a mount), keeps its run folders by name."""
    journaled = Path(run_dir)
    moved = runs_dir / journaled.name
    if _inside(journaled, runs_dir) or journaled.name in ("", ".", "..") or not moved.is_dir():
        return run_dir
    return str(moved)


def outcome_of(status: RunStatus, peak: int | None, budget: int | None) -> Outcome:
    """``peak``: what runs out over the whole run (start-up included; on CUDA reserved plus
    outside the allocator): a job under a hard limit dies at whichever part peaks."""
    if status.ran and budget is not None and peak is not None and peak > budget:
        return Outcome.OVER_BUDGET
    return _STATUS_TO_OUTCOME.get(status, Outcome.CRASHED)
