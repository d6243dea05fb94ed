"""Fast unit tests of run folders and ``launch`` (memopt/run/launch.py), with no ORT and no torch.

``launch`` runs ``<python> -m memopt.child REQUEST RESULT``; here ``python`` is a FAKE
interpreter, a shell script that ignores its arguments, so the tests see what ``launch``
does with a child that sleeps, crashes, is killed or writes a result, in milliseconds.
The scripts write their pids to ``$PID_FILE`` (passed through ``RunRequest.env``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memopt.child import CHILD_MODULE
from memopt.core import parse_runnable
from memopt.core.memory import Memory
from memopt.errors import MemoptError
from memopt.run import LOG_NAME, RECORD_NAME, RunRequest, RunResult, RunSettings, launch, new_run_dir
from memopt.run.launch import PACKAGE_ROOT, helper_last_line, step_seconds
from memopt.run.stops import GAP_S, StopWatch

# The child and a grandchild of its own sleep far longer than any test; only a kill ends them early.
SLEEPER = '#!/bin/sh\necho $$ > "$PID_FILE"\nsleep 30 &\necho $! >> "$PID_FILE"\nwait\n'


def fake_python(tmp_path: Path, body: str, name: str = "python") -> Path:
    script = tmp_path / name
    script.write_text(body)
    script.chmod(0o755)
    return script


def sleeper_request(tmp_path: Path, timeout_s: float = 30.0) -> tuple[RunRequest, Path]:
    pid_file = tmp_path / "pids"
    request = RunRequest(
        RunSettings(target=parse_runnable("x"), python=str(fake_python(tmp_path, SLEEPER)), timeout_s=timeout_s),
        1,
        env={"PID_FILE": str(pid_file)},
    )
    return request, pid_file


def read_pids(pid_file: Path) -> list[int]:
    """The pids a sleeper wrote: itself, then its grandchild (waits until both are there)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if pid_file.exists():
            lines = pid_file.read_text().split()
            if len(lines) == 2:
                return [int(line) for line in lines]
        time.sleep(0.02)
    raise AssertionError(f"the fake interpreter did not write two pids to {pid_file}")


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def assert_gone(pids: list[int], within_s: float = 2.0) -> None:
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    running = [pid for pid in pids if alive(pid)]
    for pid in running:  # never leave a sleeper behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not running, f"still running after launch returned: {running}"


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / RECORD_NAME).read_text())


# Run folders


def test_new_run_dir_creates_missing_parents(tmp_path: Path) -> None:
    base = tmp_path / "a" / "b" / "runs"
    run_dir = new_run_dir(base, "probe-gpt")
    assert run_dir.is_dir() and run_dir.parent == base
    assert run_dir.name.startswith("probe-gpt-")


def test_new_run_dir_calls_in_the_same_second_get_different_folders(tmp_path: Path) -> None:
    made = [new_run_dir(tmp_path, "trial") for _ in range(5)]  # well inside one second
    assert len(set(made)) == 5
    assert all(path.is_dir() for path in made)
    stamps = {path.name.removeprefix("trial-")[:15] for path in made}
    if len(stamps) == 1:  # the usual case: suffixes -2, -3, ... on the same stamp
        assert sorted(path.name for path in made)[1:] == sorted(f"{made[0].name}-{n}" for n in range(2, 6))


def test_new_run_dir_never_reuses_an_existing_folder(tmp_path: Path) -> None:
    first = new_run_dir(tmp_path, "x")
    (first / "keep.txt").write_text("earlier run")
    second = new_run_dir(tmp_path, "x")
    assert second != first
    assert (first / "keep.txt").read_text() == "earlier run"
    assert list(second.iterdir()) == []


# launch: timeout and cancel


