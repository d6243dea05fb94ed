"""Jobs that misbehave without training: one that floods its output, one that leaves a daemon.

Real `memopt trial --cmd` runs of real processes (tests/recipes/flood_forever.py,
tests/recipes/forks_a_daemon.py); nothing is faked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support import RECIPES
from support.cli import CliRun, assert_one_line_error, memopt
from support.mounts import tmpfs
from support.processes import running

from memopt.backends.ort import ConfigEntry, OptimizationType, OrtVersion
from memopt.backends.ort.tune.export import ConfigExport, write_config
from memopt.errors import MemoptError
from memopt.run import Journal
from memopt.run.output import HEAD_BYTES, TAIL_BYTES

pytestmark = pytest.mark.subprocess


def flood_command(runs: Path, timeout_s: float) -> tuple[str, ...]:
    """The arguments of a trial of a job that prints without end (and never trains)."""
    job = f"{sys.executable} {RECIPES / 'flood_forever.py'} --batch-size {{batch}}"
    return (
        "trial",
        "--cmd",
        job,
        "--batch",
        "2",
        "--steps",
        "1",
        "--timeout",
        f"{timeout_s:g}",
        "--runs-dir",
        str(runs),
    )


def flood(runs: Path, timeout_s: float) -> CliRun:
    return memopt(*flood_command(runs, timeout_s))


def _largest_process_bytes(args: tuple[str, ...]) -> int:
    """The peak RSS of the largest process ``memopt ARGS`` started or was, read in a process of its own."""
    report = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", report, sys.executable, "-m", "memopt", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return int(done.stdout.strip())


def test_a_job_that_never_stops_printing_keeps_a_bounded_log_and_its_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    run = flood(tmp_path, timeout_s=4)
    took = time.monotonic() - started
    assert run.returncode == 1 and "killed after 4 s" in run.stdout, run.stdout
    assert took < 60, took  # the timeout, the stop's grace and memopt's own start-up (slow on a loaded machine)
    # memopt's own memory (and the flood's) stays far below the output's size: measured in a
    # process of its own, since pytest's own children's figure holds every earlier test's runs.
    assert _largest_process_bytes(flood_command(tmp_path / "again", timeout_s=4)) < 1024 * 2**20
    log = run.log_path
    size = log.stat().st_size
    assert HEAD_BYTES < size <= HEAD_BYTES + TAIL_BYTES + 4096, size
    with open(log, "rb") as handle:
        assert handle.readline().startswith(b"[memopt] $ ")
        handle.seek(HEAD_BYTES)
        middle = handle.read(4096 * 1024)
    assert b"[memopt] output cut: " in middle and b" bytes left out here" in middle
    # stderr holds the back end's line alone (no error, no flood); stdout no traceback.
    assert run.stderr.startswith("backend: ort (") and len(run.stderr.splitlines()) == 1, run.stderr
    assert "Traceback" not in run.stdout


def test_a_forked_daemon_of_the_job_is_gone_when_the_trial_returns(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    started = time.monotonic()
    run = memopt(
        "trial",
        "--cmd",
        f"{sys.executable} {RECIPES / 'forks_a_daemon.py'} {pid_file} --batch-size {{batch}}",
        "--batch",
        "2",
        "--steps",
        "1",
        "--timeout",
        "60",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert run.returncode == 2 and "before ORTModule trained" in run.stderr, run.stderr
    assert time.monotonic() - started < 60  # the daemon holds the job's output open for 120 s
    pid = int(pid_file.read_text())
    assert not running(pid)


def test_plan_never_overwrites_the_users_file_without_force(tmp_path: Path) -> None:
    mine = tmp_path / "train.json"
    mine.write_text('{"my": "precious training config"}')
    mine.chmod(0o644)
    runs = tmp_path / "runs"
    run = memopt("plan", "gpt", "--target-batch", "4", "--out", str(mine), "--runs-dir", str(runs))
    assert_one_line_error(run, f"{mine} exists; pass --force to overwrite it")
    assert mine.read_text() == '{"my": "precious training config"}'
    assert mine.stat().st_mode & 0o777 == 0o644
    assert not runs.exists()  # refused before anything ran


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs, mounted for the test (root only) and unmounted after it."""
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        yield disk


def test_a_run_that_fills_the_disk_says_so_and_leaves_no_temporary_file(small_disk: Path) -> None:
    started = time.monotonic()
    run = flood(small_disk / "runs", timeout_s=120)
    assert time.monotonic() - started < 60  # ended at the full disk, not at its timeout
    assert_one_line_error(run, "the disk is full: cannot write", "ort.log", after_backend_line=True)
    assert not [path for path in small_disk.rglob("*") if path.name.endswith(".tmp")]


