"""The user's own training command as a target: run as is, every rank measured.

A command target (``memopt.core.Command``, spec ``cmd:torchrun … train.py --batch-size
{batch}``) is kept by journals, models and settings as a recipe is. memopt runs it through
``/bin/sh -c`` in the caller's working directory with only environment variables added: the trial's memory-optimizer variables, ORTModule's log level
(its Plan table), its graphs' folder, and a start-up hook on ``PYTHONPATH``
(``memopt.child.hook``) that counts steps on every rank and reports them into the run
folder's ``steps.jsonl``. After its last step each rank leaves by a normal interpreter exit,
so the job ends as it would by hand (atexit handlers, finalizers, module teardown) and its
peak RSS up to that end is read from the kernel's accounting when it is reaped (CPU). A job
that does not end within a grace period has its whole process group ended, its exit then
not measured.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import memopt
import memopt.child
from memopt.child import (
    HOOK_DIR,
    JOB_PACKAGE_ROOT_VAR,
    JOB_SAVE_ONNX_VAR,
    JOB_STEPS_FILE_VAR,
    JOB_STEPS_VAR,
    OOM_MARKERS,
    PARENT_PID_VAR,
    RUN_DIR_VAR,
    TIMEOUT_VAR,
    TRAINING_EVENTS,
)
from memopt.core import Command, RunStatus
from memopt.core.memory import Memory
from memopt.run.explain import explain_failure
from memopt.run.launch import (
    ONNX_DIR,
    PACKAGE_ROOT,
    RECORD_NAME,
    Ending,
    ProcessEnd,
    RunRequest,
    RunResult,
    launch,
    note_in_log,
    run_process,
    step_seconds,
    write_new,
)
from memopt.run.output import full_disk_in, last_lines

__all__ = ["STEPS_FILE", "run_target"]

STEPS_FILE = "steps.jsonl"
HOOK_PATH = str(Path(memopt.child.__file__).resolve().parent / HOOK_DIR)
# Lines of the job's output an error quotes.
_TAIL_LINES = 6
# How much of the log's end is searched for the failing rank's error.
_FAILURE_BYTES = 1 << 20


def run_target(request: RunRequest, run_dir: Path, cancel: threading.Event | None = None) -> RunResult:
    """Run the request's target: the user's command as is, or a recipe in memopt's child process."""
    if isinstance(request.settings.target, Command):
        return _run_command(request, run_dir, cancel)
    return launch(request, run_dir, cancel)


def _run_command(request: RunRequest, run_dir: Path, cancel: threading.Event | None) -> RunResult:
    """Run the command until every rank has reported warm-up + ``steps`` steps, then end it."""
    settings = request.settings
    assert isinstance(settings.target, Command)
    steps_file = run_dir / STEPS_FILE
    command = settings.target.render(request.batch_size)
    log = run_dir / request.log_name
    write_new(log, f"[memopt] $ {command}\n")
    if request.save_onnx:
        (run_dir / ONNX_DIR).mkdir(exist_ok=True)
    wanted = settings.steps + 1
    end = run_process(
        [sys.executable, "-S", "-c", _GUARD_BOOT, command],
        run_dir,
        _job_env(request, run_dir),
        timeout_s=settings.timeout_s,
        cancel=cancel,
        done=lambda: _all_ranks_done(_read_steps(steps_file), wanted),
        cwd=Path.cwd(),
        log_name=request.log_name,
    )
    records = _read_steps(steps_file)
    status, error, oom = _status(records, wanted, end, log, settings.timeout_s, request.backend)
    result = replace(_result(records, status, error, run_dir, end), oom_evidence=oom, log_name=request.log_name)
    if status.ran and end.ending is Ending.EXITED:
        result = replace(result, memory=result.memory.with_exit_peak(end.max_rss_bytes))
    elif status.ran:
        note_in_log(
            run_dir,
            "[memopt] the job did not end by itself after its last step: memopt ended it, so its exit "
            "(atexit, finalizers) is not measured\n",
            request.log_name,
        )
    write_new(
        run_dir / RECORD_NAME,
        json.dumps(
            {
                "memopt_version": memopt.__version__,
                "request": {"command": command, "batch_size": request.batch_size, "steps": settings.steps},
                "result": {
                    "status": status,
                    "error": error,
                    "ranks": list(result.ranks),
                    "exit_peak_bytes": result.memory.exit_peak_bytes,
                    "wall_s": end.wall_s,
                },
            },
            indent=2,
            default=str,
        ),
    )
    return result


