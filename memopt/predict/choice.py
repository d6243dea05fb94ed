"""The exact choice every back end's planner makes: the least-cost set of plans whose savings
reach what a budget needs, and the limit a budget leaves a prediction.

    minimise Σ cost_p · x_p   subject to   Σ saving_p · x_p ≥ need,  x binary

solved with ``scipy.optimize.milp`` (HiGHS branch and bound: optimal, not greedy). Nothing here
knows a back end: ORT's planner (``planner``) and the plain-PyTorch back end call it alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["DEFAULT_MARGIN", "budget_limit", "cheapest_cover", "exact_cover"]

# Fraction of the budget held back for prediction error, by plan and tune alike.
DEFAULT_MARGIN = 0.02


def budget_limit(budget_bytes: float, margin: float) -> float:
    """The peak a config may be predicted at: the budget less the margin held back for error."""
    return budget_bytes * (1.0 - margin)


def cheapest_cover(savings: Sequence[float], costs: Sequence[float], need: float) -> tuple[list[int], str]:
    """The indices of the least-cost set of independent plans whose savings add up to ``need``."""
    variables = [(index, 1, saving, cost) for index, (saving, cost) in enumerate(zip(savings, costs))]
    chosen, solver = exact_cover(variables, np.array(savings, dtype=float), need)
    return [index for index, x in enumerate(chosen) if x], solver


def exact_cover(
    variables: list[tuple[int, int, float, float]], savings: np.ndarray, need: float
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
    # Zero relative gap: HiGHS must prove optimality (by default it stops within 0.01%).
    result = milp(
        objective, constraints=constraints, integrality=np.ones(n), bounds=Bounds(0, 1), options={"mip_rel_gap": 0.0}
    )
    if result.x is None:
        return np.ones(n), f"milp failed ({result.message}); every plan enabled"
    return np.round(result.x), "milp (HiGHS), optimal"
