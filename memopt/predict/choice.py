"""The exact choice every back end's planner makes: the least-cost set of plans whose savings
reach what a budget needs, and the limit a budget leaves a prediction.

    minimise Σ cost_p · x_p   subject to   Σ saving_p · x_p ≥ need,  x binary
    (and, where plans exclude others, |S_p| · x_p + Σ_{q ∈ S_p} x_q ≤ |S_p|)

solved with ``scipy.optimize.milp`` (HiGHS branch and bound: optimal, not greedy). Nothing here
knows a back end: ORT's planner (``planner``) and the plain-PyTorch back end call it alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["DEFAULT_MARGIN", "budget_limit", "cheapest_cover", "exact_cover", "kept_room"]

# Fraction of the budget held back for prediction error, by plan and tune alike.
DEFAULT_MARGIN = 0.02


def budget_limit(budget_bytes: float, margin: float) -> float:
    """The peak a config may be predicted at: the budget less the margin held back for error."""
    return budget_bytes * (1.0 - margin)


def kept_room(noise_bytes: float, error_bytes: float) -> float:
    """The room a choice keeps between its predicted peak and the limit, every back end alike:
    twice the run-to-run noise (the run that judges it lands as far from the runs the model was
    made of as repeats of one run land apart, either way) plus how far the model may fall below
    the measured peak (``error_bytes``; an error that over-predicts needs no room)."""
    return 2 * noise_bytes + max(0.0, error_bytes)


def cheapest_cover(
    savings: Sequence[float],
    costs: Sequence[float],
    need: float,
    excludes: Mapping[int, Sequence[int]] | None = None,
) -> tuple[list[int], str]:
    """The indices of the least-cost set of plans whose savings add up to ``need``; where they
    cannot, the set that saves most. ``excludes``: a plan and the plans it leaves nothing to
    (a checkpointed layer and the plans inside it): taken, none of those is."""
    variables = [(index, 1, saving, cost) for index, (saving, cost) in enumerate(zip(savings, costs))]
    apart = _apart(len(variables), excludes or {})
    if apart:  # out of reach, the most the plans save together is what they cover
        need = min(need, _most(np.array(savings, dtype=float), apart))
    chosen, solver = exact_cover(variables, np.array(savings, dtype=float), need, apart)
    return [index for index, x in enumerate(chosen) if x], solver


def _apart(n: int, excludes: Mapping[int, Sequence[int]]) -> list[np.ndarray]:
    """``|S|·x_p + Σ_{q∈S} x_q ≤ |S|`` for each plan ``p`` and the plans ``S`` it excludes, as rows."""
    rows = []
    for plan, others in excludes.items():
        if others:
            row = np.zeros(n)
            row[list(others)] = 1.0
            row[plan] = float(len(others))
            rows.append(row)
    return rows


def _most(savings: np.ndarray, apart: list[np.ndarray]) -> float:
    """The largest saving plans that exclude one another can add up to (a little less: HiGHS's tolerance)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    bound = np.array([row.max() for row in apart])
    scale = max(float(savings.max(initial=0.0)), 1.0)
    result = milp(
        -savings / scale,
        constraints=[LinearConstraint(np.array(apart), lb=-np.inf, ub=bound)],
        integrality=np.ones(len(savings)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    return float(savings @ np.round(result.x)) * (1 - 1e-9) if result.x is not None else 0.0


def exact_cover(
    variables: list[tuple[int, int, float, float]],
    savings: np.ndarray,
    need: float,
    apart: Sequence[np.ndarray] = (),
) -> tuple[np.ndarray, str]:
    """Which ``variables`` (plan index, occurrences it covers, saving, cost) to take, 0 or 1 each,
    at least cost, so that their ``savings`` reach ``need``; and how it was solved. Consecutive
    variables of one plan covering an occurrence each are taken first to last (ORT ≤1.16 recomputes
    the first occurrences in topological order)."""
    # Imported here: scipy.optimize takes about half a second of CPU to import, which every
    # memopt command would pay at start-up, and a plan that needs no solve (none needed,
    # or out of reach) would pay too.
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = len(variables)
    scale = max(float(savings.max()), 1.0)
    costs = np.array([v[3] for v in variables])
    # Costs are seconds (often milliseconds): scaled to order 1 so HiGHS's absolute tolerances
    # cannot hide a plan that is not needed; a tiny price per variable then prefers fewer plans
    # between equally cheap sets.
    objective = costs / max(float(costs.max(initial=0.0)), 1e-12) + 1e-9
    constraints = [LinearConstraint((savings / scale)[None, :], lb=need / scale, ub=np.inf)]
    order = []  # y_{p,j} >= y_{p,j+1}: ORT <=1.16 recomputes the first occurrences in topological order
    for i in range(n - 1):
        if variables[i][0] == variables[i + 1][0] and variables[i][1] == 1:
            row = np.zeros(n)
            row[i], row[i + 1] = 1.0, -1.0
            order.append(row)
    if order:
        constraints.append(LinearConstraint(np.array(order), lb=0.0, ub=np.inf))
    if apart:  # plans that exclude one another: |S|·x_p + Σ x_q ≤ |S|
        constraints.append(LinearConstraint(np.array(apart), lb=-np.inf, ub=np.array([r.max() for r in apart])))
    # Zero relative gap: HiGHS must prove optimality (by default it stops within 0.01%).
    result = milp(
        objective, constraints=constraints, integrality=np.ones(n), bounds=Bounds(0, 1), options={"mip_rel_gap": 0.0}
    )
    if result.x is None:
        return np.ones(n), f"milp failed ({result.message}); every plan enabled"
    return np.round(result.x), "milp (HiGHS), optimal"
