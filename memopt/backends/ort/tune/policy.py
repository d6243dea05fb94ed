"""The search policy, a pure function of what is known: ``next_step(state)``.

    first: the planner's cheapest selection predicted to fit under the limit less the room kept
           for the noise (``KeptRoom``; else the lowest predicted peak, to check)
    after a fit under the limit: the same config again, until it has run ``repeats`` times
    after ``repeats`` fits: stop verified
    after an overshoot (over budget, out of memory, crashed), or a fit within the noise: a
    selection predicted to save more, else stop (nothing fits: the largest batch predicted to fit is said)

A trial fits when its whole run (start-up and the job's exit included) is within the budget.
One run says little of the next: a job's exit can spike by tens of MiB in one run of four. A
config is verified only when every one of its ``repeats`` runs fit and the highest of their
whole-run peaks is under the limit (the budget less the margin) by more than the run-to-run
noise: the widest spread that repeats of one run measured in any phase, rank by rank
(``RunSpread.noise``, ``Room``). A fit with less room than that is within the noise: more
recompute is tried where the steps bound; where the start-up or the exit bound, which
recompute cannot lower, the search says so and stops. Of the configs verified, the one with
the most room is chosen.
Predictions and advice use the whole run: the memory model's steps and the measured peaks of
the start-up and the exit (``FixedPeaks``).

Plans ORT left OFF in a trial (its Plan table says so) are dropped from later selections:
ORT ignores them, so they cannot lower the peak. No process, file or clock is touched
here, so every rule is tested with a hand-made model and scripted outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from memopt.backends.ort import OrtVersion, PlanKey, plan_keys
from memopt.backends.ort.predict.memory_model import MemoryModel
from memopt.backends.ort.predict.planner import PlanResult, choose_plans
from memopt.core.memory import Phase
from memopt.core.trial import Outcome
from memopt.predict import FixedPeaks, RunSpread, budget_limit, kept_room
from memopt.tune.events import SearchStatus
from memopt.units import format_compared, format_mib

__all__ = [
    "Attempt",
    "BestVerified",
    "CONFIG_SPREAD",
    "KeptRoom",
    "Room",
    "SearchState",
    "Stop",
    "TryPlans",
    "best_verified",
    "names",
    "next_step",
]


@dataclass(frozen=True)
class Attempt:
    """A finished trial at the target batch, as the policy sees it."""

    plans: tuple[PlanKey, ...]
    outcome: Outcome
    step_s: float | None = None
    left_off: tuple[PlanKey, ...] = ()  # enabled, but ORT's Plan table reported them OFF
    error: str | None = None
    number: int = 0  # the trial's number in the session
    step_times: tuple[float, ...] = ()  # the measured steps' seconds (warm-up left out)
    fixed_bytes: int | None = None  # what the start-up or the exit alone holds, when it peaked above the steps
    whole_run_bytes: int | None = None  # what a hard limit sees; None: unknown, the outcome alone decides
    fixed_phase: Phase = Phase.START_UP  # which phase holds ``fixed_bytes``
    exit_unmeasured: bool = False  # the job's exit could have been measured and was not (memopt ended it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "plans", plan_keys(self.plans))  # keys read back from text are PlanKeys again
        object.__setattr__(self, "left_off", plan_keys(self.left_off))

    @property
    def binding_phase(self) -> Phase:
        return self.fixed_phase if self.fixed_bytes is not None else Phase.STEPS


@dataclass(frozen=True)
class Room:
    """How far a config's whole-run peak (the highest of its runs) is under the limit, against
    the run-to-run noise: verified only once it has run ``runs_needed`` times, each within the
    budget, with more room than that noise (where nothing was repeated yet, nothing is
    measured and the peak need only be under the limit)."""

    under_limit_bytes: float  # negative: over the limit
    limit_bytes: float
    phase: Phase
    spread_bytes: float
    spread_line: str
    runs: int = 1  # runs of this config at the target batch that measured their whole run
    runs_needed: int = 1
    exit_unmeasured: bool = False

    @property
    def clears_noise(self) -> bool:
        """Under the limit by more than the noise measured so far."""
        return self.under_limit_bytes > self.spread_bytes if self.spread_bytes else self.under_limit_bytes >= 0

    @property
    def verified(self) -> bool:
        return self.clears_noise and self.runs >= self.runs_needed

    def describe(self) -> str:
        if self.under_limit_bytes >= 0:
            where = f"{format_mib(self.under_limit_bytes)} under the limit {format_mib(self.limit_bytes)}"
        else:
            where = f"{format_mib(-self.under_limit_bytes)} over the limit {format_mib(self.limit_bytes)}"
        binds = "the steps bind" if self.phase.lowered_by_recompute else f"the {self.phase} binds"
        peak = f"the highest whole-run peak of {self.runs} runs" if self.runs > 1 else "the whole run's peak"
        unmeasured = (
            "; the job's exit was not measured in every run: a hard limit may see more" if self.exit_unmeasured else ""
        )
        return f"{where} at {peak} ({binds}); {self.spread_line}{unmeasured}"

    @property
    def verdict(self) -> str:
        """Why a fit is not verified, in a few words; empty where it is."""
        if self.verified:
            return ""
        if self.under_limit_bytes < 0:
            return "over the limit, not verified"
        if not self.clears_noise:
            return "within the run-to-run spread of the limit, not verified"
        return f"{self.runs} of the {self.runs_needed} runs a verdict needs, not verified yet"


# The least run-to-run spread a config's runs are taken to have, as a share of the job's
# no-config peak (see ``KeptRoom``).
CONFIG_SPREAD = 0.015


@dataclass(frozen=True)
class KeptRoom:
    """Room the search keeps between a config's predicted peak and the limit when it chooses one,
    learnt before the first search from the calibration's no-config run made ``runs`` times at
    ``batch``: twice the run-to-run noise, since a verdict asks the highest of a config's runs
    to clear the noise and those runs land as far apart as the calibration's did, plus how far
    the model fell below the highest run it was fitted on (``residual_bytes``). Where the search
    measures more noise than the calibration did, the room grows with it.

    A config's runs spread wider than the no-config runs the calibration repeats: measured on
    CPU (four Hugging Face Llama shapes and tiny GPT-2s under ORT), 31 configs' repeats spread
    by a median 0.89% of the no-config peak, 1.5% or less in 25 of them, up to 2.7%, where the
    no-config runs of the same tune had spread by as little as 0.03%. So the noise kept room
    for is never less than ``CONFIG_SPREAD`` of the highest no-config run
    (``least_noise_bytes``).

    Where the allocator puts the step's largest buffer, in a hole freed buffers left or on
    pages not touched before, is not in the no-config runs either: a config that moves the
    step's other buffers can put it either way, and the simulation cannot be sure which
    (measured on CPU, a Hugging Face Llama whose in-graph loss holds 62.5 MiB logits-sized
    buffers: one plan at a time, the real arena ended 62 MiB above the simulated one for 2 plans
    of 10, 29-69 MiB below it for 4, within 11 MiB for 4). So the room also keeps that buffer
    (``placement_bytes``)."""

    spread: RunSpread
    residual_bytes: float
    runs: int
    batch: int
    least_noise_bytes: float = 0.0
    placement_bytes: float = 0.0

    def noise_bytes(self, measured: RunSpread) -> float:
        """The noise to keep room for: the calibration's, or the session's where wider, and
        never less than a config's runs are taken to spread by."""
        return max(self.spread.noise_bytes, measured.noise_bytes, self.least_noise_bytes)

    def bytes(self, measured: RunSpread = RunSpread()) -> float:
        return kept_room(self.noise_bytes(measured), max(0.0, self.residual_bytes) + self.placement_bytes)

    def describe(self, measured: RunSpread = RunSpread()) -> str:
        widest = measured if measured.noise_bytes > self.spread.noise_bytes else self.spread
        if self.least_noise_bytes > widest.noise_bytes:
            noise = (
                f"2 × {format_mib(self.least_noise_bytes)}, the least a config's runs are taken to spread by "
                f"({CONFIG_SPREAD:.1%} of the highest no-config run; measured: {widest.noise_line() if widest.noise else 'none'})"
            )
        else:
            noise = f"2 × the {widest.noise_line()}" if widest.noise else "no run-to-run noise measured"
        calibrated = f"{self.runs} no-config run{'s' if self.runs > 1 else ''} at batch {self.batch}"
        placement = (
            f" + {format_mib(self.placement_bytes)}, the step's largest buffer, which the allocator may place"
            " on pages the simulation does not"
            if self.placement_bytes
            else ""
        )
        return (
            f"{format_mib(self.bytes(measured))} of room kept under the limit ({noise}, + "
            f"{format_mib(max(0.0, self.residual_bytes))} the model fell below the highest of the "
            f"runs it was fitted on{placement}; learnt from {calibrated})"
        )