@pytest.mark.subprocess
def test_timeout_kills_the_child_and_reports_timed_out(tmp_path: Path) -> None:
    request, pid_file = sleeper_request(tmp_path, timeout_s=0.3)
    run_dir = new_run_dir(tmp_path / "runs", "t")
    started = time.monotonic()
    result = launch(request, run_dir)
    elapsed = time.monotonic() - started
    assert result.status == "timed_out"
    assert result.error == "killed after 0.3 s without finishing"
    assert 0.25 < elapsed < 15, elapsed  # far below the sleep: a loaded machine is slow to end it
    assert_gone(read_pids(pid_file))


@pytest.mark.subprocess
def test_timeout_also_applies_while_a_cancel_event_is_watched(tmp_path: Path) -> None:
    request, pid_file = sleeper_request(tmp_path, timeout_s=0.25)
    result = launch(request, new_run_dir(tmp_path / "runs", "t"), threading.Event())
    assert result.status == "timed_out"
    assert_gone(read_pids(pid_file))


@pytest.mark.subprocess
def test_cancel_from_another_thread_kills_child_and_grandchild(tmp_path: Path) -> None:
    request, pid_file = sleeper_request(tmp_path)
    run_dir = new_run_dir(tmp_path / "runs", "c")
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    started = time.monotonic()
    timer.start()
    try:
        result = launch(request, run_dir, cancel)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started
    assert result.status == "cancelled"
    assert result.error and "cancelled" in result.error
    assert result.returncode == -signal.SIGKILL
    assert elapsed < 15, elapsed
    assert_gone(read_pids(pid_file))
    assert record(run_dir)["result"]["status"] == "cancelled"


def test_cancel_already_set_never_starts_the_child(tmp_path: Path) -> None:
    request, pid_file = sleeper_request(tmp_path)
    run_dir = new_run_dir(tmp_path / "runs", "c")
    cancel = threading.Event()
    cancel.set()
    started = time.monotonic()
    result = launch(request, run_dir, cancel)
    assert time.monotonic() - started < 5
    assert result.status == "cancelled"
    time.sleep(0.1)  # a child started by mistake would have written its pid by now
    assert not pid_file.exists()
    assert record(run_dir)["result"]["status"] == "cancelled"
    # Only the log and the record stay: the request/result hand-over files are removed.
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([LOG_NAME, RECORD_NAME])


@pytest.mark.subprocess
def test_run_record_holds_request_and_result(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "#!/bin/sh\nexit 0\n")
    request = RunRequest(
        RunSettings(target=parse_runnable("x"), python=str(python)), 1, env={"A": "1"}, unset_env=("B",)
    )
    run_dir = new_run_dir(tmp_path / "runs", "r")
    result = launch(request, run_dir)
    saved = record(run_dir)
    assert saved["memopt_version"]
    assert saved["request"]["recipe"] == "x"
    assert saved["request"]["batch_size"] == 1
    assert saved["request"]["python"] == request.settings.python
    assert saved["request"]["env"] == {"A": "1"}
    assert saved["request"]["unset_env"] == ["B"]
    assert saved["result"]["status"] == result.status == "crashed"
    assert saved["result"]["run_dir"] == str(run_dir)
    assert saved["result"]["median_step_s"] is None
    assert not (run_dir / ".request.json").exists() and not (run_dir / ".result.json").exists()


# launch: what the child reports, and what it leaves in the log


@pytest.mark.subprocess
def test_child_runs_the_child_module_with_request_and_result_paths(tmp_path: Path) -> None:
    args_file = tmp_path / "args"
    request_copy = tmp_path / "request.json"
    body = f'#!/bin/sh\nprintf "%s\\0" "$@" > {args_file}\ncp "$3" {request_copy}\n'
    python = fake_python(tmp_path, body)
    run_dir = new_run_dir(tmp_path / "runs", "a")
    request = RunRequest(
        RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}, steps=3, python=str(python)), 8
    )
    launch(request, run_dir)
    flag, boot, *paths, _ = args_file.read_text().split("\0")
    # -c, not -m: the working directory must not come first on the child's import path
    assert flag == "-c" and f"run_module({CHILD_MODULE!r}" in boot
    assert paths == [str(run_dir / ".request.json"), str(run_dir / ".result.json")]
    sent = json.loads(request_copy.read_text())
    assert sent == {
        "recipe": "gpt",
        "options": {"size": "tiny"},
        "batch_size": 8,
        "steps": 3,
        "device": "auto",
        "log_level": "INFO",
        "save_onnx": False,
        "backend": "ort",
    }


