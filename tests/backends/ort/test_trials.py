"""Trials, journal, memory model and planner: real ORTModule child runs of tiny recipes on CPU."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

import pytest
from support import RECIPES
from support.cli import assert_one_line_error, memopt

from memopt.backends.ort.config import ConfigError
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, PlanSavings, fit_memory_model
from memopt.backends.ort.predict.planner import choose_plans
from memopt.backends.ort.predict.recompute_cost import read_node_times
from memopt.backends.ort.trials import TrialSpec, parse_trial_config, run_trial
from memopt.backends.ort.version import OrtVersion
from memopt.child import NODE_TIMES_FILE
from memopt.core import parse_runnable
from memopt.graph.polynomial import Polynomial
from memopt.run import RunSettings
from memopt.run.budget import BudgetError, parse_budget
from memopt.run.journal import Journal

TINY = {"size": "tiny"}


@pytest.fixture(scope="session")
def trials_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trials")


@pytest.fixture(scope="session")
def baseline(trials_dir: Path) -> dict[int, object]:
    """No-config trials of the tiny GPT at batches 2, 4 and 8, journaled in ``trials_dir``."""
    return {
        b: run_trial(TrialSpec(RunSettings(target=parse_runnable("gpt"), options=TINY, steps=2), b), trials_dir)
        for b in (2, 4, 8)
    }


@pytest.fixture(scope="session")
def config_trial(trials_dir: Path):
    run = memopt(
        "trial",
        "gpt",
        "--size",
        "tiny",
        "--batch",
        "4",
        "--config",
        "FusedMatMul+Add+,Gelu+",
        "--steps",
        "2",
        "--runs-dir",
        str(trials_dir),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.ort
def test_trial_records_plans_memory_and_journal_line(config_trial, trials_dir: Path) -> None:
    records = [e.record for e in Journal.in_folder(trials_dir).entries() if e.record["config"]]
    record = records[-1]
    assert record["outcome"] == "ok" and record["device"] == "cpu" and record["ort_version"] == "1.19.2"
    assert set(record["plans_on"]) == {"FusedMatMul+Add+:1:-1", "Gelu+:1:-1"}  # what ORT itself reported ON
    assert record["recomputed_nodes"] > 0 and record["plans_seen"] >= 5
    assert record["peak_bytes"] > record["static_bytes"] > 100 * 2**20
    assert len(record["step_times_s"]) == 3 and record["throughput"] > 0
    config_file = Path(record["config_value"])  # ORT 1.19 reads a JSON file in the trial folder
    assert config_file.parent == Path(record["run_dir"]) and json.loads(config_file.read_text()) == list(
        record["config"]
    )
    assert "ORT plans    ON: FusedMatMul+Add+:1:-1" in config_trial.stdout


@pytest.mark.ort
def test_resume_reuses_the_finished_trial(config_trial, trials_dir: Path) -> None:
    journal = Journal.in_folder(trials_dir)
    before = len(list(journal.entries()))
    again = memopt(
        "trial",
        "gpt",
        "--size",
        "tiny",
        "--batch",
        "4",
        "--config",
        "Gelu+:1:-1,FusedMatMul+Add+:1:-1",
        "--steps",
        "2",
        "--runs-dir",
        str(trials_dir),
        "--resume",
    )
    assert again.returncode == 0, again.stderr
    assert "reused from the journal" in again.stdout
    assert len(list(journal.entries())) == before


@pytest.mark.subprocess
def test_config_ort_would_reject_is_caught_before_launch(tmp_path: Path) -> None:
    run = memopt("trial", "gpt", "--size", "tiny", "--batch", "2", "--config", "Gelu+:1", "--runs-dir", str(tmp_path))
    assert_one_line_error(run, "Gelu+:1")
    assert not list(tmp_path.iterdir())  # nothing launched, no journal
    with pytest.raises(ConfigError):
        parse_trial_config("Gelu+:7:-1", OrtVersion.parse("1.19.2"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "an array"}')
    with pytest.raises(ConfigError):
        parse_trial_config(str(bad), OrtVersion.parse("1.19.2"))


@pytest.mark.ort
def test_timeout_kills_the_child(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_trial(
        TrialSpec(RunSettings(target=parse_runnable(str(RECIPES / "hangs.py")), timeout_s=8, steps=1), 2), tmp_path
    )
    assert result.outcome == "timed_out" and time.monotonic() - started < 30
    leftover = subprocess.run(["pgrep", "-f", result.run_dir], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""  # the process group is gone
    assert Journal.in_folder(tmp_path).latest(result.key).record["outcome"] == "timed_out"


@pytest.mark.parametrize(
    ("recipe", "outcome", "fragment"),
    [
        ("oom_in_step.py", "out_of_memory", "Failed to allocate memory"),
        ("crashes_in_step.py", "crashed", "labels are missing"),
        ("loss_raises.py", "recipe_error", "loss() failed on the model's output: ValueError: labels are missing"),
    ],
)
@pytest.mark.ort
def test_failing_steps_are_classified(recipe: str, outcome: str, fragment: str, tmp_path: Path) -> None:
    result = run_trial(TrialSpec(RunSettings(target=parse_runnable(str(RECIPES / recipe)), steps=1), 2), tmp_path)
    assert result.outcome == outcome and fragment in result.error


@pytest.mark.ort
def test_over_budget_trial_exits_1(trials_dir: Path, baseline) -> None:
    run = memopt(
        "trial",
        "gpt",
        "--size",
        "tiny",
        "--batch",
        "2",
        "--steps",
        "2",
        "--budget",
        "100MiB",
        "--runs-dir",
        str(trials_dir),
        "--resume",
    )
    assert run.returncode == 3, run.stderr
    assert ": over budget" in run.stdout and "OVER" in run.stdout


@pytest.mark.ort
def test_memory_model_fitted_on_two_trials_predicts_a_third(baseline) -> None:
    fit = [Observation(b, (), baseline[b].memory.peak_bytes) for b in (2, 4)]
    model = fit_memory_model(fit, (), ("input_ids_dim0",), {"input_ids_dim1": 32})
    predicted = model.predict(8).peak_bytes
    assert abs(predicted - baseline[8].memory.peak_bytes) / baseline[8].memory.peak_bytes < 0.02


def _synthetic_model() -> MemoryModel:
    b = Polynomial.symbol("b")
    plans = tuple(
        PlanSavings(f"P{i}+:1:-1", (f"P{i}+:1",), 2, b.scale(s), (b.scale(s / 2), b.scale(s / 2)))
        for i, s in enumerate((100, 60, 50, 30))
    )
    return MemoryModel(("b",), {}, plans, static_bytes=1000.0, per_sample_bytes=300.0)


def test_planner_picks_the_cheapest_feasible_set() -> None:
    model = _synthetic_model()
    costs = {"P0+:1:-1": 10.0, "P1+:1:-1": 4.0, "P2+:1:-1": 3.0, "P3+:1:-1": 3.5}
    # At batch 2: baseline 1600; limit 1400 needs 200 bytes: {P0} 200 for 10, {P1,P2} 220 for 7,
    # {P1,P3} 180 too little, {P1,P2,P3} 280 for 10.5: the optimum is {P1, P2}.
    result = choose_plans(model, costs, 2, 1400, "1.19.2")
    assert result.feasible and set(result.plans) == {"P1+:1:-1", "P2+:1:-1"} and result.cost_s == pytest.approx(7.0)
    best = min(
        (sum(costs[k] for k in s), s)
        for n in range(5)
        for s in itertools.combinations(costs, n)
        if sum(model.raw_saving(k, 2) for k in s) >= 200
    )
    assert result.cost_s == pytest.approx(best[0])
    # ORT 1.16 counts occurrences: the first of P2's two (50 bytes for 1.5) closes a 40-byte gap;
    # 1.17+ can only switch a whole plan on (P2 for 3).
    old = choose_plans(model, costs, 2, 1560, "1.16.3")
    assert [(c.key, c.count) for c in old.choices] == [("P2+:1:-1", 1)] and old.cost_s == pytest.approx(1.5)
    assert [str(e) for e in old.entries] == ["P2+:1:1"]
    new = choose_plans(model, costs, 2, 1560, "1.19.2")
    assert [(c.key, c.count) for c in new.choices] == [("P2+:1:-1", -1)] and new.cost_s == pytest.approx(3.0)
    # Too big: says so, and which batch fits.
    too_big = choose_plans(model, costs, 10, 1300, "1.19.2")
    assert not too_big.feasible and too_big.max_batch_all_plans == 5 and too_big.max_batch_no_plans == 1


@pytest.mark.ort
def test_planner_on_a_real_tiny_model(baseline, trials_dir: Path) -> None:
    from memopt.backends.ort.calibrate import calibrate

    settings = RunSettings(target=parse_runnable("gpt"), options=TINY, steps=2, runs_dir=trials_dir)
    cal = calibrate(settings, 16, calibration_batches=(2, 4))
    model = cal.model
    assert len(model.plans) >= 5 and model.simulated and model.static_bytes > 0
    keys = [p.key for p in model.plans]
    every = model.predict(16, keys).peak_bytes
    budget = int((model.baseline(16) + every) / 2)
    result = choose_plans(model, cal.costs_s, 16, budget, cal.ort_version)
    assert result.feasible and result.predicted_bytes <= budget
    assert result.predicted_bytes == pytest.approx(model.predict(16, result.plans).peak_bytes)
    # Nothing chosen can go, and no cheaper selection is predicted to fit (exhaustive, on the simulation).
    for key in result.plans:
        assert model.predict(16, set(result.plans) - {key}).peak_bytes > budget
    best = min(
        sum(cal.costs_s[k] for k in s)
        for n in range(len(keys) + 1)
        for s in itertools.combinations(keys, n)
        if model.predict(16, s).peak_bytes <= budget
    )
    assert result.cost_s <= best * 1.5
    # The costs come from the largest calibration run's profiled kernels: a time for every recomputed node.
    reference = max(cal.trials, key=lambda t: t.batch_size)
    measured = read_node_times(Path(reference.run_dir) / NODE_TIMES_FILE)
    recomputed = {name for p in model.plans for r in p.recomputes for name in r.nodes}
    assert recomputed and recomputed <= set(measured) and all(seconds >= 0 for seconds in measured.values())
    assert sum(cal.costs_s.values()) > 0
    assert cal.cost_source == f"node times from ORT's profiler at batch {reference.batch_size}"
    # The calibration run's own log says how ORT's arena grew; the simulation grew alike.
    assert cal.arena_check.startswith(f"the simulated arena grew as ORT's did at batch {reference.batch_size} (")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.5GiB", int(2.5 * 2**30)),
        ("2500MB", 2_500_000_000),
        ("512mib", 512 * 2**20),
        ("1e9", None),
        ("80%", None),
    ],
)
def test_budget_parsing(text: str, expected: int | None) -> None:
    if text == "1e9":
        with pytest.raises(BudgetError):
            parse_budget(text)
        return
    budget = parse_budget(text)
    if expected is None:
        assert budget.fraction == pytest.approx(0.8) and budget.bytes_of(1000) == 800
    else:
        assert budget.bytes == expected


@pytest.mark.parametrize("text", ["", "lots", "2.5 GiBs", "0MB", "-1GB", "0%", "150%", "GiB"])
def test_bad_budgets_are_rejected(text: str) -> None:
    with pytest.raises(BudgetError):
        parse_budget(text)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("plan", "gpt", "--size", "tiny", "--target-batch", "0", "--budget", "1GiB"), "--target-batch"),
        (("plan", "gpt", "--size", "tiny", "--target-batch", "16", "--budget", "2.5XB"), "2.5XB"),
        (("plan", "gpt", "--target-batch", "16", "--budget", "1GiB", "--calibrate", "0"), "--calibrate"),
        (("plan", "gpt", "--target-batch", "16", "--budget", "1GiB", "--calibrate", "x"), "--calibrate"),
        (("trial", "gpt", "--batch", "0"), "--batch"),
        (("trial", "gpt", "--batch", "2", "--budget", "much"), "much"),
    ],
)
@pytest.mark.subprocess
def test_bad_input_is_one_line(args: tuple[str, ...], fragment: str, tmp_path: Path) -> None:
    assert_one_line_error(memopt(*args, "--runs-dir", str(tmp_path)), fragment)


def test_one_ineffective_plan_does_not_condemn_the_others() -> None:
    """A plan whose saving is off the peak's path measures as saving nothing; plans never
    tried keep half the scan's word instead of dropping to zero (which made the tuner give
    up on a target every plan together reaches)."""
    from memopt.backends.ort.predict.memory_model import Observation, PlanSavings, fit_memory_model
    from memopt.graph.polynomial import Polynomial

    per_sample = Polynomial.symbol("b").scale(2**20)
    plans = (PlanSavings("A+:1:-1", ("A+:1",), 1, per_sample), PlanSavings("B+:1:-1", ("B+:1",), 1, per_sample))
    observations = [
        Observation(2, (), 100 * 2**20),
        Observation(4, (), 110 * 2**20),
        Observation(16, ("A+:1:-1",), 170 * 2**20),
    ]  # A measured: no saving at all
    model = fit_memory_model(observations, plans, ["b"], {})
    assert model.predict(16, ("A+:1:-1",)).peak_bytes == pytest.approx(170 * 2**20, rel=0.01)
    assert model.predict(16, ("B+:1:-1",)).peak_bytes == pytest.approx((170 - 8) * 2**20, rel=0.01)
