"""``tune --backend torch --frontier``: memopt's verified policy at budgets from the no-recompute
peak down to the floor, beside no recompute, every layer checkpointed and torch.compile.

The walk is one tuning session (``TorchTuner``): one scan and one anchor run make the peak model,
and each budget is that session aimed lower (``TorchTuner.retarget``) and searched as ``tune``
searches (``verify_torch``), so a policy chosen at two budgets runs once and every run is in the
journal ``--resume`` reads. The peers are measured once each, at the target batch.

The answer at a budget is the cheapest run (by the scan's recompute time, as tune chooses) whose
measured peak is under its limit, among every run of memopt's policies the walk made. The runs
under a lower limit are a subset of those under a higher one, so the answer's peak never rises as
the budget falls (``answers``): a run chosen at a lower budget that is cheaper than the higher
budget's own choice answers there too, and an inversion between the budgets' own verdicts cannot
reach the frontier. A budget under which no run fits says the floor and what holds it
(``TorchPlan.floor_line``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memopt.backends.torch.peers import Peer, PeerKind
from memopt.backends.torch.session import TorchTuner
from memopt.backends.torch.trial import run_torch_trial
from memopt.core import HfConfig, RecipeTarget
from memopt.core.plan import PlanName
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.predict.choice import budget_limit
from memopt.recompute import RecomputePolicy
from memopt.tune.events import Purpose, TrialRecord
from memopt.units import format_bytes

__all__ = ["DEFAULT_POINTS", "Frontier", "FrontierPoint", "PeerPoint", "Run", "answers", "inversions", "walk_frontier"]

DEFAULT_POINTS = 7
_NONE = RecomputePolicy(())


@dataclass(frozen=True)
class Run:
    """A measured run of memopt's policy at the target batch, as the frontier compares them."""

    number: int  # the session's trial number
    plans: tuple[PlanName, ...]
    peak_bytes: int
    step_s: float | None
    cost_s: float  # the scan's recompute time of its plans: what tune minimises
    run_dir: str

    @property
    def policy(self) -> str:
        return "; ".join(self.plans) or "no recompute"


@dataclass(frozen=True)
class FrontierPoint:
    budget_bytes: int
    limit_bytes: float
    answer: Run | None  # the cheapest run under the limit (None: none is)
    floor_line: str | None  # where no run is under the limit: the floor and what holds it

    @property
    def under(self) -> float | None:
        """How far the answer's peak is under the limit, as a fraction of the limit."""
        if self.answer is None:
            return None
        return (self.limit_bytes - self.answer.peak_bytes) / self.limit_bytes


@dataclass(frozen=True)
class PeerPoint:
    name: str
    peak_bytes: int | None
    step_s: float | None
    note: str  # how it was applied, or why it has no figure


@dataclass(frozen=True)
class Frontier:
    target: str
    target_batch: int
    points: tuple[FrontierPoint, ...]  # highest budget first
    peers: tuple[PeerPoint, ...]  # no recompute first, then every layer, then compile's
    compile_note: str  # "" where compile ran at every budget asked
    runs: tuple[Run, ...]  # every run of memopt's policies the walk made
    journal: Path

    @property
    def none(self) -> PeerPoint:
        return self.peers[0]

    @property
    def every_layer(self) -> PeerPoint:
        return self.peers[1]

    @property
    def verified(self) -> int:
        return sum(point.answer is not None for point in self.points)

    def summary(self, plot: Path | None) -> dict[str, Any]:
        """The frontier for ``--json``."""
        return {
            "status": "frontier",
            "backend": "torch",
            "target": self.target,
            "target_batch": self.target_batch,
            "inversions": inversions(self.points),
            "points": [
                {
                    "budget_bytes": point.budget_bytes,
                    "limit_bytes": int(point.limit_bytes),
                    "verified": point.answer is not None,
                    "plans": list(point.answer.plans) if point.answer else None,
                    "peak_bytes": point.answer.peak_bytes if point.answer else None,
                    "under_limit": point.under,
                    "median_step_s": point.answer.step_s if point.answer else None,
                    "run_dir": point.answer.run_dir if point.answer else None,
                    "floor": point.floor_line,
                }
                for point in self.points
            ],
            "peers": [
                {"name": peer.name, "peak_bytes": peer.peak_bytes, "median_step_s": peer.step_s, "note": peer.note}
                for peer in self.peers
            ],
            "compile": self.compile_note or "measured",
            "plot": str(plot) if plot is not None else None,
            "journal": str(self.journal),
        }