def test_the_journal_and_a_config_on_a_full_disk_say_so_and_leave_no_temporary_file(small_disk: Path) -> None:
    (small_disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 4096))  # what a page leaves
    with contextlib.suppress(OSError):
        with open(small_disk / "filler", "ab") as filler:
            filler.write(b"\0" * 8192)
    with pytest.raises(MemoptError, match="the disk is full: cannot write the journal"):
        Journal.in_folder(small_disk).append({"key": "k", "padding": "x" * 8192})
    export = ConfigExport(
        tuple(ConfigEntry(f"Gelu{n}+", OptimizationType.RECOMPUTE) for n in range(400)),
        OrtVersion.parse("1.19.2"),
        small_disk / "cfg.json",
    )
    with pytest.raises(MemoptError, match="the disk is full: cannot write"):
        write_config(export)
    assert sorted(path.name for path in small_disk.iterdir()) == ["filler", "journal.jsonl"]


@pytest.mark.ort
def test_a_recipe_at_any_legal_path_runs(tmp_path: Path) -> None:
    folder = tmp_path / "exp:2024-06"  # a ':' in a .py path is part of the path
    folder.mkdir()
    recipe = folder / f"{'a_very_long_recipe_name_' * 9}x.py"  # 220 characters, a legal file name
    shutil.copy(RECIPES / "user_mlp.py", recipe)
    run = memopt("trial", str(recipe), "--batch", "2", "--steps", "1", "--runs-dir", str(tmp_path / "runs"))
    assert run.returncode == 0, run.stderr
    assert len(run.run_dir.name) < 100


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("-o", "n_layer=0"), ["recipe 'gpt': n_layer must be a whole number of at least 1, not 0"]),
        (("-o", "n_layer=-1"), ["n_layer must be a whole number of at least 1, not -1"]),
        (
            ("-o", "nonexistent=1"),
            ["recipe 'gpt' takes no option nonexistent (its options: n_layer, seq_len, size, tied)"],
        ),
        (("--seq", "0"), ["--seq must be a positive integer, not 0"]),
        (("--bogus",), ["No such option: --bogus"]),
    ],
)
def test_impossible_options_are_refused_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], fragments: list[str]
) -> None:
    runs = tmp_path / "runs"
    run = memopt("trial", "gpt", "--batch", "2", *args, "--runs-dir", str(runs))
    assert_one_line_error(run, *fragments)
    assert not runs.exists() and not run.stdout


def test_a_dim_written_otherwise_than_in_digits_is_named_as_such(tmp_path: Path) -> None:
    run = memopt("scan", "gpt", "--dims", "x=1e29", "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(run, "--dims x=1e29: write a size in digits, a whole number (e.g. x=512)")
    run = memopt("scan", "gpt", "--dims", "x=" + "9" * 30, "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(run, "too large; a size has at most 18 digits")


# A job that only prints an allocator's error, and one that fails with it.
SAYS_OUT_OF_MEMORY = "print('RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB'); raise SystemExit({code})"


@pytest.mark.parametrize(("code", "status"), [(0, "recipe_error"), (1, "out_of_memory")])
def test_out_of_memory_needs_the_job_to_fail_not_just_to_print_it(tmp_path: Path, code: int, status: str) -> None:
    script = tmp_path / "says_oom.py"
    script.write_text(SAYS_OUT_OF_MEMORY.format(code=code))
    command = f"{sys.executable} {script} {{batch}}"
    run = memopt("trial", "--cmd", command, "--batch", "2", "--runs-dir", str(tmp_path / "runs"), "--json")
    said = run.stdout + run.stderr
    record = next(entry.record for entry in Journal.in_folder(tmp_path / "runs").entries())
    assert record["status"] == status, said
    if code == 0:  # what it is: a job that never trained
        assert record["error"].startswith("no ORTModule training step seen: the job exited with status 0")
        assert record["oom_evidence"] is None and "ran out of memory" not in said, said
    else:
        assert "its own failure (exit status 1)" in record["oom_evidence"], record["oom_evidence"]


def test_a_hanging_python_is_ended_at_the_timeout_with_everything_it_started(tmp_path: Path) -> None:
    """A `--python` wrapper script that hangs (its own child sleeps): memopt waits `--timeout`,
    not a fixed two minutes, says so in one line, and no process of the wrapper survives."""
    token = f"600.{os.getpid()}{time.monotonic_ns() % 10**6}"  # names this test's sleep among all processes
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nsleep {token}\n")
    wrapper.chmod(0o755)
    started = time.monotonic()
    run = memopt(
        "trial", "gpt", "--batch", "2", "--python", str(wrapper), "--timeout", "3", "--runs-dir", str(tmp_path / "runs")
    )
    took = time.monotonic() - started
    assert_one_line_error(run, f"--python {wrapper} did not say its ORT/torch versions within 3 s (--timeout)")
    assert took < 60, took
    left = [p.info for p in psutil.process_iter(["pid", "cmdline"]) if token in (p.info["cmdline"] or [])]
    assert left == [], left