@pytest.mark.subprocess
def test_child_environment_adds_memopt_variables_and_drops_unset_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMOPT_TEST_DROP", "1")
    monkeypatch.setenv("MEMOPT_TEST_KEEP", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env_file = tmp_path / "env"
    python = fake_python(tmp_path, f"#!/bin/sh\nenv > {env_file}\n")
    run_dir = new_run_dir(tmp_path / "runs", "e")
    request = RunRequest(
        RunSettings(target=parse_runnable("x"), python=str(python)),
        1,
        env={"EXTRA": "yes", "MEMOPT_TEST_KEEP": "overridden"},
        unset_env=("MEMOPT_TEST_DROP",),
        save_onnx=True,
    )
    launch(request, run_dir)
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    assert "MEMOPT_TEST_DROP" not in env
    assert env["MEMOPT_TEST_KEEP"] == "overridden"
    assert env["EXTRA"] == "yes"
    assert env["PYTHONPATH"] == os.pathsep.join(["/elsewhere", PACKAGE_ROOT])  # the caller's path first
    assert env["ORTMODULE_FALLBACK_POLICY"] == "FALLBACK_DISABLE"
    assert env["ORTMODULE_SAVE_ONNX_PATH"] == str(run_dir / "onnx")
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["MEMOPT_PARENT_PID"] == str(os.getpid())  # whom the child's watchdog watches
    assert env["MEMOPT_RUN_DIR"] == str(run_dir.resolve())
    assert (run_dir / "onnx").is_dir()


@pytest.mark.subprocess
def test_child_that_exits_without_a_result_is_crashed_with_its_last_log_line(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "#!/bin/sh\necho starting\necho 'boom: it broke' >&2\nexit 3\n")
    run_dir = new_run_dir(tmp_path / "runs", "x")
    result = launch(RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), run_dir)
    assert result.status == "crashed"
    assert result.returncode == 3
    assert result.error == "the run exited with status 3: boom: it broke"
    assert result.log_path == run_dir / LOG_NAME
    assert result.log_path.read_text() == "starting\nboom: it broke\n"  # stderr goes to the log too


@pytest.mark.subprocess
def test_child_with_no_output_is_crashed_with_no_output(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "#!/bin/sh\nexit 1\n")
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert (result.status, result.error) == ("crashed", "the run exited with status 1: no output")


@pytest.mark.subprocess
def test_child_killed_by_sigkill_without_an_oom_record_is_killed_by_signal_9(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "#!/bin/sh\nkill -9 $$\n")
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert result.status == "crashed"
    assert result.returncode == -signal.SIGKILL
    assert result.error == "the run was killed by signal 9 (SIGKILL)"


@pytest.mark.subprocess
def test_child_killed_by_another_signal_names_it(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "#!/bin/sh\nkill -SEGV $$\n")
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert (result.status, result.error) == ("crashed", "the run was killed by signal 11 (SIGSEGV)")


def write_result_script(tmp_path: Path, reported: dict) -> Path:
    """A fake child that writes ``reported`` as its result (argument 4: the result path)."""
    payload = tmp_path / "reported.json"
    payload.write_text(json.dumps(reported))
    return fake_python(tmp_path, f'#!/bin/sh\ncp {payload} "$4"\n')