def answers(limits: Sequence[float], runs: Sequence[Run]) -> list[Run | None]:
    """For each limit the cheapest run whose peak is under it (by recompute time, then peak,
    then trial number; None where none is). One order over one set of runs: were a lower limit's
    answer Y to peak above a higher limit's X, X would be under the lower limit too and, being
    first in that order among more runs, first among fewer, so Y would be X."""

    def order(run: Run) -> tuple[float, int, int]:
        return run.cost_s, run.peak_bytes, run.number

    return [min((run for run in runs if run.peak_bytes <= limit), key=order, default=None) for limit in limits]


def inversions(points: Sequence[FrontierPoint]) -> int:
    """Pairs of verified points (highest budget first) where the lower budget's answer peaks higher."""
    peaks = [point.answer.peak_bytes for point in points if point.answer is not None]
    return sum(later > earlier for i, earlier in enumerate(peaks) for later in peaks[i + 1 :])


def budgets_between(top: float, floor: float, points: int) -> list[int]:
    """``points`` budgets evenly spaced from ``top`` down to ``floor``, both included."""
    step = (top - floor) / (points - 1)
    return [int(top - i * step) for i in range(points)]


def walk_frontier(
    tuner: TorchTuner, points: int, say: Callable[[str], None], compile_budgets: Sequence[float] = ()
) -> Frontier:
    """Measure the frontier of ``tuner``'s target at its target batch (``points`` budgets), and
    torch.compile at each of ``compile_budgets`` (its ``activation_memory_budget``)."""
    if points < 2:
        raise MemoptError(f"--frontier-points must be at least 2, not {points}")
    settings = tuner.settings
    tuner.setup()
    none = _measured(tuner.run_trial((), Purpose.CALIBRATION, "no recompute at the target batch: the walk's top"))
    plan = tuner.plan
    assert plan is not None  # set up above
    _, floor = plan.strongest()
    top = float(none.memory.device_peak or 0)
    if floor >= top:
        raise MemoptError(
            f"nothing to walk: the policy that saves most is predicted at {format_bytes(int(floor))}, "
            f"not under the no-recompute peak {format_bytes(int(top))}"
        )
    say(
        f"frontier: {points} budgets from the no-recompute peak {format_bytes(int(top))} "
        f"down to the predicted floor {format_bytes(int(floor))}"
    )
    budgets = budgets_between(top, floor, points)
    floors: dict[int, str] = {}
    for budget in budgets:
        tuner.retarget(budget)
        result = tuner.auto_search()
        if not result.verified:
            assert tuner.plan is not None
            floors[budget] = tuner.plan.floor_line
    every_layer = _every_layer(tuner, say)  # a peer: not one of memopt's choices, so not on its frontier
    runs = tuple(_runs(tuner, exclude={r.number for r in tuner.records if r.purpose is Purpose.MANUAL}))
    limits = [(budget, budget_limit(budget, settings.margin)) for budget in budgets]
    chosen = answers([limit for _, limit in limits], runs)
    # No run under a budget's limit means its own search verified nothing, which said the floor.
    frontier_points = tuple(
        FrontierPoint(budget, limit, answer, None if answer is not None else floors[budget])
        for (budget, limit), answer in zip(limits, chosen)
    )
    compiled, compile_note = _compiled(tuner, compile_budgets, say)
    peers = (PeerPoint("no recompute", none.memory.device_peak, none.median_step_s, ""), every_layer, *compiled)
    target = settings.run.target.spec
    return Frontier(target, settings.target_batch, frontier_points, peers, compile_note, runs, tuner.journal.path)


def _measured(record: TrialRecord) -> TrialResult:
    trial = record.result
    if not trial.ran or trial.memory.device_peak is None:
        raise MemoptError(f"the run without recompute at batch {trial.batch_size}: {trial.error} ({trial.run_dir})")
    return trial