@dataclass(frozen=True)
class SearchState:
    """Everything the policy decides on. ``attempts``: every trial at the target batch so far
    (manual ones too, oldest first); ``trials_used``: search trials of this search."""

    model: MemoryModel
    costs_s: Mapping[PlanKey, float]
    target_batch: int
    budget_bytes: int
    margin: float
    ort_version: OrtVersion
    max_trials: int
    baseline_step_s: float | None = None
    attempts: tuple[Attempt, ...] = ()
    trials_used: int = 0
    fixed_peaks: FixedPeaks = (
        FixedPeaks()
    )  # the start-up's and the exit's peaks where they bound, every run of the session
    spread: RunSpread = RunSpread()  # each phase's run-to-run spread, from every run of the session
    repeats: int = 1  # the runs of one config a verdict needs
    kept_room: KeptRoom | None = None  # None: configs are chosen against the limit itself

    def runs_of(self, attempt: Attempt) -> tuple[Attempt, ...]:
        """Every run of ``attempt``'s config at the target batch (``attempt`` among them)."""
        same = tuple(a for a in self.attempts if frozenset(a.plans) == frozenset(attempt.plans))
        return same if attempt in same else (*same, attempt)

    @property
    def limit_bytes(self) -> float:
        return budget_limit(self.budget_bytes, self.margin)

    def room(self, attempt: Attempt) -> Room | None:
        """How far the highest whole run of ``attempt``'s config is under the limit; None where
        no run of it measured its peak."""
        measured = [a for a in self.runs_of(attempt) if a.whole_run_bytes is not None]
        if not measured:
            return None
        worst = max(measured, key=lambda a: a.whole_run_bytes or 0)
        assert worst.whole_run_bytes is not None
        return Room(
            self.limit_bytes - worst.whole_run_bytes,
            self.limit_bytes,
            worst.binding_phase,
            self.spread.noise_bytes,
            self.spread.noise_line(),
            len(measured),
            self.repeats,
            any(a.exit_unmeasured for a in measured),
        )

    def verified(self, attempt: Attempt) -> bool:
        """Every run of its config fits, ``repeats`` of them or more, the highest with more room
        under the limit than the run-to-run noise."""
        runs = self.runs_of(attempt)
        if not all(a.outcome.fits for a in runs):
            return False
        room = self.room(attempt)
        return room.verified if room is not None else len(runs) >= self.repeats

    def checked_alone(self, attempt: Attempt) -> bool:
        """One run at a batch below the target, fitting with more room than the noise."""
        return self.alone().verified(attempt)

    def alone(self) -> SearchState:
        """This state for judging one run at a batch below the target by itself: the runs at the
        target batch of the same plans are no repeats of it."""
        return replace(self, attempts=(), repeats=1)

    def whole_run(self, steps_bytes: float, batch_size: int | None = None) -> tuple[float, Phase]:
        """The whole run's predicted peak where the steps are predicted at ``steps_bytes``, and
        the phase that binds: the start-up or the exit binds where its measured peak is higher."""
        fixed = self.fixed_peaks.at(batch_size or self.target_batch)
        if fixed is not None and fixed > steps_bytes:
            return fixed, self.fixed_peaks.phase
        return steps_bytes, Phase.STEPS

    def reachable_floor(self, attempt: Attempt) -> float | None:
        """The lowest whole-run peak more recompute could reach from ``attempt`` where a fixed phase
        bound it: the start-up's as measured (it ends before the first step); the exit's less what
        every useful plan is predicted to take off the steps, since the exit begins where the
        steps left the process (ORT's arena keeps its high-water mark), and the exit's lifetime
        peak (``ru_maxrss``) holds the steps' own. Every plan at once is not always the lowest
        (the arena's placement): the lowest of the useful plans added one by one, from
        ``attempt``'s selection and from none, and the planner's choice."""
        if attempt.fixed_bytes is None:
            return None
        if attempt.fixed_phase is not Phase.EXIT:
            return float(attempt.fixed_bytes)
        selections = [self.plan().plans]
        for start in (attempt.plans, ()):
            chosen = list(start)
            for key in self.useful_plans():
                if key not in chosen:
                    chosen.append(key)
                    selections.append(tuple(chosen))
        lowest = min(self.predict(selection) for selection in selections)
        return attempt.fixed_bytes - max(0.0, self.predict(attempt.plans) - lowest)

    def budget_for(self, whole_run_bytes: float) -> float:
        """The smallest budget, in whole tenths of a MiB, that would verify a run peaking at
        ``whole_run_bytes``: its limit above the peak by more than the run-to-run noise."""
        exact = (whole_run_bytes + self.spread.noise_bytes) / (1.0 - self.margin)
        tenth = 2**20 / 10
        return (math.floor(exact / tenth) + 1) * tenth

    @property
    def left_off(self) -> frozenset[PlanKey]:
        return frozenset(key for attempt in self.attempts for key in attempt.left_off)

    def predict(self, plans: Iterable[PlanKey]) -> float:
        return self.model.predict(self.target_batch, tuple(plans)).peak_bytes

    def cost_of(self, plans: Iterable[PlanKey]) -> float:
        return sum(self.costs_s.get(key, 0.0) for key in plans)

    def useful_plans(self) -> tuple[PlanKey, ...]:
        """Plans expected to lower the peak at the target batch, largest saving first."""
        raw = {p.key: self.model.raw_saving(p.key, self.target_batch) for p in self.model.plans}
        ranked = sorted(raw, key=lambda key: (-raw[key], key))
        ignored = self.left_off
        return tuple(key for key in ranked if self.model.factor(key) * raw[key] > 0 and key not in ignored)

    def largest_below_target(self, plans: Iterable[PlanKey]) -> int:
        """The largest batch below the target whose whole run is predicted to verify with
        ``plans`` (0: not even batch 1): what fits instead (a larger batch can fit where the
        target does not: the allocator's placement), its run-to-run noise kept under the limit."""
        limit = self.limit_bytes - self.spread.noise_bytes
        ceiling = self.fixed_peaks.largest_batch(limit, self.target_batch - 1)
        if ceiling < 1:
            return 0
        return self.model.max_batch(limit, plans, ceiling=ceiling)

    @property
    def room_bytes(self) -> float:
        """The room kept under the limit for the noise when a config is chosen."""
        return self.kept_room.bytes(self.spread) if self.kept_room is not None else 0.0

    @property
    def planning_limit(self) -> float:
        """The peak a config is chosen against: the limit less the room kept."""
        return self.limit_bytes - self.room_bytes

    def plan(self) -> PlanResult:
        """The planner's choice among the plans ORT has not ignored, against the limit less the
        room kept; against the limit itself where no selection is predicted under that."""
        model = self.model
        if self.left_off:
            model = _without(model, self.left_off)

        def against(budget_bytes: float) -> PlanResult:
            return choose_plans(
                model,
                self.costs_s,
                self.target_batch,
                int(budget_bytes),
                self.ort_version,
                margin=self.margin,
                baseline_step_s=self.baseline_step_s,
            )

        if self.room_bytes > 0:
            kept = against(self.budget_bytes - self.room_bytes / (1.0 - self.margin))
            if kept.feasible:
                return kept
        return against(self.budget_bytes)

    def tried(self) -> frozenset[frozenset[PlanKey]]:
        return frozenset(frozenset(a.plans) for a in self.attempts)


