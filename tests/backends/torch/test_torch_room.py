"""The room the torch back end's choice keeps under the limit: twice the run-to-run noise of repeats
plus a share of what the policy takes off, learnt wider from a run that fell below its prediction.
Pure logic: a hand-made scan of four alike layers and the line through two runs (``LinePeak``)."""

from __future__ import annotations

import pytest
from support.results import MiB, measured

from memopt.backends.torch.predict import LinePeak, PeakLine
from memopt.backends.torch.scan import TorchPlanRow, TorchScan
from memopt.backends.torch.tune import SAVING_ERROR, SavingRoom, TorchPlan
from memopt.predict import PhaseSpread, RunSpread, kept_room
from memopt.recompute import RecomputePlan, RecomputePolicy
from memopt.units import format_bytes

NONE = RecomputePolicy(())
LAYERS = 4


def _plan(limit_mib: float, room: SavingRoom = SavingRoom()) -> TorchPlan:
    """Batch 2 peaks at 200 MiB without recompute; each layer's checkpoint takes 10 MiB off it at 1 s."""
    rows = tuple(
        TorchPlanRow(RecomputePlan.parse(f"layers.{i}: *"), 4, 1, 10 * MiB, None, 1.0, 1.0) for i in range(LAYERS)
    )
    scanned = TorchScan(2, None, 40 * MiB, None, (), rows)
    line = LinePeak(PeakLine(1, 150 * MiB, 2, 200 * MiB), scanned)
    limit = limit_mib * MiB
    return TorchPlan(2, int(limit / 0.98), limit, scanned, line, NONE, 0.0, (), room).learnt(())


def _layers(plan: TorchPlan) -> int:
    return len(plan.policy.plans)


def test_the_room_is_twice_the_noise_and_a_share_of_the_saving() -> None:
    assert kept_room(3.0, 5.0) == 11.0 and kept_room(3.0, -5.0) == 6.0  # an over-prediction keeps no room
    noisy = SavingRoom(RunSpread(steps=PhaseSpread(1 * MiB, 3)))
    assert noisy.bytes(100 * MiB) == pytest.approx((2 + SAVING_ERROR * 100) * MiB)
    assert noisy.bytes(-10 * MiB) == 2 * MiB  # no recompute: the noise alone
    assert "2 × the run-to-run spread of the steps 1.0 MiB (3 runs of one config)" in noisy.describe(100 * MiB)
    assert "no run repeated: no run-to-run noise" in SavingRoom().describe(100 * MiB)


def test_the_choice_keeps_the_room_and_says_it() -> None:
    # Two layers reach 180 MiB, under a 180.5 MiB limit by less than the room, a share of the 20 MiB they take off.
    assert _layers(_plan(180.5, SavingRoom(share=0.0))) == 2
    plan = _plan(180.5)
    assert _layers(plan) == 3 and plan.predicted_bytes == 170 * MiB
    assert plan.kept_room_bytes == pytest.approx(SAVING_ERROR * 30 * MiB)
    assert plan.room_line.startswith(
        f"{format_bytes(int(SAVING_ERROR * 30 * MiB))} of room kept under the limit (no run repeated: no run-to-run "
        f"noise, + {SAVING_ERROR:.1%} of the 30.0 MiB the policy takes off: the savings' error allowed for)"
    )
    # The noise of repeats widens it: 2 × 5 MiB more leaves three layers short of the limit less the room.
    loud = _plan(180.5, SavingRoom(RunSpread(steps=PhaseSpread(5 * MiB, 3))))
    assert _layers(loud) == 4 and loud.predicted_bytes + loud.kept_room_bytes <= loud.limit_bytes


def test_where_no_policy_reaches_the_limit_less_the_room_the_limit_itself_chooses() -> None:
    plan = _plan(160.5)  # every layer: 160 MiB, under the limit but not by the room
    assert _layers(plan) == LAYERS and plan.feasible
    kept = format_bytes(int(SAVING_ERROR * 40 * MiB))
    assert plan.room_line.startswith(f"no policy is predicted under the limit less {kept} of room kept")
    assert plan.room_line.endswith("chosen against the limit itself, 512.0 KiB under it")
    assert (
        _layers(_plan(190.0)) == 2 and _layers(_plan(191.5)) == 1 and _layers(_plan(203.0)) == 0
    )  # no recompute, nothing taken off: no room


def test_a_run_below_its_prediction_widens_the_share_and_repeats_measure_the_noise() -> None:
    plan = _plan(180.5)
    trials = [
        measured("none", 1, 150, 150, run_dir="runs/a"),
        measured("none", 1, 150.4, 150.4, run_dir="runs/b"),  # a repeat: 0.4 MiB apart
        # One layer predicted at 190 MiB ran at 193: 30% of the 10 MiB it takes off.
        measured("one", 2, 193, 193, config=("layers.0: *",), run_dir="runs/c"),
        measured("one", 2, 193, 193, config=("layers.0: *",), run_dir="runs/c"),  # the same run again: no repeat
    ]
    room = plan.room.learnt_from(plan.model, 2, trials)
    assert room.learnt and room.share == pytest.approx(0.3)
    assert room.spread.noise_bytes == pytest.approx(0.4 * MiB)
    assert "the most a run at the target batch fell below its prediction" in room.describe(10 * MiB)
    # A run above its prediction, or one at another batch, teaches nothing beyond the default share.
    over = [measured("two", 2, 170, 170, config=("layers.0: *", "layers.1: *"), run_dir="runs/d")]
    assert plan.room.learnt_from(plan.model, 2, over) == SavingRoom(RunSpread(), SAVING_ERROR, False)
    # Aimed at another budget, the plan learns its room from the runs so far and chooses with it.
    lower = plan.at_budget(int(173 / 0.98 * MiB), 0.02, trials)
    assert lower.room.share == pytest.approx(0.3) and _layers(lower) == LAYERS
