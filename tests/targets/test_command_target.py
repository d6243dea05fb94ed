"""Command targets without ORTModule: names, interpreters, and real jobs that fail, hang or finish.

The jobs here are real subprocesses (sh, python); none imports ORT, so they run in seconds.
``fake_rank_job`` stands in for a job's ranks where a test needs ranks without ORTModule:
it writes the hook's step lines itself, then waits at its last step as the hook does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, memopt
from support.processes import assert_gone

from memopt.backends.ort.predict.memory_model import Observation, fit_memory_model
from memopt.core import RunStatus, command_target
from memopt.core.trial import Outcome, TrialResult
from memopt.errors import MemoptError
from memopt.run.command import run_target
from memopt.run.launch import RunRequest, new_run_dir
from memopt.run.settings import RunSettings


def test_command_target_round_trip_and_placeholder() -> None:
    target = command_target("  torchrun --nproc_per_node 2 train.py --batch-size {batch} ")
    assert target.line == "torchrun --nproc_per_node 2 train.py --batch-size {batch}"
    assert target.has_batch_placeholder and not target.fixed_batch
    assert target.render(16).endswith("--batch-size 16")
    assert command_target("python train.py").fixed_batch
    assert target.label == "train"
    assert command_target("./run.sh --x").label == "run"
    with pytest.raises(MemoptError, match="--cmd needs a command"):
        command_target("   ")


def test_job_python_follows_python_programs_and_shebangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert command_target(f"{sys.executable} train.py").python() == sys.executable
    launcher = tmp_path / "launch"
    launcher.write_text(f"#!{sys.executable}\nprint('hi')\n")
    launcher.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert command_target("launch --nproc 2 train.py").python() == sys.executable
    assert command_target("FOO=1 launch train.py").python() == sys.executable
    assert command_target("sh -c true").python() is None
    assert command_target("no-such-program-here x").python() is None


def test_command_identity_follows_script_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("a = 1\n")
    target = command_target("python train.py --batch-size {batch}")
    before = target.identity()
    script.write_text("a = 2\n")
    assert target.identity() != before
    assert str(tmp_path) in before


def test_single_batch_model_predicts_its_batch() -> None:
    model = fit_memory_model([Observation(6, (), 1000)], (), ("b",), {}, single_batch=True)
    assert model.predict(6, ()).peak_bytes == pytest.approx(1000)
    with pytest.raises(MemoptError):
        fit_memory_model([Observation(6, (), 1000)], (), ("b",), {})


def test_trial_record_keeps_ranks() -> None:
    result = TrialResult(
        key="k",
        target=command_target("python t.py"),
        options={},
        batch_size=2,
        config=(),
        config_value=None,
        outcome=Outcome.OK,
        status=RunStatus.OK,
        run_dir="r",
        steps=2,
        ranks=({"rank": 0, "peak_bytes": 5}, {"rank": 1, "peak_bytes": 7}),
    )
    record = result.to_record()
    assert record["ranks"] == [{"rank": 0, "peak_bytes": 5}, {"rank": 1, "peak_bytes": 7}]
    back = TrialResult.from_record(record, "test journal line")
    assert back is not None and back.ranks == result.ranks


def _run(tmp_path: Path, command: str, *, timeout_s: float = 60, cancel: threading.Event | None = None, steps: int = 2):
    request = RunRequest(RunSettings(target=command_target(command), steps=steps, timeout_s=timeout_s), 2)
    return run_target(request, new_run_dir(tmp_path, "job"), cancel)


@pytest.mark.subprocess
def test_command_not_found_names_it(tmp_path: Path) -> None:
    run = _run(tmp_path, "no-such-trainer --batch-size {batch}")
    assert run.status == "recipe_error"
    assert "no ORTModule training step seen" in (run.error or "") and "not found" in (run.error or "")


@pytest.mark.subprocess
def test_job_without_ortmodule_says_so(tmp_path: Path) -> None:
    run = _run(tmp_path, f"{sys.executable} -c \"print('training without ORTModule')\"")
    assert run.status == "recipe_error"
    assert "no ORTModule training step seen" in (run.error or "")
    assert "training without ORTModule" in (run.error or "")


@pytest.mark.subprocess
def test_timeout_ends_the_whole_group_with_the_last_output(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    command = f"echo loading data; sleep 60 & echo $! > {pid_file}; wait"
    run = _run(tmp_path, command, timeout_s=1.5)
    assert run.status == "timed_out"
    assert "no ORTModule training step seen" in (run.error or "") and "loading data" in (run.error or "")
    assert_gone(int(pid_file.read_text()))


@pytest.mark.subprocess
def test_cancel_ends_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    run = _run(tmp_path, f"sleep 60 & echo $! > {pid_file}; wait", cancel=cancel)
    assert run.status == "cancelled"
    assert_gone(int(pid_file.read_text()))


FAKE_RANK = textwrap.dedent(
    """
    import json, os, sys, time
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    for step in range(1, int(os.environ["MEMOPT_JOB_STEPS"]) + 2):
        line = {"event": "step", "rank": rank, "world_size": world, "pid": os.getpid(), "step": step,
                "time_s": 0.1, "device": "cpu", "memory_kind": "rss", "peak_bytes": 1000 * (rank + 1) + step,
                "peak_over_run_bytes": 5000, "static_bytes": 100}
        with open(os.environ["MEMOPT_JOB_STEPS_FILE"], "a") as out:
            out.write(json.dumps(line) + "\\n")
    time.sleep(120)  # as the hook does: wait at the last step for memopt to end the job
    """
)


@pytest.mark.subprocess
def test_fake_rank_job_ends_once_every_rank_reported(tmp_path: Path) -> None:
    script = tmp_path / "fake_rank_job.py"
    script.write_text(FAKE_RANK)
    run = _run(tmp_path, f"{sys.executable} {script} 0 2 & {sys.executable} {script} 1 2 & wait")
    assert run.status == "ok", run.error
    assert [r["rank"] for r in run.ranks] == [0, 1]
    assert run.memory.peak_bytes == 2003  # the highest rank's peak over the measured steps
    assert run.step_times_s == (0.1, 0.1, 0.1)
    for rank in run.ranks:
        assert_gone(int(rank["pid"]))


@pytest.mark.subprocess
def test_cli_rejects_a_recipe_and_a_command_together(tmp_path: Path) -> None:
    run = memopt("trial", "gpt", "--cmd", "python t.py", "--batch", "2", "--runs-dir", str(tmp_path))
    assert_one_line_error(run, "not both")


@pytest.mark.subprocess
def test_cli_trial_after_double_dash_runs_the_command(tmp_path: Path) -> None:
    run = memopt("trial", "--batch", "2", "--runs-dir", str(tmp_path), "--", "sh", "-c", "echo plain job")
    note, backend, error = run.stderr.strip().splitlines()
    assert note.startswith("note: the command has no {batch}")
    assert backend.startswith("backend: ort (")
    assert_one_line_error(
        replace(run, stderr=error), "the training command failed", "no ORTModule training step seen", "plain job"
    )


@pytest.mark.subprocess
def test_job_ends_itself_when_memopt_is_gone(tmp_path: Path) -> None:
    """memopt killed outright cannot end the job's group: the hook in each process does."""
    from memopt.run.command import HOOK_PATH
    from memopt.run.launch import PACKAGE_ROOT

    stand_in = subprocess.Popen(["sleep", "1"])  # plays memopt: gone after a second
    env = {
        **os.environ,
        "PYTHONPATH": HOOK_PATH,
        "MEMOPT_PACKAGE_ROOT": PACKAGE_ROOT,
        "MEMOPT_JOB_STEPS_FILE": str(tmp_path / "steps.jsonl"),
        "MEMOPT_PARENT_PID": str(stand_in.pid),
    }
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    stand_in.wait()
    assert job.wait(timeout=15) == 1