@dataclass(frozen=True)
class TryPlans:
    """Run a trial of ``plans`` at the target batch, for ``reason``."""

    plans: tuple[PlanKey, ...]
    reason: str
    repeat: bool = False  # the same config again, to measure its noise: not a search trial


@dataclass(frozen=True)
class Stop:
    """The search ends: how, a line saying why, and (when nothing fits) the largest batch that would."""

    status: SearchStatus
    message: str
    largest_batch: int | None = None


def next_step(state: SearchState) -> TryPlans | Stop:
    """What the search does next, given everything it knows."""
    if state.trials_used == 0:
        first = _first(state)
        ran = [
            a for a in state.attempts if isinstance(first, TryPlans) and frozenset(a.plans) == frozenset(first.plans)
        ]
        if not ran:
            return first
        # The choice already ran (the calibration's no-config runs at the target, a manual
        # trial): the search goes on from its runs, and that step is its first trial.
        step = _after(state, ran[-1])
        return replace(step, repeat=False) if isinstance(step, TryPlans) else step
    return _after(state, state.attempts[-1])


def _after(state: SearchState, last: Attempt) -> TryPlans | Stop:
    """What follows the trial ``last``."""
    if last.outcome.fatal:
        return Stop(SearchStatus.FAILED, f"the trial could not run: {last.error}")
    if state.verified(last):
        return _verified(state, last)
    if last.outcome.fits:
        step = _repeat(state, last)
    else:
        step = _heavier(state, last)
    if isinstance(step, Stop) or step.repeat:
        return step
    if state.trials_used >= state.max_trials:
        return _stop(state, SearchStatus.MAX_TRIALS, f"stopped after --max-trials {state.max_trials} search trials")
    return step


