"""The user's own training command as a target: run as is, every rank measured.

A command target is the command line behind ``COMMAND_PREFIX`` (``cmd:torchrun … train.py
--batch-size {batch}``), so journals, models and settings keep it as they keep a recipe
name. memopt runs it through ``/bin/sh -c`` in the caller's working directory with only
environment variables added: the trial's memory-optimizer variables, ORTModule's log level
(its Plan table), its graphs' folder, and a start-up hook on ``PYTHONPATH``
(``memopt.child.hook``) that counts steps on every rank and reports them into the run
folder's ``steps.jsonl``. Once every rank has reported its last step, memopt ends the
job's whole process group.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
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
)
from memopt.errors import MemoptError
from memopt.recipes import recipe_label
from memopt.run.launch import LOG_NAME, ONNX_DIR, PACKAGE_ROOT, RECORD_NAME, RunResult, check_timeout, run_process

__all__ = [
    "BATCH_PLACEHOLDER",
    "COMMAND_PREFIX",
    "STEPS_FILE",
    "CommandRequest",
    "command_identity",
    "command_of",
    "command_target",
    "fixed_batch",
    "has_batch_placeholder",
    "is_command",
    "job_python",
    "render_command",
    "run_command",
    "target_label",
]

COMMAND_PREFIX = "cmd:"
BATCH_PLACEHOLDER = "{batch}"
STEPS_FILE = "steps.jsonl"
HOOK_PATH = str(Path(memopt.child.__file__).resolve().parent / HOOK_DIR)
# Lines of the job's output an error quotes.
_TAIL_LINES = 6


def command_target(command: str) -> str:
    """The target string of a command line (what journals and settings keep)."""
    command = command.strip()
    if not command:
        raise MemoptError("--cmd needs a command, e.g. --cmd 'python train.py --batch-size {batch}'")
    return COMMAND_PREFIX + command


def command_identity(target: str) -> str:
    """What a command's results depend on: the command, where it runs, and its scripts' content."""
    digest = hashlib.sha256()
    for word in _words(command_of(target)):
        path = Path(word)
        if path.suffix == ".py" and path.is_file():
            digest.update(path.read_bytes())
    return f"{target} @ {Path.cwd()}#{digest.hexdigest()[:16]}"


def is_command(target: str) -> bool:
    return target.startswith(COMMAND_PREFIX)


def command_of(target: str) -> str:
    return target[len(COMMAND_PREFIX) :]


def has_batch_placeholder(target: str) -> bool:
    return BATCH_PLACEHOLDER in command_of(target)


def fixed_batch(target: str) -> bool:
    """A command without ``{batch}``: it runs at its own batch size, which memopt cannot vary."""
    return is_command(target) and not has_batch_placeholder(target)


def render_command(target: str, batch_size: int) -> str:
    """The command line as the job runs it: ``{batch}`` replaced by the batch size."""
    return command_of(target).replace(BATCH_PLACEHOLDER, str(batch_size))


def target_label(target: str) -> str:
    """A short name for run folders and config files: a recipe's label, or the script a
    command runs, else its program."""
    if not is_command(target):
        return recipe_label(target)
    words = _words(command_of(target))
    scripts = [w for w in words if w.endswith(".py")]
    name = Path(scripts[0] if scripts else (words[0] if words else "cmd")).stem
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name) or "cmd"


def job_python(target: str) -> str | None:
    """The interpreter the command runs (a ``python`` program or a launcher's ``#!`` line), where it can be told."""
    words = [w for w in _words(command_of(target)) if "=" not in w.split("/")[0]]  # skip VAR=value prefixes
    if not words:
        return None
    program = shutil.which(words[0])
    if program is None:
        return None
    if Path(program).name.startswith("python"):
        return program
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512).decode(errors="replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    interpreter = first[2:].split()
    if not interpreter:
        return None
    if Path(interpreter[0]).name == "env" and len(interpreter) > 1:
        return shutil.which(interpreter[1])
    return interpreter[0] if Path(interpreter[0]).name.startswith("python") else None


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


@dataclass(frozen=True)
class CommandRequest:
    """One run of a command target: ``env`` adds to (or overrides) the caller's environment."""

    target: str
    batch_size: int
    steps: int = 2
    log_level: str = "INFO"
    save_onnx: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()
    timeout_s: float = 1800.0
    cuda: bool = False  # the stack has CUDA: ORT prints its per-step memory lines

    def __post_init__(self) -> None:
        check_timeout(self.timeout_s)
        if self.batch_size < 1:
            raise MemoptError(f"--batch must be a positive integer, not {self.batch_size}")
        if self.steps < 1:
            raise MemoptError(f"--steps must be at least 1, not {self.steps}")


def run_command(request: CommandRequest, run_dir: Path, cancel: threading.Event | None = None) -> RunResult:
    """Run the command until every rank has reported warm-up + ``steps`` steps, then end it."""
    steps_file = run_dir / STEPS_FILE
    command = render_command(request.target, request.batch_size)
    (run_dir / LOG_NAME).write_text(f"[memopt] $ {command}\n")
    if request.save_onnx:
        (run_dir / ONNX_DIR).mkdir(exist_ok=True)
    wanted = request.steps + 1
    end = run_process(
        [sys.executable, "-S", "-c", _GUARD_BOOT, command],
        run_dir,
        _job_env(request, run_dir),
        timeout_s=request.timeout_s,
        cancel=cancel,
        done=lambda: _all_ranks_done(_read_steps(steps_file), wanted),
        cwd=Path.cwd(),
    )
    records = _read_steps(steps_file)
    status, error = _status(records, wanted, end.ending, end.returncode, run_dir / LOG_NAME, request.timeout_s)
    result = _result(records, status, error, run_dir, end.wall_s, end.returncode)
    (run_dir / RECORD_NAME).write_text(
        json.dumps(
            {
                "memopt_version": memopt.__version__,
                "request": {"command": command, "batch_size": request.batch_size, "steps": request.steps},
                "result": {"status": status, "error": error, "ranks": list(result.ranks), "wall_s": end.wall_s},
            },
            indent=2,
            default=str,
        )
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


def _job_env(request: CommandRequest, run_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in request.unset_env}
    env.update(request.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_PATH, env.get("PYTHONPATH", "")) if p)
    env[JOB_PACKAGE_ROOT_VAR] = PACKAGE_ROOT
    env[JOB_STEPS_FILE_VAR] = str((run_dir / STEPS_FILE).resolve())
    env[JOB_STEPS_VAR] = str(request.steps)
    env[PARENT_PID_VAR] = str(os.getpid())
    env[TIMEOUT_VAR] = repr(float(request.timeout_s))
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


def _status(
    records: list[dict[str, Any]], wanted: int, ending: str, returncode: int | None, log: Path, timeout_s: float
) -> tuple[str, str | None]:
    steps = [r for r in records if r.get("event") == "step"]
    if ending == "done" or _all_ranks_done(records, wanted):
        return "ok", None
    if ending == "cancelled":
        return "cancelled", "cancelled: the job's process group was ended"
    tail = _tail(log)
    seen = any(r.get("event") == "ortmodule" for r in records)
    reached = max((int(r.get("step") or 0) for r in steps), default=0)
    progress = f"reached step {reached} of {wanted}" if seen else "no ORTModule training step seen"
    if ending == "not_started":
        return "recipe_error", f"the command could not start: {tail}"
    if ending == "timed_out":
        return "timed_out", f"killed after {timeout_s:g} s: {progress}; last output: {tail}"
    # A rank killed outright (torchrun reports "Signal 9 (SIGKILL)") is most likely the kernel's OOM killer.
    killed = returncode in (-signal.SIGKILL, 128 + signal.SIGKILL) or "signal 9 (sigkill)" in tail.lower()
    if killed or any(marker in tail.lower() for marker in OOM_MARKERS):
        return "out_of_memory", f"the job ran out of memory ({progress}): {tail}"
    if not seen:
        return (
            "recipe_error",
            f"{progress}: the job {_exit_words(returncode)} before ORTModule trained; last output: {tail}",
        )
    if returncode == 0:
        return "recipe_error", f"the job ended after {reached} of the {wanted} steps memopt needs; lower --steps"
    return "step_error", f"the job {_exit_words(returncode)} ({progress}): {tail}"


def _exit_words(returncode: int | None) -> str:
    if returncode is None:
        return "did not start"
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}" if -returncode in signal.valid_signals() else "died"
    return f"exited with status {returncode}"