@pytest.mark.subprocess
def test_reported_result_is_collected_into_the_run_result(tmp_path: Path) -> None:
    reported = {
        "status": "ok",
        "device": "cuda",
        "stack": {"ort_version": "1.19.2"},
        "steps": {
            "step_times_s": [5.0, 0.2, 0.4, 0.3],
            "losses": [2.0, 1.9, 1.8, 1.7],
            "memory_kind": "cuda_allocated",
            "static_bytes": 100,
            "peak_over_run_bytes": 900,
            "peak_bytes": 800,
            "cuda_reserved_bytes": 1000,
            "cuda_device_name": "Fake GPU",
            "cuda_total_memory": 4096,
        },
    }
    run_dir = new_run_dir(tmp_path / "runs", "ok")
    python = write_result_script(tmp_path, reported)
    result = launch(RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), run_dir)
    assert result.ran
    assert result == RunResult(
        status="ok",
        run_dir=run_dir,
        device="cuda",
        stack={"ort_version": "1.19.2"},
        step_times_s=(5.0, 0.2, 0.4, 0.3),
        losses=(2.0, 1.9, 1.8, 1.7),
        memory=Memory(
            memory_kind="cuda_allocated",
            static_bytes=100,
            peak_over_run_bytes=900,
            peak_bytes=800,
            cuda_reserved_bytes=1000,
        ),
        cuda_device_name="Fake GPU",
        cuda_total_memory=4096,
        wall_s=result.wall_s,
        returncode=0,
    )
    assert result.median_step_s == pytest.approx(0.3)  # the warm-up step [0] is left out
    assert record(run_dir)["result"]["median_step_s"] == pytest.approx(0.3)


@pytest.mark.subprocess
def test_reported_error_status_is_kept(tmp_path: Path) -> None:
    python = write_result_script(tmp_path, {"status": "out_of_memory", "error": "CUDA out of memory"})
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert (result.status, result.error, result.ran) == ("out_of_memory", "CUDA out of memory", False)
    assert result.median_step_s is None


@pytest.mark.subprocess
def test_child_still_running_in_its_report_is_crashed(tmp_path: Path) -> None:
    """A child that wrote ``running`` and then died: its own status is not believed."""
    python = write_result_script(tmp_path, {"status": "running"})
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert result.status == "crashed"
    assert result.error == "the run exited with status 0: no output"


@pytest.mark.subprocess
def test_unreadable_result_file_is_crashed(tmp_path: Path) -> None:
    python = fake_python(tmp_path, '#!/bin/sh\nprintf "{not json" > "$4"\nexit 2\n')
    result = launch(
        RunRequest(RunSettings(target=parse_runnable("x"), python=str(python)), 1), new_run_dir(tmp_path, "x")
    )
    assert result.status == "crashed" and result.returncode == 2


def test_median_step_needs_a_measured_step() -> None:
    one = RunResult(status="ok", run_dir=Path("r"), step_times_s=(3.0,))
    assert one.median_step_s is None
    two = RunResult(status="ok", run_dir=Path("r"), step_times_s=(3.0, 0.5))
    assert two.median_step_s == 0.5


