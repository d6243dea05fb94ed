"""Exact plan selection: the cheapest set of recompute plans whose predicted peak fits.

    minimise Σ cost_p · x_p   subject to   Σ saving_p · x_p ≥ baseline − limit,  x binary

solved with ``scipy.optimize.milp`` (HiGHS branch and bound: optimal, not greedy). ORT
1.17–1.19 ignore partial counts and switch a plan on for all its occurrences, so there is
one variable per plan; ORT ≤1.16 recomputes the first ``count`` occurrences in
topological order, so there is one variable per occurrence with ``y_p,j ≥ y_p,j+1`` and
the count is their sum.

With the graph's simulation, savings at the peak do not add up (the peak moves when a
plan lowers it), so the choice is refined: solve with each plan's saving measured on the
current choice (what it takes off the simulated peak on top of it), simulate the result,
and repeat while it does not fit; then drop, costliest first, any plan the rest fits without.
Counts are whole plans there (every occurrence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memopt.backends.ort.config import ConfigEntry, PlanKey, plan_config_entries
from memopt.backends.ort.predict.memory_model import MemoryModel, PlanSavings
from memopt.backends.ort.version import OrtVersion
from memopt.graph import Polynomial
from memopt.predict.choice import DEFAULT_MARGIN, budget_limit, exact_cover

__all__ = ["DEFAULT_MARGIN", "PlanChoice", "PlanResult", "budget_limit", "choose_plans"]


@dataclass(frozen=True)
class PlanChoice:
    key: PlanKey
    entries: tuple[str, ...]
    count: int  # -1: every occurrence
    frequency: int
    saving_bytes: float  # effective (effectiveness applied) at the target batch
    cost_s: float  # extra seconds per step

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PlanKey(self.key))  # a key read back from text is a PlanKey again


@dataclass(frozen=True)
class PlanResult:
    target_batch: int
    budget_bytes: int
    limit_bytes: float  # budget less the safety margin: what the prediction must stay under
    baseline_bytes: float  # predicted peak with no config
    predicted_bytes: float  # with the chosen plans
    feasible: bool
    choices: tuple[PlanChoice, ...]
    cost_s: float
    baseline_step_s: float | None
    max_batch_all_plans: int
    max_batch_no_plans: int
    ort_version: OrtVersion
    solver: str

    @property
    def needs_recompute(self) -> bool:
        return self.baseline_bytes > self.limit_bytes

    @property
    def overhead(self) -> float | None:
        return self.cost_s / self.baseline_step_s if self.baseline_step_s else None

    @property
    def plans(self) -> tuple[PlanKey, ...]:
        return tuple(choice.key for choice in self.choices)

    @property
    def counts(self) -> dict[PlanKey, int]:
        return {c.key: c.count for c in self.choices if c.count >= 0}

    @property
    def entries(self) -> tuple[ConfigEntry, ...]:
        return plan_config_entries(self.plans, self.counts)


def choose_plans(
    model: MemoryModel,
    costs_s: Mapping[PlanKey, float],
    target_batch: int,
    budget_bytes: int,
    ort_version: str | OrtVersion,
    *,
    margin: float = 0.0,
    baseline_step_s: float | None = None,
) -> PlanResult:
    """The least-cost plans keeping ``model``'s predicted peak at ``target_batch`` within
    ``budget_bytes · (1 − margin)``. ``costs_s``: extra step seconds per plan (all occurrences)."""
    version = ort_version if isinstance(ort_version, OrtVersion) else OrtVersion.parse(ort_version)
    limit = budget_limit(budget_bytes, margin)
    baseline = model.baseline(target_batch)
    usable = [
        p for p in model.plans if model.simulated or model.factor(p.key) * model.raw_saving(p.key, target_batch) > 0
    ]
    common: dict[str, Any] = dict(
        target_batch=target_batch,
        budget_bytes=budget_bytes,
        limit_bytes=limit,
        baseline_bytes=baseline,
        baseline_step_s=baseline_step_s,
        ort_version=version,
    )
    need = baseline - limit
    if need <= 0:
        return PlanResult(
            predicted_bytes=baseline,
            feasible=True,
            choices=(),
            cost_s=0.0,
            solver="none needed",
            **common,
            **_largest_batches(model, limit, usable, target_batch, True),
        )
    if model.simulated:
        return _choose_simulated(model, costs_s, target_batch, limit, common)
    per_occurrence = version.minor <= 16
    # Variables: (plan, occurrences covered by this variable, saving, cost).
    variables: list[tuple[int, int, float, float]] = []
    for index, plan in enumerate(usable):
        factor, cost = model.factor(plan.key), max(costs_s.get(plan.key, 0.0), 0.0)
        if per_occurrence and plan.occurrences and len(plan.occurrences) == plan.frequency:
            dims = model.dims(target_batch)
            occ = [factor * _evaluate(o, dims) for o in plan.occurrences]
            share = cost / len(occ)
            variables += [(index, 1, saving, share) for saving in occ]
        else:
            variables.append((index, plan.frequency, factor * model.raw_saving(plan.key, target_batch), cost))
    savings = np.array([v[2] for v in variables])
    if savings.sum() < need:
        chosen = np.ones(len(variables))
        solver = "infeasible: every plan is not enough"
        feasible = False
    else:
        chosen, solver = exact_cover(variables, savings, need)
        feasible = True
    choices = _choices(model, usable, variables, chosen, costs_s, target_batch)
    predicted = model.predict(target_batch, [c.key for c in choices], {c.key: c.count for c in choices if c.count >= 0})
    feasible = feasible and predicted.peak_bytes <= limit
    return PlanResult(
        predicted_bytes=predicted.peak_bytes,
        feasible=feasible,
        choices=choices,
        cost_s=sum(c.cost_s for c in choices),
        solver=solver,
        **common,
        **_largest_batches(model, limit, usable, target_batch, feasible),
    )


def _choose_simulated(
    model: MemoryModel, costs_s: Mapping[PlanKey, float], batch: int, limit: float, common: dict[str, Any]
) -> PlanResult:
    keys = [p.key for p in model.plans]
    cost = {key: max(costs_s.get(key, 0.0), 0.0) for key in keys}

    def peak(plans: set[PlanKey]) -> float:
        return model.peak(batch, tuple(plans))

    def lowers(plans: set[PlanKey], than: float) -> bool:
        # Simulated only as far as it takes to tell: most selections tried do not lower the peak.
        return not any(bound >= than for bound in model.peak_bounds(batch, tuple(plans)))

    chosen: set[PlanKey] = set()
    solver = "milp (HiGHS) on simulated savings"
    for _ in range(len(keys)):
        current = peak(chosen)
        if current <= limit:
            break
        rest = [key for key in keys if key not in chosen]
        # Each saving read as soon as its selection is known to lower the peak: its play resumes.
        marginal = {key: current - peak(chosen | {key}) for key in rest if lowers(chosen | {key}, current)}
        useful = list(marginal)
        if not useful:
            break
        savings = np.array([marginal[key] for key in useful])
        if savings.sum() < current - limit:
            chosen |= set(useful)  # not enough on this estimate: take them all, then re-simulate
            continue
        picked, solver_note = exact_cover(
            [(i, 1, marginal[k], cost[k]) for i, k in enumerate(useful)], savings, current - limit
        )
        if not solver_note.startswith("milp (HiGHS)"):
            solver = solver_note
        chosen |= {key for key, on in zip(useful, picked) if on > 0.5}
    if peak(chosen) > limit:
        # Adding plans can raise the peak, so the search's path can miss a selection that fits:
        # the lowest peak there is (every plan, less those that raise it) decides.
        chosen = _lowest_peak(peak, lowers, set(keys))
        solver = "lowest predicted peak" if peak(chosen) <= limit else "infeasible: the lowest predicted peak is over"
    feasible = peak(chosen) <= limit
    if feasible:
        for key in sorted(chosen, key=lambda k: (-cost[k], k)):
            if model.fits(batch, tuple(chosen - {key}), limit):
                chosen.discard(key)
    predicted = peak(chosen)
    full = {key: model.factor(key) * model.raw_saving(key, batch) for key in chosen}
    choices = tuple(
        sorted(
            (
                PlanChoice(p.key, p.entries, -1, p.frequency, full[p.key], cost[p.key])
                for p in model.plans
                if p.key in chosen
            ),
            key=lambda c: -c.saving_bytes,
        )
    )
    return PlanResult(
        predicted_bytes=predicted,
        feasible=feasible,
        choices=choices,
        cost_s=sum(c.cost_s for c in choices),
        solver=solver,
        **common,
        **_largest_batches(model, limit, model.plans, batch, feasible),
    )


def _largest_batches(
    model: MemoryModel, limit: float, plans: Sequence[PlanSavings], target_batch: int, feasible: bool
) -> dict[str, Any]:
    """``PlanResult``'s largest batches predicted to fit, with every plan and with none. Where
    the target cannot fit they answer what fits instead, so they are searched below it: the
    allocator's placement can fit a larger batch where the target does not."""
    ceiling = None if feasible else target_batch - 1
    return {
        "max_batch_all_plans": model.max_batch(limit, [p.key for p in plans], ceiling),
        "max_batch_no_plans": model.max_batch(limit, (), ceiling),
    }


