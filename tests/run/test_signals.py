"""Stopping memopt during a hanging trial leaves no process of that run behind.

Real subprocesses: `memopt trial` and `memopt tune --no-tui` on a recipe whose second
training step hangs (tests/recipes/hangs_after_first_step.py), stopped with SIGKILL,
SIGTERM or SIGINT once the step hangs. Every process of the run carries an environment
marker the test sets; after the signal none may remain (zombies waiting for their reaper
count as gone) within 10 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support import RECIPES

from memopt.run.launch import RUN_DIR_VAR
from memopt.run.marked import marked_pids
from memopt.step_lines import WARM_UP_DONE

pytestmark = pytest.mark.ort  # real ORTModule steps in the children

RECIPE = str(RECIPES / "hangs_after_first_step.py")
MARK_VAR = "MEMOPT_TEST_SIGNAL_MARK"
GONE_WITHIN_S = 10.0
TRIAL = ("trial", RECIPE, "--batch", "2", "--budget", "16GiB", "--steps", "1")
# The probe and the calibration trial at batch 2 finish; the one at batch 4 hangs.
TUNE = ("tune", RECIPE, "--target-batch", "8", "--budget", "16GiB", "--no-tui", "--calibrate", "2,4", "--steps", "1")


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path, str]:
    """Start memopt with ``args``; returns it, the file the hanging step writes, and the marker."""
    marker, mark = tmp_path / "hanging", uuid.uuid4().hex
    env = {**os.environ, MARK_VAR: mark, "MEMOPT_TEST_HANG_MARKER": str(marker), "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "memopt", *args, "--runs-dir", str(tmp_path / "runs"), "--timeout", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the signal reaches memopt alone, as `kill PID` would
    )
    return process, marker, mark


def wait_until_hanging(process: subprocess.Popen[str], marker: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        if process.poll() is not None:
            raise AssertionError(f"memopt ended before the step hung:\n{process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the trial never reached its hanging step")
        time.sleep(0.2)


def processes_of(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark`` (zombies do not count), from /proc."""
    wanted = f"{MARK_VAR}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def assert_run_ends(mark: str) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    left = processes_of(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_of(mark)
    lines = [command_line(pid) for pid in left]
    for pid in left:  # leave nothing behind for the next test, then fail
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"still running {GONE_WITHIN_S:g} s after the signal: {lines}"


@pytest.mark.parametrize("command", [TRIAL, pytest.param(TUNE, marks=pytest.mark.long)], ids=["trial", "tune"])
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_stopping_memopt_during_a_hanging_trial_leaves_no_process(
    tmp_path: Path, command: tuple[str, ...], stop: signal.Signals
) -> None:
    extra = ("-o", "hang_at=4") if command is TUNE else ()
    process, marker, mark = start(tmp_path, *command, *extra)
    wait_until_hanging(process, marker)
    assert len(processes_of(mark)) >= 2  # memopt and the trial's child
    process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    assert_run_ends(mark)
    if stop is signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
        return
    assert process.returncode == 128 + stop, (out, err)
    last = err.strip().splitlines()[-1]
    assert last == f"interrupted by {stop.name}: every process memopt started for this command was ended", err
    assert "Traceback" not in err


def warm_up_started(runs: Path) -> Path | None:
    """The run folder whose child is in its warm-up step: ORTModule has started exporting the model."""
    for log in runs.glob("trial-*/ort.log"):
        if "do_export started" in log.read_text(errors="replace"):
            return log.parent
    return None


@pytest.mark.parametrize("stopped", ["memopt", "the job"])
@pytest.mark.long
def test_a_stop_during_the_warm_up_step_is_not_its_time(tmp_path: Path, stopped: str) -> None:
    """SIGSTOP for 8 s in the warm-up step, of memopt (its child then blocks on the full pipe of
    its output) or of the child itself: the step's recorded time leaves the stop out."""
    runs = tmp_path / "runs"
    memopt = subprocess.Popen(
        [sys.executable, "-m", "memopt", "trial", "gpt", "--size", "tiny", "--batch", "2", "--json"]
        + ["--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while (run_dir := warm_up_started(runs)) is None:
        assert memopt.poll() is None and time.monotonic() < deadline, memopt.communicate()
        time.sleep(0.01)
    target = memopt.pid if stopped == "memopt" else marked_pids(RUN_DIR_VAR, str(run_dir.resolve()))[0]
    os.kill(target, signal.SIGSTOP)
    time.sleep(8)
    os.kill(target, signal.SIGCONT)
    out, err = memopt.communicate(timeout=300)
    assert memopt.returncode == 0, err
    warm_up = json.loads(out)["step_times_s"][0]
    # The child's own clock for the step, stop included (both ways the child waits out the 8 s);
    # compared with it, not with a fixed figure, because a loaded machine stretches the step itself.
    log = (run_dir / "ort.log").read_text(errors="replace")
    step_1 = WARM_UP_DONE.search(log)
    assert step_1 is not None
    on_the_childs_clock = float(log[step_1.end() :].split(" s", 1)[0])
    assert warm_up <= on_the_childs_clock - 7.5, (warm_up, on_the_childs_clock)
    recorded = json.loads((run_dir / "run.json").read_text())["result"]
    assert recorded["stopped_s"] >= 7.5, recorded["stopped_s"]  # said in the run's record