def _runs(tuner: TorchTuner, exclude: set[int]) -> list[Run]:
    """The session's runs of memopt's policies at the target batch that ran, each policy once."""
    seen: dict[frozenset[PlanName], Run] = {}
    for record in tuner.records:
        trial = record.result
        peak = trial.memory.device_peak
        if record.number in exclude or trial.batch_size != tuner.settings.target_batch or not trial.ran or peak is None:
            continue
        run = Run(record.number, record.plans, peak, trial.median_step_s, tuner.cost_of(record.plans), trial.run_dir)
        seen.setdefault(frozenset(record.plans), run)  # a policy searched again at a lower budget reuses its run
    return list(seen.values())


def _every_layer(tuner: TorchTuner, say: Callable[[str], None]) -> PeerPoint:
    """Every layer checkpointed, measured once: Hugging Face's own ``gradient_checkpointing_enable``
    for an ``hf:`` model, else whole-module checkpointing of the scan's outermost repeated module."""
    settings = tuner.settings
    if isinstance(settings.run.target, HfConfig):
        peer = Peer(PeerKind.HF_CHECKPOINTING)
        trial = _peer_run(tuner, peer, say)
        return _peer_point(peer.title, trial, "model.gradient_checkpointing_enable(use_reentrant=False)")
    plan = tuner.plan
    assert plan is not None
    layers = [row.plan for row in plan.scanned.rows if row.plan.whole_module and "*" in row.plan.module]
    if not layers:
        return PeerPoint("every layer checkpointed", None, None, "the scan found no repeated module to checkpoint")
    outermost = min(layers, key=lambda p: (p.module.count("."), p.module))
    record = tuner.run_trial((PlanName(str(outermost)),), Purpose.MANUAL, "every layer checkpointed (a peer)")
    return _peer_point("whole-module checkpointing, every layer", record.result, f"`{outermost}`")


def _compiled(tuner: TorchTuner, fractions: Sequence[float], say: Callable[[str], None]) -> tuple[list[PeerPoint], str]:
    """torch.compile at each ``activation_memory_budget`` of ``fractions``; the note says which did not run."""
    if not fractions:
        return [], "compile: not measured (--frontier-compile 1,0.5 measures it; on CPU each run compiles for minutes)"
    if not isinstance(tuner.settings.run.target, RecipeTarget):
        return [], "compile: not available (a command applies memopt's policy itself; memopt cannot compile it)"
    points: list[PeerPoint] = []
    failed: list[str] = []
    for fraction in fractions:
        peer = Peer(PeerKind.COMPILE, fraction)
        trial = _peer_run(tuner, peer, say)
        if not trial.ran or trial.memory.device_peak is None:
            failed.append(f"activation_memory_budget {fraction:g}: {trial.status.value}: {trial.error}")
            continue
        first = trial.step_times_s[0] if trial.step_times_s else None
        points.append(_peer_point(peer.title, trial, f"first step (compiles) {first:.1f} s" if first else ""))
    if not failed:
        return points, ""
    return points, f"compile: not available at {'; '.join(failed)}"


def _peer_run(tuner: TorchTuner, peer: Peer, say: Callable[[str], None]) -> TrialResult:
    settings = tuner.settings
    batch = settings.target_batch
    say(f"peer: {peer.title} at batch {batch}")
    trial = run_torch_trial(settings.run, batch, _NONE, journal=tuner.journal, resume=settings.resume, peer=peer)
    peak = format_bytes(trial.memory.device_peak) if trial.memory.device_peak is not None else "no peak"
    reused = ", from the journal" if trial.reused else ""
    say(f"peer: {peer.title}: {trial.status.value}, peak {peak}{reused} ({trial.run_dir})")
    return trial


def _peer_point(name: str, trial: TrialResult, how: str) -> PeerPoint:
    if not trial.ran or trial.memory.device_peak is None:
        return PeerPoint(name, None, None, f"{trial.status.value}: {trial.error} ({trial.run_dir})")
    return PeerPoint(name, trial.memory.device_peak, trial.median_step_s, how)