@dataclass(frozen=True)
class BestVerified:
    """The verified config and the rule that chose it among those that fit."""

    attempt: Attempt
    rule: str


def best_verified(state: SearchState) -> BestVerified | None:
    """Of the configs verified (``SearchState.verified``), the one with the most room under the
    limit (its highest run's), then the cost model's cheapest, then the first run; the config's
    first run stands for it. Rooms that differ by no more than the run-to-run noise are alike:
    among them the cheapest wins, since the noise alone can reorder them."""
    firsts: dict[frozenset[PlanKey], Attempt] = {}
    for attempt in state.attempts:
        firsts.setdefault(frozenset(attempt.plans), attempt)
    verified = [a for a in firsts.values() if state.verified(a)]
    if not verified:
        return None

    def room(attempt: Attempt) -> float:
        measured = state.room(attempt)
        return measured.under_limit_bytes if measured is not None else 0.0

    if len(verified) == 1:
        return BestVerified(verified[0], "the only config verified")
    most = max(room(a) for a in verified)
    alike = [a for a in verified if most - room(a) <= state.spread.noise_bytes]
    best = min(alike, key=lambda a: (state.cost_of(a.plans), len(a.plans), a.number))
    if len(alike) == 1:
        return BestVerified(best, f"the most room under the limit of the {len(verified)} configs verified")
    return BestVerified(
        best,
        f"the cheapest of the {len(alike)} configs verified whose room under the limit is within the "
        f"run-to-run noise ({format_mib(state.spread.noise_bytes)}) of the most",
    )


