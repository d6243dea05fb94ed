"""Run folders and child processes: one recipe, a few ORTModule steps, in its own process.

A child that crashes, hangs or runs out of memory never takes the caller down: the
outcome comes back as a ``RunResult`` and the full story stays in the folder's log.
Each child leads a process group of its own, which ``launch`` ends whole on a timeout,
on ``cancel`` (an event any thread may set) and when the caller itself is interrupted;
``end_all_runs`` ends every group still running (the CLI calls it on SIGTERM/SIGHUP/SIGINT
and at exit). A child whose parent dies without ending it (``kill -9``) ends its own group:
the child watches its parent (``memopt.child.watchdog``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import memopt
from memopt.child import CHILD_MODULE, ONNX_PREFIX, PARENT_PID_VAR, PROFILE_VAR, RUN_DIR_VAR, TIMEOUT_VAR, ChildRequest
from memopt.child.memory import proc_status_bytes
from memopt.core import BackendName, RunStatus
from memopt.core.memory import Memory
from memopt.errors import MemoptError, one_line, write_failure
from memopt.run.marked import end_marked, marked_pids
from memopt.run.oom import OomWatch
from memopt.run.output import LogPump, full_disk_in, last_lines
from memopt.run.settings import RunSettings, check_batch
from memopt.run.stops import POLL_S, StopWatch, running_seconds

# How often a waiting launch looks at its cancel event (the delay between a cancel and the
# kill) and at whether memopt or the run was stopped.
_CANCEL_POLL_S = POLL_S
# How long a job that has done its steps gets to leave after SIGTERM before SIGKILL.
_END_GRACE_S = 5.0
# How long a job that has done its steps gets to end by itself (its ranks leave at the step
# boundary, and the interpreter finalizes) before memopt ends it; its end is then not measured.
_EXIT_GRACE_S = 30.0
# How often a wait looks whether the child has ended.
_REAP_POLL_S = 0.02

__all__ = [
    "PARENT_PID_VAR",
    "RUN_DIR_VAR",
    "TIMEOUT_VAR",
    "end_all_runs",
    "PACKAGE_ROOT",
    "Ending",
    "ProcessEnd",
    "run_helper",
    "run_process",
    "step_seconds",
    "RunRequest",
    "RunResult",
    "launch",
    "new_run_dir",
    "note_in_log",
    "write_new",
    "LOG_NAME",
    "TORCH_LOG_NAME",
    "RECORD_NAME",
    "ONNX_DIR",
    "ONNX_PREFIX",
]

# Everything a run printed, named for its back end: ORT's logs are the parsed part of an ORT run's.
LOG_NAME = "ort.log"
TORCH_LOG_NAME = "torch.log"
_LOG_NAMES = {"ort": LOG_NAME, "torch": TORCH_LOG_NAME}
RECORD_NAME = "run.json"
ONNX_DIR = "onnx"
PACKAGE_ROOT = str(Path(memopt.__file__).resolve().parent.parent)


# The child is started with ``-c`` so that the working directory is not first on its import
# path (a stray torch.py or onnx.py there must not run); it goes last instead, so a recipe
# module kept there still imports. A ``.py`` recipe's own folder is added by the loader.
_CHILD_BOOT = f"""\
import os, runpy, sys
if sys.path[:1] == [""]:
    del sys.path[0]
