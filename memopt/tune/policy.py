"""The search policy, a pure function of what is known: ``next_step(state)``.

    first: the planner's cheapest selection predicted to fit (else the lowest predicted peak, to check)
    after a fit: a cheaper selection still predicted to fit, else stop verified
    after an overshoot (over budget, out of memory, crashed): a selection predicted to
    save more, else stop (nothing fits: the largest batch predicted to fit is said)

Plans ORT left OFF in a trial (its Plan table says so) are dropped from later selections:
ORT ignores them, so they cannot lower the peak. No process, file or clock is touched
here, so every rule is tested with a hand-made model and scripted outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from memopt.ort import PlanKey, plan_keys
from memopt.predict import MemoryModel, PlanResult, budget_limit, choose_plans
from memopt.run import Outcome
from memopt.tune.events import SearchStatus
from memopt.units import format_mib

__all__ = [
    "Attempt",
    "BestVerified",
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
    start_up_bytes: int | None = None  # what the start-up alone holds, when it peaked above the steps

    def __post_init__(self) -> None:
        object.__setattr__(self, "plans", plan_keys(self.plans))  # keys read back from text are PlanKeys again
        object.__setattr__(self, "left_off", plan_keys(self.left_off))


@dataclass(frozen=True)
class SearchState:
    """Everything the policy decides on. ``attempts``: every trial at the target batch so far
    (manual ones too, oldest first); ``trials_used``: search trials of this search."""

    model: MemoryModel
    costs_s: Mapping[PlanKey, float]
    target_batch: int
    budget_bytes: int
    margin: float
    ort_version: str
    max_trials: int
    baseline_step_s: float | None = None
    attempts: tuple[Attempt, ...] = ()
    trials_used: int = 0

    @property
    def limit_bytes(self) -> float:
        return budget_limit(self.budget_bytes, self.margin)

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
        """The largest batch below the target predicted to fit with ``plans``: what fits instead
        (a larger batch can fit where the target does not: the allocator's placement)."""
        return self.model.max_batch(self.limit_bytes, plans, ceiling=self.target_batch - 1)

    def plan(self) -> PlanResult:
        """The planner's choice among the plans ORT has not ignored."""
        model = self.model
        if self.left_off:
            model = _without(model, self.left_off)
        return choose_plans(
            model,
            self.costs_s,
            self.target_batch,
            self.budget_bytes,
            self.ort_version,
            margin=self.margin,
            baseline_step_s=self.baseline_step_s,
        )

    def tried(self) -> frozenset[frozenset[PlanKey]]:
        return frozenset(frozenset(a.plans) for a in self.attempts)


@dataclass(frozen=True)
class TryPlans:
    """Run a trial of ``plans`` at the target batch, for ``reason``."""

    plans: tuple[PlanKey, ...]
    reason: str


@dataclass(frozen=True)
class Stop:
    """The search ends: how, a line saying why, and (when nothing fits) the largest batch that would."""

    status: SearchStatus
    message: str
    largest_batch: int | None = None


def next_step(state: SearchState) -> TryPlans | Stop:
    """What the search does next, given everything it knows."""
    if state.trials_used == 0:
        return _first(state)
    last = state.attempts[-1]
    if last.outcome.fatal:
        return Stop(SearchStatus.FAILED, f"the trial could not run: {last.error}")
    step = _lighter(state, last) if last.outcome is Outcome.OK else _heavier(state, last)
    if isinstance(step, Stop):
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
    """Of the trials that fit, the one the cost model ranks cheapest (then fewer plans, then
    first); a measured trial overrules it only when every one of its steps ran faster than
    every step of the model's choice: two medians closer than their own spread are noise."""
    fitting = [a for a in state.attempts if a.outcome is Outcome.OK]
    if not fitting:
        return None
    modelled = min(fitting, key=lambda a: (state.cost_of(a.plans), len(a.plans), a.number))
    faster = [
        a for a in fitting if a.step_times and modelled.step_times and max(a.step_times) < min(modelled.step_times)
    ]
    if faster:
        measured = min(faster, key=lambda a: (a.step_s if a.step_s is not None else float("inf"), a.number))
        return BestVerified(
            measured,
            f"measured faster than trial {modelled.number}, the cost model's choice, beyond both trials' spread",
        )
    if len(fitting) == 1:
        return BestVerified(modelled, "the only config that fits")
    return BestVerified(
        modelled,
        f"the cost model's cheapest of {len(fitting)} that fit (~{state.cost_of(modelled.plans) * 1000:.0f} ms/step); "
        "measured step times within their spread",
    )


def _first(state: SearchState) -> TryPlans | Stop:
    limit = state.limit_bytes
    plan = state.plan()
    if plan.feasible:
        if plan.plans:
            return TryPlans(
                plan.plans,
                f"planner: {names(plan.plans)} predicted {format_mib(plan.predicted_bytes)} ≤ "
                f"limit {format_mib(limit)} (no config {format_mib(plan.baseline_bytes)}) "
                f"for ~{plan.cost_s * 1000:.0f} ms/step",
            )
        return TryPlans(
            (), f"planner: no config predicted {format_mib(plan.baseline_bytes)} ≤ limit {format_mib(limit)}; verifying"
        )
    return TryPlans(plan.plans or state.useful_plans(), f"{_floor_line(state, plan)}; trying it once to check")


def _floor_line(state: SearchState, plan: PlanResult) -> str:
    """The lowest peak any selection is predicted at when the limit is below it, and what would fit instead."""
    floor = plan.predicted_bytes
    largest = state.largest_below_target(state.useful_plans())
    return (
        f"planner: no selection is predicted to fit; the lowest peak at batch {state.target_batch} is "
        f"{format_mib(floor)} ({names(plan.plans)}; no config {format_mib(plan.baseline_bytes)}), above the "
        f"limit {format_mib(state.limit_bytes)} (budget {format_mib(state.budget_bytes)} less the "
        f"{state.margin:.0%} margin): a budget of {format_mib(floor / (1.0 - state.margin))} or more, or batch "
        f"{largest}, is predicted to fit"
    )


def _lighter(state: SearchState, last: Attempt) -> TryPlans | Stop:
    """After a fit: a cheaper selection still predicted to fit, or why there is none."""
    selection, tried, limit = last.plans, state.tried(), state.limit_bytes
    if not selection:
        return _stop(state, SearchStatus.VERIFIED, "no recompute needed at this batch")
    plan = state.plan()
    if plan.feasible and frozenset(plan.plans) not in tried and state.cost_of(plan.plans) < state.cost_of(selection):
        return TryPlans(
            plan.plans,
            f"fits; recalibrated planner: {names(plan.plans) or 'no config'} is cheaper and "
            f"predicted {format_mib(plan.predicted_bytes)} ≤ limit {format_mib(limit)}",
        )
    costliest = max(selection, key=lambda key: (state.costs_s.get(key, 0.0), key))
    lighter = tuple(key for key in selection if key != costliest)
    predicted = state.predict(lighter)
    if predicted <= limit and frozenset(lighter) not in tried:
        return TryPlans(
            lighter,
            f"fits; trying without the costliest plan {costliest.short} "
            f"(predicted {format_mib(predicted)} ≤ limit {format_mib(limit)})",
        )
    why = (
        "already tried"
        if frozenset(lighter) in tried
        else f"predicted {format_mib(predicted)} > limit {format_mib(limit)}"
    )
    return _stop(state, SearchStatus.VERIFIED, f"nothing lighter to try (without {costliest.short}: {why})")


def _heavier(state: SearchState, last: Attempt) -> TryPlans | Stop:
    """After an overshoot: a selection predicted to save more, or why there is none."""
    # Over budget with the start-up alone over it (on CPU the one implies the other; on CUDA the
    # verdict is on reserved segments the steps may have added to): no recompute can help.
    if last.outcome is Outcome.OVER_BUDGET and (last.start_up_bytes or 0) > state.budget_bytes:
        return _start_up_binds(state, last.start_up_bytes or 0)
    tried, limit, useful = state.tried(), state.limit_bytes, state.useful_plans()
    selection = tuple(key for key in last.plans if key not in state.left_off)
    prefix = ""
    if last.left_off:
        prefix = f"ORT left {names(last.left_off)} OFF (it ignores them): dropped; "
    elif not last.outcome.does_not_fit:
        prefix = f"trial {last.number} {last.outcome.label}; trying another selection; "
    plan = state.plan()
    if plan.feasible and frozenset(plan.plans) not in tried and set(plan.plans) != set(selection):
        return TryPlans(
            plan.plans,
            f"{prefix}over; recalibrated planner: {names(plan.plans)} predicted "
            f"{format_mib(plan.predicted_bytes)} ≤ limit {format_mib(limit)}",
        )
    candidate = list(selection)
    for key in useful:  # largest saving first
        if key in candidate:
            continue
        candidate.append(key)
        if frozenset(candidate) in tried:
            continue
        predicted = state.predict(candidate)
        if predicted <= limit or len(candidate) == len(useful):
            return TryPlans(
                tuple(candidate),
                f"{prefix}over; adding {key.short}: {names(candidate)} predicted "
                f"{format_mib(predicted)} vs limit {format_mib(limit)}",
            )
    return _stop(state, SearchStatus.IMPOSSIBLE, "every plan is on")


def _start_up_binds(state: SearchState, start_up_bytes: int) -> Stop:
    """Over budget at start-up: more recompute lowers the training steps, not the export and
    session build, so no selection can help."""
    message = (
        f"the start-up (ONNX export, session build, warm-up step) peaks at {format_mib(start_up_bytes)} > "
        f"budget {format_mib(state.budget_bytes)}; recompute cannot lower it: the lowest reachable peak is about "
        f"{format_mib(start_up_bytes)}"
    )
    verified = best_verified(state) is not None
    return Stop(SearchStatus.VERIFIED if verified else SearchStatus.IMPOSSIBLE, message)


def _stop(state: SearchState, status: SearchStatus, message: str) -> Stop:
    """The stop as the user sees it: verified only when some trial fits."""
    verified = best_verified(state) is not None
    if status is SearchStatus.IMPOSSIBLE:
        useful = state.useful_plans()
        largest = state.largest_below_target(useful)
        # With no plan predicted to save, "even with every plan" would claim plans were tried.
        how = "even with every plan" if useful else "and no plan is predicted to lower its peak"
        message = (
            f"batch {state.target_batch} does not fit in {format_mib(state.budget_bytes)} {how}; predicted to "
            f"fit: batch {largest}{' with every plan' if useful else ''}; {_plans_line(state)}"
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


def names(plans: Iterable[PlanKey]) -> str:
    return ", ".join(p.short for p in plans)