# The job runs under a small guard process that leads its process group: ``-S`` keeps the
# start-up hook out of it. The guard ends the group when memopt dies without ending it
# (``kill -9``) or the run outlives its timeout (``memopt.child.watchdog``), a shell runs the
# command, and the guard exits as the shell did. Stop signals reach every process of the group
# at once, so the guard only waits for the shell to act on them.
_GUARD_BOOT = f"""\
import os, signal, subprocess, sys
sys.path.insert(0, {PACKAGE_ROOT!r})
from memopt.child.watchdog import guard
guard(int(os.environ[{PARENT_PID_VAR!r}]), float(os.environ[{TIMEOUT_VAR!r}]), parent_death_signal=False)
for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(stop, lambda signum, frame: None)
code = subprocess.call(["/bin/sh", "-c", sys.argv[1]])
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _job_env(request: RunRequest, run_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in request.unset_env}
    env.update(request.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_PATH, env.get("PYTHONPATH", "")) if p)
    env[JOB_PACKAGE_ROOT_VAR] = PACKAGE_ROOT
    env[JOB_STEPS_FILE_VAR] = str((run_dir / STEPS_FILE).resolve())
    env[JOB_STEPS_VAR] = str(request.settings.steps)
    env[PARENT_PID_VAR] = str(os.getpid())
    env[TIMEOUT_VAR] = repr(float(request.settings.timeout_s))
    env[RUN_DIR_VAR] = str(run_dir.resolve())
    env[JOB_SAVE_ONNX_VAR] = "1" if request.save_onnx else "0"
    env["ORTMODULE_LOG_LEVEL"] = request.log_level
    env["ORTMODULE_SAVE_ONNX_PATH"] = str((run_dir / ONNX_DIR).resolve())
    # A run that silently fell back to PyTorch would measure the wrong thing.
    env["ORTMODULE_FALLBACK_POLICY"] = "FALLBACK_DISABLE"
    if request.cuda:
        env["ORTMODULE_PRINT_MEMORY_STATS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _read_steps(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(record, dict):
            records.append(record)
    return records


def _all_ranks_done(records: list[dict[str, Any]], wanted: int) -> bool:
    steps = [r for r in records if r.get("event") == "step"]
    if not steps:
        return False
    # Ranks on other hosts write their own host's file; they stop at the same step as these.
    world = max(int(r.get("local_world_size") or r.get("world_size") or 1) for r in steps)
    finished = {r.get("rank") for r in steps if int(r.get("step") or 0) >= wanted}
    return len(finished) >= world


# What each back end waits for in a job, as its messages say it: the first training step, and
# what a job that never trained did not do.
_NO_STEP = {
    "ort": ("no ORTModule training step seen", "before ORTModule trained"),
    "torch": (
        "no training step of a model passed to memopt.recompute.apply seen",
        "without training one (the script must pass the model it trains to memopt.recompute.apply)",
    ),
}


def _status(
    records: list[dict[str, Any]], wanted: int, end: ProcessEnd, log: Path, timeout_s: float, backend: str
) -> tuple[RunStatus, str | None, str | None]:
    """The job's status, its error, and (out of memory) the evidence: the kernel's OOM record, or
    the job's own failure (an exit status above 0) with an allocator's error in what it said. A
    line the job printed is no evidence by itself: a job that exits 0, or that someone killed,
    did not fail for want of memory. A rank killed by SIGKILL with neither was killed by someone else."""
    ending, returncode = end.ending, end.returncode
    steps = [r for r in records if r.get("event") == "step"]
    if ending is Ending.DONE or _all_ranks_done(records, wanted):
        return RunStatus.OK, None, None
    if ending is Ending.CANCELLED:
        return RunStatus.CANCELLED, "cancelled: the job's process group was ended", None
    tail = _tail(log)
    said = _failure(log) or tail
    seen = any(r.get("event") == TRAINING_EVENTS[backend] for r in records)
    reached = max((int(r.get("step") or 0) for r in steps), default=0)
    no_step, never_trained = _NO_STEP[backend]
    progress = f"reached step {reached} of {wanted}" if seen else no_step
    if ending is Ending.NOT_STARTED:
        return RunStatus.RECIPE_ERROR, f"the command could not start: {tail}", None
    if ending is Ending.TIMED_OUT:
        return RunStatus.TIMED_OUT, f"killed after {timeout_s:g} s: {progress}; last output: {tail}", None
    if end.oom_evidence is not None:
        return RunStatus.OUT_OF_MEMORY, f"the job ran out of memory ({progress}): {end.oom_evidence}", end.oom_evidence
    failed = returncode is not None and returncode > 0
    if failed and any(marker in said.lower() for marker in OOM_MARKERS):
        evidence = f"its own failure (exit status {returncode}): {said}"
        return RunStatus.OUT_OF_MEMORY, f"the job ran out of memory ({progress}): {said}", evidence
    # torchrun reports a worker's SIGKILL as "Signal 9 (SIGKILL)" and exits 1.
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL) or "signal 9 (sigkill)" in tail.lower():
        return RunStatus.CRASHED, f"the job was killed by signal 9 (SIGKILL) ({progress}): {tail}", None
    if not seen:
        # A job that ended by itself failed at nothing: its last output is quoted as that, not as a cause.
        cause = f"; its last output: {said}" if returncode == 0 else f": {said}"
        return RunStatus.RECIPE_ERROR, f"{progress}: the job {_exit_words(returncode)} {never_trained}{cause}", None
    if returncode == 0:
        return (
            RunStatus.RECIPE_ERROR,
            f"the job ended by itself after {reached} training steps; memopt measures {wanted} (a warm-up step "
            f"and --steps {wanted - 1}): raise the job's own step count (its max steps, epochs or data) "
            f"to {wanted} or more",
            None,
        )
    return RunStatus.STEP_ERROR, f"the job {_exit_words(returncode)} ({progress}): {said}", None


def _exit_words(returncode: int | None) -> str:
    if returncode is None:
        return "did not start"
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}" if -returncode in signal.valid_signals() else "died"
    return f"exited with status {returncode}"


def _failure(log: Path) -> str | None:
    """The failing rank's own error, read from the log's end (where a failure's tracebacks are)."""
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - _FAILURE_BYTES))
            return explain_failure(file.read().decode(errors="replace"))
    except OSError:
        return None