def _first(state: SearchState) -> TryPlans | Stop:
    limit = state.limit_bytes
    plan = state.plan()
    whole, phase = state.whole_run(plan.predicted_bytes)
    if plan.feasible and (phase is Phase.STEPS or whole + state.spread.noise_bytes <= limit):
        if plan.plans:
            return TryPlans(
                plan.plans,
                f"planner: {names(plan.plans)} predicted {_against(plan.predicted_bytes, limit, '≤')} "
                f"(no config {format_mib(plan.baseline_bytes)}) "
                f"for ~{plan.cost_s * 1000:.0f} ms/step{_kept(state, plan.predicted_bytes)}",
            )
        return TryPlans(
            (),
            f"planner: no config predicted {_against(plan.baseline_bytes, limit, '≤')}"
            f"{_kept(state, plan.baseline_bytes)}; verifying",
        )
    plans = plan.plans or state.useful_plans()
    return TryPlans(
        plans,
        f"{_floor_line(state, plan)}; checking the prediction with one run at batch {state.target_batch} "
        f"({names(plans) or 'no config'})",
    )


def _kept(state: SearchState, predicted: float) -> str:
    """The room the choice keeps for the noise, and where it came from; or how much less it
    keeps where no selection is predicted that low."""
    if state.kept_room is None:
        return ""
    room = state.kept_room.describe(state.spread)
    if predicted <= state.planning_limit:
        return f"; {room}"
    return f"; {format_mib(max(0.0, state.limit_bytes - predicted))} under the limit, not the {room}: no selection is predicted that low"