@pytest.mark.subprocess
def test_end_all_runs_ends_every_running_child_and_starts_no_new_one(tmp_path: Path) -> None:
    # In a process of its own: after end_all_runs that process starts no run again.
    request, pid_file = sleeper_request(tmp_path)
    script = f"""
import json, threading, time
from pathlib import Path
from memopt.core import parse_runnable
from memopt.run import RunRequest, RunSettings, end_all_runs, launch, new_run_dir
request = RunRequest(RunSettings(target=parse_runnable("x"), python={request.settings.python!r}), 1, env={dict(request.env)!r})
results = []
worker = threading.Thread(target=lambda: results.append(launch(request, new_run_dir(Path({str(tmp_path)!r}), "a"))))
worker.start()
while not Path({str(pid_file)!r}).exists() or len(Path({str(pid_file)!r}).read_text().split()) < 2:
    time.sleep(0.02)
end_all_runs()
worker.join()
later = launch(request, new_run_dir(Path({str(tmp_path)!r}), "b"))
print(json.dumps([results[0].status, later.status, later.returncode]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["cancelled", "cancelled", None], done.stderr
    assert_gone(read_pids(pid_file))


def test_a_steps_time_leaves_out_the_stopped_stretches_inside_it() -> None:
    stopped = ((10.0, 14.0), (20.0, 21.0))
    # Steps of 5 s ending at 15 (4 s of it stopped), at 22 (1 s stopped), at 30 (none); one that
    # did not say when it ended (an older job hook) is left as it was.
    assert step_seconds([5.0, 5.0, 5.0, 5.0], [15.0, 22.0, 30.0], stopped) == (1.0, 4.0, 5.0, 5.0)


def test_the_stop_watch_counts_the_stretch_memopt_did_not_run() -> None:
    watch = StopWatch(lambda: ())
    watch.tick()
    time.sleep(GAP_S + 0.3)  # as if memopt had been stopped: its loop did not run
    watch.tick()
    watch.tick()
    (start, end), *rest = watch.finish()
    assert not rest and end - start >= GAP_S + 0.3


@pytest.mark.subprocess
def test_a_runs_kernel_peak_is_not_memopts_own() -> None:
    """The kernel keeps a process's peak across exec, and a child starts from its parent's
    memory: a child's reaped peak below memopt's own peak at its start is memopt's, not the
    child's, and is left unmeasured; above it, it is the child's own."""
    script = (
        "import importlib, sys\n"
        "launch = importlib.import_module('memopt.run.launch')\n"
        "held = bytearray(b'1' * (600 << 20))\n"
        "def peak(mib):\n"
        "    child = launch._Process([sys.executable, '-c', f\"x = bytearray(b'1' * ({mib} << 20))\"])\n"
        "    child.wait()\n"
        "    return child.max_rss_bytes\n"
        "print(peak(50), peak(900) >> 20)\n"
    )
    small, large = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert small == "None" and int(large) >= 900


@pytest.mark.subprocess
def test_a_child_s_peak_is_measured_when_memopt_was_started_by_a_large_process(tmp_path: Path) -> None:
    """What started memopt (a notebook, a test runner) may have peaked far above memopt: memopt's
    ``ru_maxrss`` holds that peak, its children do not inherit it, and their exits are measured."""
    memopt_side = tmp_path / "memopt_side.py"
    memopt_side.write_text(
        "import importlib, sys\n"
        "launch = importlib.import_module('memopt.run.launch')\n"
        "child = launch._Process([sys.executable, '-c', 'x = bytearray(b\"1\" * (300 << 20))'])\n"
        "child.wait()\n"
        "print(child.max_rss_bytes and child.max_rss_bytes >> 20)\n"
    )
    large_parent = (
        "import subprocess, sys\n"
        "held = bytearray(b'1' * (1200 << 20))\n"
        "del held\n"
        f"print(subprocess.run([sys.executable, {str(memopt_side)!r}], capture_output=True, text=True, check=True).stdout)\n"
    )
    measured = subprocess.run([sys.executable, "-c", large_parent], capture_output=True, text=True, check=True).stdout
    assert measured.strip() != "None" and 300 <= int(measured) < 1200


@pytest.mark.subprocess
def test_a_short_measuring_helper_answers_its_last_line_or_one_error() -> None:
    assert helper_last_line([sys.executable, "-c", "print('warming'); print(42)"], 60, "measuring") == "42"
    with pytest.raises(MemoptError, match=r"^measuring failed: exit status 1: ValueError: no device$"):
        helper_last_line([sys.executable, "-c", "raise ValueError('no device')"], 60, "measuring")
    with pytest.raises(MemoptError, match=r"ran past 0.5 s"):
        helper_last_line([sys.executable, "-c", "import time; time.sleep(30)"], 0.5, "measuring")