def _tail(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    lines = [line for line in lines if not line.startswith("[memopt]")]
    return " | ".join(line[:200] for line in lines[-_TAIL_LINES:]) or "no output"


def _result(
    records: list[dict[str, Any]],
    status: str,
    error: str | None,
    run_dir: Path,
    wall_s: float,
    returncode: int | None,
) -> RunResult:
    """Rank 0's timings, the peak over ranks, and every rank's own figures."""
    steps = [r for r in records if r.get("event") == "step"]
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for record in steps:
        by_rank.setdefault(int(record.get("rank") or 0), []).append(record)
    ranks: list[dict[str, Any]] = []
    for rank, own in sorted(by_rank.items()):
        own.sort(key=lambda r: int(r.get("step") or 0))
        measured = [r for r in own if int(r.get("step") or 0) >= 2]
        ranks.append(
            {
                "rank": rank,
                "pid": own[-1].get("pid"),
                "steps": len(own),
                "peak_bytes": max((int(r["peak_bytes"]) for r in measured), default=None),
                "peak_over_run_bytes": own[-1].get("run_peak_bytes"),
                "static_bytes": own[0].get("static_bytes"),
                "cuda_reserved_bytes": max((int(r.get("cuda_reserved_bytes") or 0) for r in measured), default=None)
                if own[0].get("device") == "cuda"
                else None,
            }
        )
    lead = by_rank.get(0) or (next(iter(by_rank.values())) if by_rank else [])
    first = lead[0] if lead else {}

    def highest(name: str) -> int | None:
        values = [int(r[name]) for r in ranks if r.get(name) is not None]
        return max(values) if values else None

    return RunResult(
        status=status,
        run_dir=run_dir,
        error=error,
        device=first.get("device"),
        stack=first.get("stack") or {},
        step_times_s=tuple(float(r["time_s"]) for r in lead),
        memory_kind=first.get("memory_kind"),
        memory_after_setup=highest("static_bytes"),
        peak_memory=highest("peak_over_run_bytes"),
        steady_peak_memory=highest("peak_bytes"),
        cuda_peak_reserved=highest("cuda_reserved_bytes"),
        cuda_device_name=first.get("cuda_device_name"),
        cuda_total_memory=first.get("cuda_total_memory"),
        wall_s=wall_s,
        returncode=returncode,
        ranks=tuple(ranks),
    )