@pytest.mark.subprocess
def test_every_process_of_the_job_ends_when_memopt_is_killed_outright(tmp_path: Path) -> None:
    """kill -9 of memopt: the guard that leads the job's group ends it, shell and all."""
    pid_file = tmp_path / "pid"
    memopt_run = subprocess.Popen(
        [sys.executable, "-m", "memopt", "trial", "--batch", "2", "--runs-dir", str(tmp_path / "runs")]
        + ["--timeout", "120", "--cmd", f"sleep 60 & echo $! > {pid_file}; wait"],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    memopt_run.kill()
    memopt_run.wait()
    assert_gone(int(pid_file.read_text()))


@pytest.mark.subprocess
def test_a_timed_out_job_leaves_no_worker_in_a_session_of_its_own(tmp_path: Path) -> None:
    """torchrun starts each worker in a new session, out of reach of the job's group: the
    worker's start-up hook ends it once its launcher is gone."""
    pid_file = tmp_path / "pid"
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(worker.pid))\n"
        "time.sleep(120)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "memopt", "trial", "--batch", "2", "--runs-dir", str(tmp_path / "runs")]
        + ["--timeout", "10", "--cmd", f"{sys.executable} {launcher}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "killed after 10 s" in run.stdout + run.stderr, run.stdout + run.stderr
    assert_gone(int(pid_file.read_text()))


@pytest.mark.subprocess
def test_ctrl_c_in_trial_ends_the_job(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    memopt_run = subprocess.Popen(
        [sys.executable, "-m", "memopt", "trial", "--batch", "2", "--runs-dir", str(tmp_path / "runs")]
        + ["--cmd", f"sleep 60 & echo $! > {pid_file}; wait"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    memopt_run.send_signal(signal.SIGINT)
    _, stderr = memopt_run.communicate(timeout=30)
    assert memopt_run.returncode == 130 and "Traceback" not in stderr
    assert_gone(int(pid_file.read_text()))


@pytest.mark.subprocess
def test_an_inherited_config_is_named_as_text_not_markup(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "memopt", "trial", "--batch", "2", "--runs-dir", str(tmp_path / "runs")]
        + ["--timeout", "60", "--cmd", "true"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ORTMODULE_MEMORY_OPT_CONFIG": "[/x]"},
    )
    assert "ORTMODULE_MEMORY_OPT_CONFIG=[/x] from your environment is not used" in run.stderr
    assert "Traceback" not in run.stderr