def _lowest_peak(
    peak: Callable[[set[PlanKey]], float], lowers: Callable[[set[PlanKey], float], bool], plans: set[PlanKey]
) -> set[PlanKey]:
    """``plans`` less those whose recompute raises the simulated peak (a recomputed tensor can
    land where the peak is): every plan together is not always the lowest peak there is.
    ``lowers(plans, than)``: whether ``peak(plans) < than``."""
    lowest, lowest_peak = set(plans), peak(plans)
    improved = True
    while improved:
        improved = False
        for key in sorted(lowest):
            fewer = lowest - {key}
            if lowers(fewer, lowest_peak):
                lowest, lowest_peak, improved = fewer, peak(fewer), True
                break
    return lowest


def _choices(
    model: MemoryModel,
    usable: list[PlanSavings],
    variables: list[tuple[int, int, float, float]],
    chosen: np.ndarray,
    costs_s: Mapping[PlanKey, float],
    batch: int,
) -> tuple[PlanChoice, ...]:
    taken: dict[int, int] = {}
    for (index, covers, _, _), on in zip(variables, chosen):
        if on > 0.5:
            taken[index] = taken.get(index, 0) + covers
    choices = []
    for index, covered in sorted(taken.items()):
        plan = usable[index]
        count = -1 if covered >= plan.frequency else covered
        saving = model.factor(plan.key) * model.raw_saving(plan.key, batch, None if count < 0 else count)
        cost = max(costs_s.get(plan.key, 0.0), 0.0) * (1.0 if count < 0 else count / max(plan.frequency, 1))
        choices.append(PlanChoice(plan.key, plan.entries, count, plan.frequency, saving, cost))
    return tuple(sorted(choices, key=lambda c: -c.saving_bytes))


def _evaluate(polynomial: Polynomial, dims: Mapping[str, int]) -> float:
    return float(polynomial.evaluate({**{s: 1 for s in polynomial.symbols}, **dims}))