def _floor_line(state: SearchState, plan: PlanResult) -> str:
    """The lowest whole-run peak any selection is predicted at when the limit is below it, and
    what would fit instead: a budget, or a smaller batch (or not even batch 1)."""
    floor, phase = state.whole_run(plan.predicted_bytes)
    steps = f"{names(plan.plans) or 'no config'}; no config {format_mib(plan.baseline_bytes)}"
    if not phase.lowered_by_recompute:
        what = (
            f"{format_mib(floor)}, the {phase}'s (measured; recompute cannot lower it; the steps "
            f"{format_mib(plan.predicted_bytes)} with {steps})"
        )
    else:
        what = f"{format_mib(floor)} ({steps})"
    noise = f" and the run-to-run noise {format_mib(state.spread.noise_bytes)}" if state.spread.noise else ""
    return (
        f"planner: no selection is predicted to fit; the lowest peak at batch {state.target_batch} is {what}, above "
        f"the limit {format_mib(state.limit_bytes)} (budget {format_mib(state.budget_bytes)} less the "
        f"{state.margin:.0%} margin{noise}): {_advice(state, floor)}"
    )


def _advice(state: SearchState, whole_run_bytes: float) -> str:
    """What would verify instead, from the whole-run model: a budget, or a smaller batch."""
    budget = f"a budget of {format_mib(state.budget_for(whole_run_bytes))} or more"
    if not state.spread.noise:
        budget += " (no run repeated yet: the run-to-run noise it would need room for is not in it)"
    largest = state.largest_below_target(state.useful_plans())
    if largest < 1:
        return f"{budget} is predicted to fit; not even batch 1 is predicted to fit in this budget"
    return f"{budget}, or batch {largest}, is predicted to fit"


def _within_noise(state: SearchState, last: Attempt) -> TryPlans | Stop:
    """A fit (within the budget) that is over the limit, or under it by less than the
    run-to-run noise: a re-run may go over. More recompute gives the steps and the exit room;
    the start-up's peak it cannot lower."""
    room = state.room(last)
    assert room is not None  # else the outcome alone decides
    over = room.under_limit_bytes < 0
    # The start-up alone over the limit: no recompute can help (on CUDA the steps' segments may
    # have made the rest of what runs out, and more recompute may take some away).
    if over and (state.reachable_floor(last) or 0) > state.limit_bytes:
        return _fixed_phase_binds(state, last, "limit")
    # The exit begins where the steps left the process: more recompute lowers it too (as far as
    # ``reachable_floor`` says); only the start-up is out of its reach.
    if room.phase.lowered_by_recompute or room.phase is Phase.EXIT or over:
        step = _heavier(state, last, f"trial {last.number} fits the budget but is {room.describe()}: {room.verdict}; ")
        if isinstance(step, TryPlans) or over:
            return step
    return _noise_binds(
        state,
        last,
        "every plan is on" if room.phase.lowered_by_recompute else f"recompute cannot lower the {room.phase}",
    )