def _tail(log: Path) -> str:
    lines = [line for line in last_lines(log, 4 * _TAIL_LINES) if not line.startswith("[memopt]")]
    tail = " | ".join(line[:200] for line in lines[-_TAIL_LINES:]) or "no output"
    return f"the disk is full: {tail}" if full_disk_in(lines) else tail


def _result(
    records: list[dict[str, Any]],
    status: RunStatus,
    error: str | None,
    run_dir: Path,
    end: ProcessEnd,
) -> RunResult:
    """Rank 0's timings (less the stretches in which memopt or the job was stopped), the peak
    over ranks, and every rank's own figures."""
    steps = [r for r in records if r.get("event") == "step"]
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for record in steps:
        by_rank.setdefault(int(record.get("rank") or 0), []).append(record)
    ranks: list[dict[str, Any]] = []
    memories: list[Memory] = []
    for rank, own in sorted(by_rank.items()):
        own.sort(key=lambda r: int(r.get("step") or 0))
        own_memories = [Memory.from_record(r) for r in own]
        measured = [m for r, m in zip(own, own_memories) if int(r.get("step") or 0) >= 2]
        memory = Memory(
            memory_kind=own[0].get("memory_kind"),
            static_bytes=Memory.from_record(own[0]).static_bytes,
            peak_bytes=Memory.highest(measured).peak_bytes,
            peak_over_run_bytes=Memory.from_record(own[-1]).peak_over_run_bytes,
            cuda_reserved_bytes=Memory.highest(measured).cuda_reserved_bytes,
            cuda_outside_bytes=Memory.highest(measured).cuda_outside_bytes,
            cuda_alloc_retries=Memory.highest(own_memories).cuda_alloc_retries,
            cuda_ooms=Memory.highest(own_memories).cuda_ooms,
        )
        memories.append(memory)
        ranks.append({"rank": rank, "pid": own[-1].get("pid"), "steps": len(own), **asdict(memory)})
    lead = by_rank.get(0) or (next(iter(by_rank.values())) if by_rank else [])
    first = lead[0] if lead else {}

    return RunResult(
        status=status,
        run_dir=run_dir,
        error=error,
        device=first.get("device"),
        stack=first.get("stack") or {},
        step_times_s=step_seconds([r["time_s"] for r in lead], [r.get("ended_at") for r in lead], end.stopped),
        memory=Memory.highest(memories),
        cuda_device_name=first.get("cuda_device_name"),
        cuda_total_memory=first.get("cuda_total_memory"),
        wall_s=end.wall_s,
        returncode=end.returncode,
        ranks=tuple(ranks),
        stopped_s=sum(stop - start for start, stop in end.stopped),
    )
