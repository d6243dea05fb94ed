"""Tuning at a real memory ceiling: runs that die of memory are "out of memory", the search goes on.

The ceiling is a memory cgroup (``support.ceiling``) that memopt runs in: its probe, calibration
runs and trials really die by the kernel's OOM killer, as a GPU job dies at its device's limit.
A run killed by SIGKILL without the kernel's record of an OOM kill is "killed by signal 9".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ceiling import MemoryCeiling, memory_ceiling
from support.fake_tuning import FakeRunner, fake_tuner, prepared_gpt

from memopt.backends.ort.config import PlanKey
from memopt.backends.ort.predict.calibration import calibration_points
from memopt.core.trial import Outcome
from memopt.run import cgroup
from memopt.run.oom import OomWatch
from memopt.tune import Purpose, SearchStatus

# make demo's main job (docs/testing-and-ci.md): a tiny eight-layer GPT at batch 128 (no config ~1,200 MiB RSS on CPU).
GPT = ["gpt", "--size", "tiny", "-o", "n_layer=8", "--seq", "64"]
PLANS = (PlanKey("Gelu+:1:-1"), PlanKey("Dropout+:1:-1"))
MiB = 2**20


def under(ceiling: MemoryCeiling, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``memopt`` command line, as a user runs it, inside the ceiling's cgroup."""
    return subprocess.run(
        [sys.executable, "-m", "memopt", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        preexec_fn=ceiling.enter,
        timeout=1500,
    )


def tune_under(ceiling: MemoryCeiling, runs_dir: Path) -> dict:
    """``memopt tune --no-tui --json`` of make demo's main job under ``ceiling``: its summary,
    every trial that died having died of memory (none "crashed"). Whether one dies at all is the
    cgroup's to decide: its charge of shared pages varies from run to run."""
    tune = under(
        ceiling, "tune", *GPT, "--target-batch", "128", "--budget", "1050MiB", "--no-tui", "--json",
        "--runs-dir", str(runs_dir),
    )  # fmt: skip
    assert tune.stdout.strip(), (tune.returncode, tune.stderr[-3000:])  # no summary: say why
    summary = json.loads(tune.stdout)
    outcomes = [t["outcome"] for t in summary["trials"]]
    assert "crashed" not in outcomes, tune.stdout + tune.stderr
    return summary


def test_calibration_falls_back_to_every_plan_then_half_the_batch() -> None:
    assert list(calibration_points(4, PLANS)) == [(4, ()), (4, PLANS), (2, ()), (2, PLANS), (1, ()), (1, PLANS)]
    assert list(calibration_points(3, ())) == [(3, ()), (1, ())]


@pytest.mark.usefixtures("simulate_sample_once")
def test_a_ceiling_below_no_config_calibrates_with_every_plan_and_checks_the_largest_batch(tmp_path: Path) -> None:
    """FAKE runs (scripted peaks, out of memory above a ceiling) through the real tuner: the
    no-config calibration at batch 8 dies, every plan there runs, batch 16 fits with nothing,
    and the answer is the largest batch a run with every plan verified."""
    runner = FakeRunner(prepared_gpt(), allocator_scale=1.6)
    every = tuple(p.key for p in runner.prepared.report.patterns)
    ceiling = (runner.peak(8, ()) + runner.peak(8, every)) / 2
    runner.oom_above = ceiling
    result = fake_tuner(tmp_path, runner, int(ceiling)).auto_search()
    calibration = [(r.batch_size, bool(r.plans), r.outcome) for r in result.trials if r.purpose is Purpose.CALIBRATION]
    # no config at the target dies too: the point that ran is made --repeats times (3) instead
    assert calibration == [
        (8, False, Outcome.OUT_OF_MEMORY),
        (8, True, Outcome.OK),
        (16, False, Outcome.OUT_OF_MEMORY),
        *[(8, True, Outcome.OK)] * 2,
    ]
    largest = result.largest_batch
    assert result.status is SearchStatus.IMPOSSIBLE and largest is not None, result.message
    assert f"fits up to batch {largest}" in result.message
    assert any(r.batch_size == largest and r.outcome is Outcome.OK for r in result.trials)
    assert runner.peak(largest, every) <= ceiling < runner.peak(largest + 1, every)


def test_no_kill_is_no_evidence() -> None:
    watch = OomWatch.start(os.getpid())
    assert watch.evidence() is None


# A job that allocates far more than the ceiling allows, and one that kills itself outright.
GREEDY = f"{sys.executable} -c 'x = bytearray(1 << 30); print(len(x))' {{batch}}"
SELF_KILLED = f"{sys.executable} -c 'import os; os.kill(os.getpid(), 9)' {{batch}}"


@pytest.mark.subprocess
def test_a_job_the_kernel_kills_for_memory_is_out_of_memory_and_a_sigkill_is_not(tmp_path: Path) -> None:
    with memory_ceiling(300) as ceiling:
        died = under(ceiling, "trial", "--cmd", GREEDY, "--batch", "2", "--runs-dir", str(tmp_path), "--json")
        assert ceiling.oom_kills >= 1
        killed = under(ceiling, "trial", "--cmd", SELF_KILLED, "--batch", "2", "--runs-dir", str(tmp_path), "--json")
        again = under(
            ceiling, "trial", "--cmd", SELF_KILLED, "--batch", "2", "--runs-dir", str(tmp_path), "--json", "--resume"
        )
    record = json.loads(died.stdout)
    assert (record["status"], record["outcome"]) == ("out_of_memory", "out_of_memory"), died.stdout + died.stderr
    assert "OOM killer" in record["oom_evidence"]
    record = json.loads(killed.stdout)
    assert (record["status"], record["outcome"]) == ("crashed", "crashed"), killed.stdout + killed.stderr
    assert "killed by signal 9" in record["error"] and record["oom_evidence"] is None
    assert not json.loads(again.stdout)["reused"]  # a kill is luck: --resume runs it again


@pytest.mark.ort
@pytest.mark.long
def test_tune_verifies_where_no_config_dies_at_the_target_and_half_of_it(tmp_path: Path) -> None:
    """Under 700 MiB of cgroup memory the no-config run at batch 128 dies (and the one at 64
    mostly does: the cgroup's charge of shared pages varies from run to run); tune still ends
    verified, and the job re-run with the export line under the same ceiling completes."""
    with memory_ceiling(700) as ceiling:
        no_config = under(
            ceiling, "trial", *GPT, "--batch", "128", "--config", "none", "--json", "--runs-dir", str(tmp_path)
        )
        assert json.loads(no_config.stdout)["outcome"] == "out_of_memory", no_config.stdout + no_config.stderr
        summary = tune_under(ceiling, tmp_path)
        assert summary["best"] is not None, summary["message"]  # verified (the search may end at --max-trials)
        export = summary["export"][0].removeprefix("export ")
        name, _, value = export.partition("=")
        job = under(ceiling, "probe", *GPT, "--batch", "128", "--runs-dir", str(tmp_path), env={name: value})
        assert job.returncode == 0, job.stdout + job.stderr
        assert ceiling.oom_kills >= 1


@pytest.mark.ort
@pytest.mark.long
def test_tune_below_every_plan_says_the_largest_batch_a_run_checked(tmp_path: Path) -> None:
    """Under 600 MiB the probe's batch dies without recompute and so does every trial at 128:
    tune answers with a verified config or the largest batch that fits, checked by a run."""
    with memory_ceiling(600) as ceiling:
        summary = tune_under(ceiling, tmp_path)
    assert (64, "out_of_memory") in [(t["batch_size"], t["outcome"]) for t in summary["trials"] if not t["plans"]]
    if summary["best"] is None:
        largest = summary["largest_batch"]
        assert 1 <= largest < 128 and f"fits up to batch {largest}" in summary["message"]
        assert any(t["batch_size"] == largest and t["outcome"] == "ok" for t in summary["trials"])


# What a run under memopt takes a percentage budget of, as memopt's own process sees it.
SHOWS_BUDGET = (
    "from memopt.run.budget import parse_budget, resolve_budget, cpu_device_memory; "
    "print(cpu_device_memory(), resolve_budget(parse_budget('80%'), 'cpu', cpu_device_memory()), resolve_budget(None, 'cpu', cpu_device_memory()))"
)


@pytest.mark.subprocess
def test_a_percentage_budget_is_a_share_of_the_memory_cgroups_limit_not_the_machines_ram() -> None:
    """In a cgroup limited to 600 MiB, and in one without a limit of its own below it (the
    limit above binds it), 80% is 480 MiB and the default budget 90% of 600 MiB."""
    with memory_ceiling(600) as ceiling:
        inner = ceiling.folder / "inner"
        inner.mkdir()
        try:
            for folder in (ceiling.folder, inner):
                shown = subprocess.run(
                    [sys.executable, "-c", SHOWS_BUDGET],
                    capture_output=True,
                    text=True,
                    preexec_fn=lambda folder=folder: (folder / "cgroup.procs").write_text(str(os.getpid())),
                    timeout=120,
                )
                assert shown.returncode == 0, shown.stderr
                assert shown.stdout.split() == [str(600 * MiB), str(480 * MiB), str(int(600 * MiB * 0.9))], folder
        finally:
            inner.rmdir()


@pytest.mark.ort
def test_plan_takes_its_percentage_budget_of_the_cgroups_limit(tmp_path: Path) -> None:
    with memory_ceiling(1500) as ceiling:
        plan = under(
            ceiling, "plan", "gpt", "--size", "tiny", "--target-batch", "4", "--budget", "80%",
            "--runs-dir", str(tmp_path),
        )  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "vs budget 1,200.0 MiB" in plan.stdout, plan.stdout


@pytest.mark.parametrize(
    ("text", "limit"), [("629145600\n", 600 * MiB), ("max\n", None), ("9223372036854771712\n", None)]
)
def test_the_unlimited_values_of_cgroup_v1_and_v2_are_no_limit(tmp_path: Path, text: str, limit: int | None) -> None:
    (tmp_path / "memory.max").write_text(text)
    assert cgroup._limit(tmp_path / "memory.max") == limit


@pytest.mark.usefixtures("simulate_sample_once")
def test_a_repeat_of_a_marginal_calibration_run_that_dies_ends_the_noise_runs(tmp_path: Path) -> None:
    """FAKE runs: no config dies at batch 8 and at the target, and the repeat of the every-plan
    run at batch 8 dies too (its peak pushed over the ceiling): the calibration stops there and the
    search goes on, rather than trying that run for ever."""
    jitter = (0.0, 0.0, 0.0, 1024.0 * MiB, *[0.0] * 40)
    runner = FakeRunner(prepared_gpt(), allocator_scale=1.6, jitter_bytes=jitter)
    every = tuple(p.key for p in runner.prepared.report.patterns)
    runner.oom_above = (runner.peak(8, ()) + runner.peak(8, every)) / 2
    result = fake_tuner(tmp_path, runner, int(runner.oom_above)).auto_search()
    calibration = [(r.batch_size, bool(r.plans), r.outcome) for r in result.trials if r.purpose is Purpose.CALIBRATION]
    assert calibration == [
        (8, False, Outcome.OUT_OF_MEMORY),
        (8, True, Outcome.OK),
        (16, False, Outcome.OUT_OF_MEMORY),
        (8, True, Outcome.OUT_OF_MEMORY),
    ]
    assert result.status is SearchStatus.IMPOSSIBLE, result.message