def _noise_binds(state: SearchState, attempt: Attempt, why_no_more: str) -> Stop:
    """The search ends where ``attempt``'s config fit the budget but not the limit with room for
    the noise, and ``why_no_more`` recompute can change that: the budget that would verify it."""
    room = state.room(attempt)
    assert room is not None
    largest = state.largest_below_target(state.useful_plans()) if room.phase.lowered_by_recompute else 0
    message = (
        f"the budget is within the run-to-run noise of what is reachable: trial {attempt.number} "
        f"({names(attempt.plans) or 'no config'}) is {room.describe()}; {why_no_more}"
        f"; a budget of {format_mib(state.budget_for(room.limit_bytes - room.under_limit_bytes))} or more would verify"
        + (f", or batch {largest} with every plan is predicted to" if largest else "")
    )
    verified = best_verified(state) is not None
    return Stop(SearchStatus.VERIFIED if verified else SearchStatus.WITHIN_NOISE, message)


def _closest_fit(state: SearchState) -> Attempt | None:
    """Of the configs whose every run at the target fit the budget (none verified), the one
    whose highest run came closest under the limit (or least over it); None where none did."""
    rooms = [
        (room.under_limit_bytes, -attempt.number, attempt)
        for attempt in state.attempts
        if all(a.outcome.fits for a in state.runs_of(attempt)) and (room := state.room(attempt)) is not None
    ]
    return max(rooms, key=lambda entry: entry[:2])[2] if rooms else None


def _repeat(state: SearchState, last: Attempt) -> TryPlans | Stop:
    """After a fit: the same config again while it clears the noise measured so far and has
    run fewer times than a verdict needs; else (over the limit, within the noise, or an
    earlier run of it over the budget) more recompute or a stop."""
    runs = state.runs_of(last)
    failed = next((a for a in runs if not a.outcome.fits), None)
    if failed is not None:
        return _heavier(
            state,
            last,
            f"trial {last.number} fits, but trial {failed.number} of the same config {failed.outcome.label}: "
            "not verified; ",
        )
    room = state.room(last)
    if room is None or room.clears_noise:
        if len(runs) < state.repeats:
            return TryPlans(
                last.plans,
                f"trial {last.number} fits ({room.describe() if room else 'its whole run not measured'}); "
                f"running {names(last.plans) or 'no config'} again to measure its run-to-run noise "
                f"(run {len(runs) + 1} of {state.repeats})",
                repeat=True,
            )
    return _within_noise(state, last)


def _verified(state: SearchState, last: Attempt) -> Stop:
    """``last``'s config is verified: the search ends (of the configs verified, the one with the most room is chosen)."""
    runs = len(state.runs_of(last))
    what = "no recompute needed at this batch" if not last.plans else f"{names(last.plans)} fits"
    return _stop(state, SearchStatus.VERIFIED, f"{what}: verified by {runs} run{'s' if runs > 1 else ''} of it")


def _heavier(state: SearchState, last: Attempt, prefix: str = "") -> TryPlans | Stop:
    """After an overshoot (or a fit within the noise, ``prefix`` saying so): a selection
    predicted to save more, or why there is none."""
    # Over budget with the start-up alone over it (on CPU the one implies the other; on CUDA the
    # verdict is on reserved segments the steps may have added to): no recompute can help.
    if last.outcome is Outcome.OVER_BUDGET and (state.reachable_floor(last) or 0) > state.budget_bytes:
        return _fixed_phase_binds(state, last)
    tried, limit, useful = state.tried(), state.limit_bytes, state.useful_plans()
    selection = tuple(key for key in last.plans if key not in state.left_off)
    if not prefix:
        if last.left_off:
            prefix = f"ORT left {names(last.left_off)} OFF (it ignores them): dropped; "
        elif not last.outcome.does_not_fit:
            prefix = f"trial {last.number} {last.outcome.label}; trying another selection; "
        prefix += "over; "
    plan = state.plan()
    if plan.feasible and frozenset(plan.plans) not in tried and set(plan.plans) != set(selection):
        return TryPlans(
            plan.plans,
            f"{prefix}recalibrated planner: {names(plan.plans)} predicted {_against(plan.predicted_bytes, limit, '≤')}"
            f"{_kept(state, plan.predicted_bytes)}",
        )
    candidate = list(selection)
    for key in useful:  # largest saving first
        if key in candidate:
            continue
        candidate.append(key)
        if frozenset(candidate) in tried:
            continue
        predicted = state.predict(candidate)
        if predicted <= state.planning_limit or len(candidate) == len(useful):
            return TryPlans(
                tuple(candidate),
                f"{prefix}adding {key.short}: {names(candidate)} predicted {_against(predicted, limit, 'vs')}",
            )
    return _stop(state, SearchStatus.IMPOSSIBLE, "every plan is on")


