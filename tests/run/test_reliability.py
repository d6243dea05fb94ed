"""Reliability of what memopt processes share, without ORT: the journal and the model
library under concurrent writers, symlinks, timeouts, the child's own watchdog, the
child's import path, and config files named per tune.

Real files and real processes throughout; the one fake is the trial runner of the two
tuning sessions sharing a runs folder (tests/support/fake_tuning.py, named so).
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
from support.fake_tuning import FakeRunner, MiB, fake_tuner, prepared_gpt
from support.processes import running

from memopt.backends.ort import ConfigEntry, OptimizationType, OrtVersion
from memopt.backends.ort.calibrate import MODEL_FILE, load_saved_model, save_model
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, PlanSavings, fit_memory_model
from memopt.backends.ort.trials import TrialSpec
from memopt.backends.ort.tune.export import ConfigExport, write_config
from memopt.core import parse_runnable
from memopt.errors import MemoptError
from memopt.graph import Polynomial
from memopt.run import Journal, RunRequest, RunSettings, check_timeout
from memopt.run.files import replace_atomically
from memopt.run.launch import _CHILD_BOOT, PACKAGE_ROOT

WRITERS = 6  # threads or processes writing at once
PROCESSES = 2  # of the writers; the rest are threads (a process takes seconds to import memopt)
RECORDS_EACH = 10


def small_model(static_mib: int) -> MemoryModel:
    plan = PlanSavings("A+:1:-1", ("A+",), 1, Polynomial.symbol("batch") * Polynomial.constant(MiB))
    observations = [Observation(2, (), (static_mib + 20) * MiB), Observation(4, (), (static_mib + 40) * MiB)]
    return fit_memory_model(observations, [plan], ("batch",), {})


# -- timeouts -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 0.0, -5.0])
def test_a_timeout_must_be_finite_and_positive(bad: float) -> None:
    with pytest.raises(MemoptError, match="--timeout must be a finite number of seconds above zero"):
        check_timeout(bad)
    with pytest.raises(MemoptError, match="--timeout"):
        RunRequest(RunSettings(target=parse_runnable("x"), timeout_s=bad), 1)
    with pytest.raises(MemoptError, match="--timeout"):
        TrialSpec(RunSettings(target=parse_runnable("x"), timeout_s=bad), 1)


# -- the journal --------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_and_the_next_record_kept(tmp_path: Path) -> None:
    journal = Journal.in_folder(tmp_path)
    journal.append({"key": "a", "n": 1})
    with open(journal.path, "a") as handle:
        handle.write('{"key": "torn", "n"')  # the writer died mid-line
    journal.append({"key": "b", "n": 2})
    assert [e.key for e in journal.entries()] == ["a", "b"]


def _append_many(folder: str, writer: int) -> None:
    journal = Journal.in_folder(folder)
    for n in range(RECORDS_EACH):
        journal.append({"key": f"{writer}-{n}", "padding": "x" * 5000})


@pytest.mark.subprocess
def test_concurrent_threads_and_processes_appending_keep_every_line_whole(tmp_path: Path) -> None:
    script = "import sys; from memopt.run.journal import Journal; journal = Journal.in_folder(sys.argv[1])\n"
    script += (
        f"for n in range({RECORDS_EACH}): journal.append({{'key': f'{{sys.argv[2]}}-{{n}}', 'padding': 'x' * 5000}})"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(w)], cwd=PACKAGE_ROOT)
        for w in range(PROCESSES)
    ]
    threads = [threading.Thread(target=_append_many, args=(str(tmp_path), w)) for w in range(PROCESSES, WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(p.wait(timeout=120) == 0 for p in processes)
    keys = [e.key for e in Journal.in_folder(tmp_path).entries()]
    assert sorted(keys) == sorted(f"{w}-{n}" for w in range(WRITERS) for n in range(RECORDS_EACH))
    assert len(Journal.in_folder(tmp_path).path.read_text().splitlines()) == WRITERS * RECORDS_EACH


def test_the_journal_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    journal = Journal.in_folder(tmp_path / "runs")
    journal.path.parent.mkdir()
    journal.path.symlink_to(victim)
    with pytest.raises(MemoptError, match="is a symlink"):
        journal.check_writable()
    with pytest.raises(MemoptError, match="is a symlink"):
        journal.append({"key": "a"})
    assert victim.read_text() == "keep me\n"


def test_a_read_only_journal_is_refused_before_a_trial_runs(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only files")
    journal = Journal.in_folder(tmp_path)
    journal.append({"key": "a"})
    journal.path.chmod(0o444)
    with pytest.raises(MemoptError, match="cannot write the journal"):
        journal.check_writable()


# -- the model library and atomic files ----------------------------------------------------


def _save_many(folder: str, writer: int) -> None:
    for n in range(RECORDS_EACH):
        save_model(Path(folder), f"model-{writer}-{n}", small_model(100 + n))


@pytest.mark.subprocess
def test_concurrent_threads_and_processes_lose_no_model(tmp_path: Path) -> None:
    here = Path(__file__).parent  # this module's folder; ``support`` lies in the folder above
    script = f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
    script += "from test_reliability import _save_many; _save_many(sys.argv[1], int(sys.argv[2]))"
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(w)], cwd=PACKAGE_ROOT)
        for w in range(PROCESSES)
    ]
    threads = [threading.Thread(target=_save_many, args=(str(tmp_path), w)) for w in range(PROCESSES, WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(p.wait(timeout=120) == 0 for p in processes)
    saved = json.loads((tmp_path / MODEL_FILE).read_text())
    assert set(saved) == {f"model-{w}-{n}" for w in range(WRITERS) for n in range(RECORDS_EACH)}
    assert load_saved_model(tmp_path, "model-0-3") is not None
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temp file left


def test_atomic_replacement_refuses_a_symlink_instead_of_writing_through_or_over_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    target = tmp_path / "config.txt"
    target.symlink_to(victim)
    with pytest.raises(MemoptError, match="is a symlink; memopt writes only to a regular file or a new path"):
        replace_atomically(target, "new\n")
    assert victim.read_text() == "keep me\n"
    assert target.is_symlink() and target.readlink() == victim


# -- the child's guard and import path ------------------------------------------------------


def _wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.subprocess
def test_a_guarded_child_ends_itself_when_its_parent_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    child = (
        "import os, time; from memopt.child.watchdog import guard; guard(os.getppid(), 600); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    parent = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True); time.sleep(600)"
    )
    process = subprocess.Popen([sys.executable, "-c", parent], cwd=PACKAGE_ROOT)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    process.kill()  # kill -9: the parent ends nothing itself
    process.wait()
    assert _wait_gone(child_pid, 10), "the child outlived its killed parent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.subprocess
def test_a_guarded_child_ends_itself_past_its_timeout(tmp_path: Path) -> None:
    script = (
        "import os, time; from memopt.child import watchdog; watchdog.GRACE_S = 0.0; "
        "watchdog.guard(os.getppid(), 0.3); time.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=PACKAGE_ROOT, start_new_session=True)
    assert child.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.subprocess
def test_the_child_does_not_import_modules_lying_in_the_working_directory(tmp_path: Path) -> None:
    ran = tmp_path / "stray-module-ran"
    (tmp_path / "json.py").write_text(f"open({str(ran)!r}, 'w').close()\nraise SystemExit('stray json.py ran')\n")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_BOOT, str(tmp_path / "missing-request.json"), str(tmp_path / "result.json")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not ran.exists(), done.stderr
    assert "missing-request.json" in done.stderr  # memopt's child ran (and found no request)


# -- two sessions in one runs folder --------------------------------------------------------


@pytest.mark.usefixtures("simulate_sample_once")
def test_two_tuning_sessions_in_one_folder_each_export_the_config_they_verified(tmp_path: Path) -> None:
    """Tuner level, over the FAKE runner: two budgets, two verified configs, two files."""
    runners = [FakeRunner(prepared_gpt()), FakeRunner(prepared_gpt())]
    # One budget only the best single plan meets, one just under the no-config peak.
    single = min(runners[0].peak(16, (p.key,)) for p in runners[0].prepared.report.patterns)
    budgets = [int(single), int(runners[0].peak(16, ())) - 1]
    tuners = [fake_tuner(tmp_path, runner, budget) for runner, budget in zip(runners, budgets, strict=True)]
    results: list[object] = [None, None]

    def search(index: int) -> None:
        results[index] = tuners[index].auto_search()
        best = tuners[index].best()
        assert best is not None
        tuners[index].write_export_file(best.plans)

    threads = [threading.Thread(target=search, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    verified = []
    for tuner in tuners:
        best = tuner.best()
        assert best is not None
        line = tuner.export_lines()[0]
        path = Path(line.split("=", 1)[1].strip("'"))
        assert json.loads(path.read_text()) == [str(e) for e in tuner.entries(best.plans)]
        verified.append((best.plans, path))
    assert verified[0][0] != verified[1][0] and verified[0][1] != verified[1][1]


def test_a_config_written_over_a_file_keeps_its_mode_and_refuses_without_overwrite(tmp_path: Path) -> None:
    version = OrtVersion.parse("1.19.2")
    target = tmp_path / "cfg.json"
    target.write_text("[]")
    target.chmod(0o640)
    export = ConfigExport((ConfigEntry("Gelu+", OptimizationType.RECOMPUTE),), version, target)
    with pytest.raises(MemoptError, match="exists; pass --force"):
        write_config(export, overwrite=False)
    assert target.read_text() == "[]"
    write_config(export, overwrite=True)
    assert json.loads(target.read_text()) == ["Gelu+:1:-1"]
    assert target.stat().st_mode & 0o777 == 0o640
    fresh = write_config(ConfigExport(export.entries, version, tmp_path / "new.json"), overwrite=False)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~current_umask()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