sys.path.append(os.getcwd())
runpy.run_module({CHILD_MODULE!r}, run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class RunRequest:
    """One run of a target: how its runs go (``settings``) at ``batch_size``, a recipe in
    memopt's child process or the user's command as is. ``env`` adds to (or overrides) the
    caller's environment. A command picks its own device and interpreter and takes no recipe
    options; ``cuda`` tells its run that the stack has CUDA (ORT then prints its per-step
    memory lines)."""

    settings: RunSettings
    batch_size: int
    log_level: str = "INFO"
    save_onnx: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()  # caller's variables the run must not see
    cuda: bool = False
    backend: BackendName = BackendName.ORT  # the back end a recipe's child trains with

    def __post_init__(self) -> None:
        check_batch(self.batch_size)  # the rest was checked as the settings were made

    @property
    def log_name(self) -> str:
        """The run folder's log of everything the run printed, named for the back end."""
        return _LOG_NAMES[self.backend]

    def child_request(self) -> ChildRequest:
        """What the child reads (``memopt.child``): this request less what only the parent uses."""
        settings = self.settings
        return ChildRequest(
            recipe=settings.target.spec,
            batch_size=self.batch_size,
            steps=settings.steps,
            device=settings.device,
            log_level=self.log_level,
            save_onnx=self.save_onnx,
            options=dict(settings.options),
            backend=self.backend,
        )

    def record(self) -> dict[str, Any]:
        """The request as run.json keeps it."""
        settings = self.settings
        return {
            "recipe": settings.target.spec,
            "batch_size": self.batch_size,
            "options": dict(settings.options),
            "steps": settings.steps,
            "device": settings.device,
            "log_level": self.log_level,
            "save_onnx": self.save_onnx,
            "env": dict(self.env),
            "unset_env": list(self.unset_env),
            "python": settings.interpreter,
            "timeout_s": settings.timeout_s,
            "cuda": self.cuda,
            "backend": self.backend.value,
        }


@dataclass(frozen=True)
class RunResult:
    """Outcome of one child run.

    ``memory``: the run's figures (a job's: each the highest over its ranks, which ``ranks``
    keeps one by one); times in seconds, ``step_times_s[0]`` is the warm-up step.
    """

    status: RunStatus
    run_dir: Path
    error: str | None = None
    device: str | None = None
    stack: Mapping[str, Any] = field(default_factory=dict)
    step_times_s: tuple[float, ...] = ()
    losses: tuple[float, ...] = ()
    memory: Memory = field(default_factory=Memory)
    cuda_device_name: str | None = None
    cuda_total_memory: int | None = None
    cuda_pool: tuple[Mapping[str, Any], ...] = ()  # CUDA: the allocator's pool after the warm-up step
    wall_s: float = 0.0
    returncode: int | None = None
    ranks: tuple[Mapping[str, Any], ...] = ()  # a command's processes, each with its own peak
    # What says an out-of-memory run died of memory: its own error message or the kernel's OOM record.
    oom_evidence: str | None = None
    stopped_s: float = 0.0  # how long memopt or the run was stopped (SIGSTOP): left out of the step times
    log_name: str = LOG_NAME  # the run folder's log (RunRequest.log_name)

    @property
    def ran(self) -> bool:
        return self.status.ran

    @property
    def log_path(self) -> Path:
        return self.run_dir / self.log_name

    @property
    def median_step_s(self) -> float | None:
        measured = self.step_times_s[1:]
        return statistics.median(measured) if measured else None


def new_run_dir(base: Path, label: str) -> Path:
    """A fresh folder ``base/label-YYYYmmdd-HHMMSS[-n]``; an existing folder is never reused."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(base)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            candidate = base / (f"{label}-{stamp}" if attempt == 1 else f"{label}-{stamp}-{attempt}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            return candidate
    except FileExistsError:
        raise MemoptError(f"the runs folder {base} is a file, not a folder; pass another --runs-dir") from None
    except OSError as err:
        raise MemoptError(write_failure(f"a run folder in {base}", err)) from None
    raise MemoptError(f"no free run folder name under {base}")


# Every child still running, by pid; ``end_all_runs`` ends their groups and refuses new ones.
_live: dict[int, subprocess.Popen[bytes]] = {}
_live_lock = threading.Lock()  # between launching threads; end_all_runs never takes it
_ending = threading.Event()


def end_all_runs() -> int:
    """Kill the process group of every run still going and start no new one; returns how many.

    For the caller's shutdown (a signal, an exit): launches waiting on those children come back
    ``cancelled``, and a launch that starts a child after this call ends it at its first look.
    Safe from a signal handler (it takes no lock) and from any thread.
    """
    _ending.set()
    children = list(_live.values())
    for child in children:
        _kill_group(child)
    return len(children)


def launch(request: RunRequest, run_dir: Path, cancel: threading.Event | None = None) -> RunResult:
    """Run ``request`` in a child process writing into ``run_dir``; record it in run.json.

    Setting ``cancel`` (from any thread) kills the child's process group and the run
    comes back with status ``cancelled``; a run whose ``cancel`` is already set never starts.
    """
    request_path = run_dir / ".request.json"
    result_path = run_dir / ".result.json"
    write_new(request_path, json.dumps(asdict(request.child_request())))
    started = time.monotonic()
    ending = Ending.FINISHED
    returncode: int | None = None  # stays None when a cancel came before the start
    argv = [request.settings.interpreter, "-c", _CHILD_BOOT, str(request_path), str(result_path)]
    try:
        outcome = _run_child(
            argv,
            run_dir / request.log_name,
            _child_env(request, run_dir),
            None,
            cancel,
            request.settings.timeout_s,
            "wb",
        )
        oom = None
        stopped: tuple[tuple[float, float], ...] = ()
        if outcome is None:
            ending, max_rss = Ending.CANCELLED, None
        else:
            returncode, ending, oom, stopped, max_rss = outcome
        result = _collect(result_path, run_dir, returncode, ending, time.monotonic() - started, request, oom, stopped)
        # The child's own end (the interpreter's finalization) counts, but not the profiling session a
        # profiled run builds after its steps: no job of the user's runs that.
        if result.ran and ending is Ending.FINISHED and request.env.get(PROFILE_VAR) != "1":
            result = replace(result, memory=result.memory.with_exit_peak(max_rss))
    except OSError as err:
        raise MemoptError(f"cannot start {request.settings.interpreter}: {err.strerror or err}") from None
    finally:  # the child's temporary file too, where it died mid-write (a full disk)
        for leftover in (request_path, result_path, result_path.with_name(result_path.name + ".tmp")):
            leftover.unlink(missing_ok=True)
    _write_record(run_dir, request, result)
    return result


class Ending(str, Enum):
    """How a run's process ended, before its result is read."""

    FINISHED = "finished"  # on its own
    EXITED = "exited"  # it did what was wanted, then ended by itself: its end is measured
    DONE = "done"  # it did what was wanted, and memopt ended it
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    NOT_STARTED = "not_started"


@dataclass(frozen=True)
class ProcessEnd:
    """How a ``run_process`` job ended."""

    returncode: int | None
    ending: Ending
    wall_s: float
    oom_evidence: str | None = None  # the kernel's record of an OOM kill in the job's cgroup (``OomWatch``)
    stopped: tuple[tuple[float, float], ...] = ()  # when memopt or the job was stopped (``StopWatch``)
    # The kernel's peak RSS over the job's processes, each on its own, up to its exit: every
    # process the job waited for (a launcher's workers, a shell's command) counts.
    max_rss_bytes: int | None = None


def run_process(
    argv: Sequence[str],
    run_dir: Path,
    env: Mapping[str, str],
    *,
    timeout_s: float,
    cancel: threading.Event | None = None,
    done: Callable[[], bool] | None = None,
    cwd: Path | None = None,
    log_name: str = LOG_NAME,
) -> ProcessEnd:
    """Run ``argv`` as is, in a process group of its own, its output into the folder's log.

    ``done`` (asked every poll) says the job did what was wanted: it then has a grace period
    to end by itself (``Ending.EXITED``), after which its whole group is ended, politely first
    (SIGTERM, then SIGKILL after a grace period: ``Ending.DONE``). Timeout, cancel,
    ``end_all_runs`` and the caller's own interruption end the group as ``launch`` does.
    """
    started = time.monotonic()
    try:
        outcome = _run_child(list(argv), run_dir / log_name, dict(env), cwd, cancel, timeout_s, "ab", done, gentle=True)
    except OSError as err:
        note_in_log(run_dir, f"{err}\n", log_name)
        return ProcessEnd(None, Ending.NOT_STARTED, time.monotonic() - started)
    if outcome is None:
        return ProcessEnd(None, Ending.CANCELLED, 0.0)
    returncode, ending, oom, stopped, max_rss = outcome
    return ProcessEnd(returncode, ending, time.monotonic() - started, oom, stopped, max_rss)


def _run_child(
    argv: list[str],
    log_path: Path,
    env: dict[str, str],
    cwd: Path | None,
    cancel: threading.Event | None,
    timeout_s: float,
    log_mode: str,
    done: Callable[[], bool] | None = None,
    *,
    gentle: bool = False,
) -> tuple[int, Ending, str | None, tuple[tuple[float, float], ...], int | None] | None:
    """Start ``argv`` and wait for it as ``_wait`` does; return only once every process of the
    run is gone: its group, and whatever carries the run's mark in a group or session of its
    own. Its output goes through a ``LogPump`` into the folder's log. Returns the return code,
    how it ended, the kernel's record of an OOM kill in its memory cgroup (``OomWatch``) and
    when memopt or the run was stopped (``StopWatch``), its peak RSS as the kernel accounted it at
    its reaping (``_Process``); None: cancelled first."""
    with open(log_path, log_mode, buffering=0) as log:  # the pump's writes, each to disk as is
        child = _start_registered(argv, env, cwd, cancel)
        if child is None:
            return None
        assert child.stdout is not None
        pump = LogPump(child.stdout, log)
        watch = OomWatch.start(child.pid)
        stops = StopWatch(lambda: {child.pid, *marked_pids(RUN_DIR_VAR, env[RUN_DIR_VAR])})
        try:
            returncode, ending = _wait(child, timeout_s, cancel, done, gentle=gentle, failed=pump.failed, stops=stops)
            return returncode, ending, watch.evidence(), stops.finish(), child.max_rss_bytes
        finally:  # Ctrl-C and the caller's own shutdown included: leave no process behind
            if child.returncode is None:
                _kill_group(child)
                child.wait()
            end_marked(RUN_DIR_VAR, env[RUN_DIR_VAR])
            with _live_lock:
                _live.pop(child.pid, None)
            pump.close()
            child.stdout.close()
            if pump.write_error is not None:
                raise MemoptError(write_failure(log_path, pump.write_error))


@dataclass(frozen=True)
class HelperOutput:
    """What a short helper process said, and how it exited."""

    returncode: int
    stdout: str
    stderr: str


def run_helper(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> HelperOutput | None:
    """Run a short helper (another interpreter's version query) to its end in a process group of
    its own, registered for ``end_all_runs``; None where it ran past ``timeout_s``. Its whole
    group is ended on every way out (its end, the timeout, the caller's interruption): a wrapper
    script's own children (a ``sleep`` it started) go with it."""
    child = _start_registered(list(argv), dict(env), None, None, stderr=subprocess.PIPE)
    if child is None:
        raise MemoptError("memopt is ending: no new process is started")
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        _kill_group(child)
        child.wait()
        with _live_lock:
            _live.pop(child.pid, None)
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
    return HelperOutput(child.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def helper_last_line(argv: Sequence[str], timeout_s: float, doing: str) -> str:
    """The last line a short measuring helper printed, run as ``run_helper`` runs it, with this
    process's environment; a ``MemoptError`` saying what was being ``doing`` where it could not
    start, failed, ran past ``timeout_s`` or printed nothing."""
    try:
        done = run_helper(argv, os.environ, timeout_s)
    except OSError as err:
        raise MemoptError(f"{doing} failed: {one_line(err)}") from err
    if done is None:
        raise MemoptError(f"{doing} failed: it ran past {timeout_s:g} s")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]  # a traceback's last line names it
        raise MemoptError(f"{doing} failed: exit status {done.returncode}: {said}")
    return lines[-1]


def write_new(path: Path, text: str) -> None:
    """Write a file of memopt's own; a failed write leaves no part of it behind."""
    try:
        path.write_text(text)
    except OSError as err:
        path.unlink(missing_ok=True)
        raise MemoptError(write_failure(path, err)) from None


def note_in_log(run_dir: Path, text: str, log_name: str = LOG_NAME) -> None:
    """Append ``text`` to the run's log where it can; a log that cannot be written loses only the note."""
    with contextlib.suppress(OSError), open(run_dir / log_name, "a") as log:
        log.write(text)


class _Process(subprocess.Popen[bytes]):
    """A run's process, reaped with ``wait4``: with its exit status comes the kernel's peak RSS
    of it and of every descendant it waited for (``max_rss_bytes``), up to their exits, the
    interpreter's finalization included: what ``/usr/bin/time -v`` reports for the same job.

    The kernel keeps a process's peak across ``exec``, and a child starts from its parent's
    memory (fork copies it, vfork shares it): the figure is never below the peak of memopt's own
    memory at the start (its ``VmHWM``, not its ``ru_maxrss``, which also holds what the process
    that started memopt peaked at: a notebook's or a test runner's, which no child inherits).
    Where it is not above that, the job's own peak cannot be told from memopt's and
    ``max_rss_bytes`` stays None (not measured)."""

    max_rss_bytes: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._spawner_peak_bytes = proc_status_bytes("VmHWM")
        super().__init__(*args, **kwargs)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: no accounting to read
                return super().poll()
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                peak = usage.ru_maxrss * 1024
                self.max_rss_bytes = peak if peak > self._spawner_peak_bytes else None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (returncode := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(_REAP_POLL_S)
        return returncode


def _start_registered(
    argv: list[str],
    env: dict[str, str],
    cwd: Path | None,
    cancel: threading.Event | None,
    stderr: int = subprocess.STDOUT,
) -> _Process | None:
    """Start ``argv`` in a session of its own, its output on a pipe (``stderr`` with it, unless
    told otherwise), registered for ``end_all_runs``; None: cancelled first."""
    with _live_lock:  # no child starts after end_all_runs has looked at the live ones
        if _ending.is_set() or (cancel is not None and cancel.is_set()):
            return None
        child = _Process(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            _live[child.pid] = child
        except BaseException:  # a stop signal's handler raised before the child was registered
            _kill_group(child)
            child.wait()
            raise
        return child


def _wait(
    child: subprocess.Popen[bytes],
    timeout_s: float,
    cancel: threading.Event | None,
    done: Callable[[], bool] | None = None,
    *,
    gentle: bool = False,
    failed: threading.Event | None = None,
    stops: StopWatch | None = None,
) -> tuple[int, Ending]:
    """Wait for ``child``; end its group on timeout or cancel (``gentle``: SIGTERM first, which
    launchers such as torchrun pass on to workers in sessions of their own; else SIGKILL), and
    once ``done()`` held and the child did not end by itself within ``_EXIT_GRACE_S``; a set
    ``failed`` (its log cannot be written) ends it as a cancel does; ``stops`` is ticked at every
    wake. Returns (returncode, how it ended)."""
    deadline = time.monotonic() + timeout_s
    done_at: float | None = None
    while True:
        if stops is not None:
            stops.tick()
        if child.poll() is not None:  # finished just as the deadline or a cancel came: it finished
            return child.returncode, _how_it_ended(child.returncode, done_at)
        if done_at is None and done is not None and done():
            done_at = time.monotonic()
        if done_at is not None and time.monotonic() - done_at > _EXIT_GRACE_S:
            return _end_group(child), Ending.DONE
        left = deadline - time.monotonic()
        if left <= 0:
            return _stop(child, gentle), Ending.TIMED_OUT
        if _ending.is_set() or any(event is not None and event.is_set() for event in (cancel, failed)):
            return _stop(child, gentle), Ending.CANCELLED
        try:
            returncode = child.wait(timeout=min(left, _CANCEL_POLL_S))
        except subprocess.TimeoutExpired:
            continue
        return returncode, _how_it_ended(returncode, done_at)


def _stop(child: subprocess.Popen[bytes], gentle: bool) -> int:
    if gentle:
        return _end_group(child)
    _kill_group(child)
    return child.wait()


def _how_it_ended(returncode: int, done_at: float | None) -> Ending:
    # Killed by end_all_runs while its launch waited: the caller's shutdown, not a crash.
    if returncode < 0 and _ending.is_set():
        return Ending.CANCELLED
    return Ending.EXITED if done_at is not None else Ending.FINISHED


def _child_env(request: RunRequest, run_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in request.unset_env}
    env.update(request.env)
    # memopt must be importable by the child even from another interpreter; paths the
    # caller put on PYTHONPATH (e.g. another ORT release unpacked) keep precedence.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), PACKAGE_ROOT) if p)
    # A run that silently fell back to PyTorch would measure the wrong thing.
    env["ORTMODULE_FALLBACK_POLICY"] = "FALLBACK_DISABLE"
    env["ORTMODULE_SAVE_ONNX_PATH"] = str(run_dir / ONNX_DIR)
    env["PYTHONUNBUFFERED"] = "1"
    env[PARENT_PID_VAR] = str(os.getpid())
    env[TIMEOUT_VAR] = repr(float(request.settings.timeout_s))
    env[RUN_DIR_VAR] = str(run_dir.resolve())
    if request.save_onnx:
        (run_dir / ONNX_DIR).mkdir(exist_ok=True)
    return env


def _end_group(child: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the whole group (launchers such as torchrun pass it on), SIGKILL what is left."""
    _signal_group(child, signal.SIGTERM)
    try:
        returncode = child.wait(timeout=_END_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        returncode = child.wait()
    _kill_group(child)  # workers that outlived their launcher
    return returncode


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    _signal_group(child, signal.SIGKILL)


def _signal_group(child: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:
        pass


def _collect(
    result_path: Path,
    run_dir: Path,
    returncode: int | None,
    ending: Ending,
    wall_s: float,
    request: RunRequest,
    oom: str | None,
    stopped: tuple[tuple[float, float], ...],
) -> RunResult:
    """The run's result as the child reported it; a child that died without a word died of
    memory only where the kernel recorded an OOM kill (``oom``), else it crashed. Each step's
    time leaves out the ``stopped`` stretches inside it."""
    try:
        reported = json.loads(result_path.read_text())
    except (OSError, ValueError):
        reported = {}
    steps = reported.get("steps") or {}
    status = RunStatus.read(reported.get("status"))
    error = reported.get("error")
    if ending is Ending.TIMED_OUT:
        status, error = RunStatus.TIMED_OUT, f"killed after {request.settings.timeout_s:g} s without finishing"
    elif ending is Ending.CANCELLED:
        status, error = RunStatus.CANCELLED, "cancelled: the run's process group was killed"
    elif status in (RunStatus.RUNNING, RunStatus.CRASHED) and error is None and oom is not None:
        status, error = RunStatus.OUT_OF_MEMORY, oom
    elif status in (RunStatus.RUNNING, RunStatus.CRASHED) and error is None:
        status, error = RunStatus.CRASHED, _crash_reason(run_dir / request.log_name, returncode or 0)
    elif status is RunStatus.OUT_OF_MEMORY:
        oom = f"its own error: {error}"
    return RunResult(
        status=status,
        run_dir=run_dir,
        error=error,
        device=reported.get("device"),
        stack=reported.get("stack", {}),
        step_times_s=step_seconds(steps.get("step_times_s", ()), steps.get("step_ended_at", ()), stopped),
        losses=tuple(steps.get("losses", ())),
        memory=Memory.from_record(steps),
        cuda_device_name=steps.get("cuda_device_name"),
        cuda_total_memory=steps.get("cuda_total_memory"),
        cuda_pool=tuple(steps.get("cuda_pool") or ()),
        wall_s=wall_s,
        returncode=returncode,
        oom_evidence=oom if status is RunStatus.OUT_OF_MEMORY else None,
        stopped_s=sum(end - start for start, end in stopped),
        log_name=request.log_name,
    )


def step_seconds(
    seconds: Sequence[float], ended_at: Sequence[float | None], stopped: tuple[tuple[float, float], ...]
) -> tuple[float, ...]:
    """Each step's time less the stretches in which memopt or the run was stopped
    (``running_seconds``); ``ended_at``: when each step ended, where the run said."""
    ends = list(ended_at)[: len(seconds)]
    ends += [None] * (len(seconds) - len(ends))
    return tuple(running_seconds(float(time_s), end, stopped) for time_s, end in zip(seconds, ends))


def _crash_reason(log_path: Path, returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else returncode
        # A kill the kernel recorded as an OOM kill never gets here (``_collect``): a signal is all that is known.
        return f"the run was killed by signal {-returncode} ({name})"
    lines = last_lines(log_path, 20)
    last = lines[-1][:300] if lines else "no output"
    return f"{'the disk is full: ' if full_disk_in(lines) else ''}the run exited with status {returncode}: {last}"


def _write_record(run_dir: Path, request: RunRequest, result: RunResult) -> None:
    record = {
        "memopt_version": memopt.__version__,
        "request": request.record(),
        "result": {
            **{name: value for name, value in asdict(result).items() if name != "memory"},
            **asdict(result.memory),
            "run_dir": str(result.run_dir),
            "median_step_s": result.median_step_s,
        },
    }
    write_new(run_dir / RECORD_NAME, json.dumps(record, indent=2, default=str))