_WHAT_HOLDS = {
    Phase.START_UP: "the start-up (ONNX export, session build, warm-up step)",
    Phase.EXIT: "the job's exit (unwinding, atexit, the interpreter's finalization)",
}


def _fixed_phase_binds(state: SearchState, last: Attempt, over: str = "budget") -> Stop:
    """Over budget (or over the limit: ``over``) at start-up or at the job's exit, and more than
    recompute can reach: it lowers the training steps, not what those phases add to them."""
    fixed_bytes = last.fixed_bytes or 0
    floor = state.reachable_floor(last) or fixed_bytes
    bound = state.budget_bytes if over == "budget" else state.limit_bytes
    message = (
        f"{_WHAT_HOLDS[last.fixed_phase]} peaks at {format_mib(fixed_bytes)} > "
        f"{over} {format_mib(bound)}; recompute cannot lower it{' enough' if floor < fixed_bytes else ''}: "
        "the lowest reachable peak is about "
        f"{format_mib(floor)}; {_advice(state, floor)}"
    )
    verified = best_verified(state) is not None
    return Stop(SearchStatus.VERIFIED if verified else SearchStatus.IMPOSSIBLE, message)


def _stop(state: SearchState, status: SearchStatus, message: str) -> Stop:
    """The stop as the user sees it: verified only when some trial fits."""
    verified = best_verified(state) is not None
    closest = _closest_fit(state) if status is SearchStatus.IMPOSSIBLE and not verified else None
    if closest is not None:
        # Some config fit the budget, only not with room for the noise: "batch N does not fit
        # even with every plan" would deny what a run measured.
        return _noise_binds(state, closest, message)
    if status is SearchStatus.IMPOSSIBLE:
        useful = state.useful_plans()
        largest = state.largest_below_target(useful)
        # With no plan predicted to save, "even with every plan" would claim plans were tried.
        how = "even with every plan" if useful else "and no plan is predicted to lower its peak"
        fits = f"batch {largest}{' with every plan' if useful else ''}" if largest else "not even batch 1"
        message = (
            f"batch {state.target_batch} does not fit in {format_mib(state.budget_bytes)} {how}; predicted to "
            f"fit: {fits}; {_plans_line(state)}"
        )
        return Stop(SearchStatus.VERIFIED if verified else SearchStatus.IMPOSSIBLE, message, largest)
    if not verified:
        return Stop(
            SearchStatus.FAILED if status is SearchStatus.VERIFIED else status, f"{message}; no verified config"
        )
    return Stop(status, message)


def _plans_line(state: SearchState) -> str:
    """Which plans the search tried and which it left out, with why."""
    ignored = state.left_off
    tried = {key for attempt in state.attempts for key in attempt.plans if key not in ignored}
    useful = set(state.useful_plans())
    left = [p.key for p in state.model.plans if p.key not in tried]
    reasons = {
        key: "ORT left them OFF" if key in ignored else "not tried" if key in useful else "they save nothing here"
        for key in left
    }
    parts = [f"tried {len(tried)} of {len(state.model.plans)} plans: {names(sorted(tried)) or 'none'}"]
    for reason in dict.fromkeys(reasons.values()):
        parts.append(f"left out ({reason}): {names(key for key in left if reasons[key] == reason)}")
    return "; ".join(parts)


def _without(model: MemoryModel, keys: frozenset[PlanKey]) -> MemoryModel:
    return replace(model, plans=tuple(p for p in model.plans if p.key not in keys))


def names(plans: Iterable[str]) -> str:
    return ", ".join(p.short for p in plan_keys(plans))


def _against(predicted: float, limit: float, relation: str) -> str:
    """``PREDICTED RELATION limit LIMIT`` in MiB, with the decimals that tell the two apart."""
    shown, limit_shown = format_compared(predicted, limit, "MiB")
    return f"{shown} {relation} limit {limit_shown}"
