"""Four ways to fit a training batch in a budget, side by side on CPU: no recompute, Hugging Face
gradient checkpointing on every layer, torch.compile's ``activation_memory_budget``, and memopt's
policy (``memopt tune --backend torch``, applied with ``memopt.recompute.apply``). The HF and
compile set-ups are ``memopt.backends.torch.peers``', which ``memopt tune --frontier`` measures too.

Each set-up trains the same ``hf:`` model (memopt's presets, built from config, random weights)
on the same batch with AdamW at seed 0, in a fresh child process under a memory cgroup of its own.
Its peak is the child's whole-run peak RSS, as memopt measures it: ``ru_maxrss`` from ``os.wait4``
on that child, read by this process (which loads no torch, so the child does not inherit a large
peak). Its step time is the median of the steps after the first (which, under compile, compiles).

Every run has glibc's mmap threshold pinned as memopt's runs and export line pin it
(``MALLOC_MMAP_THRESHOLD_=131072``: with the threshold glibc moves, freed activations stay resident
and the peak RSS of the same step varies by a gigabyte at base size), so the four differ only in
what they recompute.

The budget: the no-recompute run's peak P0 less (1 - F) of the activations autograd saves for
backward in it (A: every tensor a saved-tensor hook sees during one training forward and loss,
once per storage, parameters left out), so B = P0 - (1 - F) * A: the peak if a fraction F of the
saved activations stayed. torch.compile's budget is that same F
(``torch._functorch.config.activation_memory_budget = F``; torch's own scale runs from saving only
the compiled graph's inputs, 0, to its min-cut partitioner's default choice, 1, so F is the share
of what compile would save, not of A: the closest its knob comes to a byte budget). ``--of-peak S``
sets B = S × P0 instead (compile's knob stays F). memopt gets B in bytes. Runs to an answer: 1 for the first three (nothing is searched: the row says whether the
one run fits B); for memopt, every training run tune made (its ``--json`` lists them), and then
this script's own run of the chosen policy, measured as the others are.

    python bench/bench_side_by_side.py --cases gpt2:tiny:128:16,llama:tiny:128:16 --fraction 0.5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The allocator's setting memopt's CPU runs use (memopt.run loads no torch: this process must not hold its RSS).
from memopt.run.budget import CPU_ALLOCATOR_ENV

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
SETUPS = ("none", "hf", "compile", "memopt")
SETUP_NAMES = {
    "none": "no recompute",
    "hf": "HF gradient checkpointing, every layer",
    "compile": "torch.compile, activation_memory_budget",
    "memopt": "memopt tune's policy",
}


@dataclass(frozen=True)
class Case:
    """``MODEL:SIZE:SEQ:BATCH[:key=value…]``: an ``hf:`` preset, its size, sequence length, batch, config fields."""

    model: str
    size: str
    seq: int
    batch: int
    fields: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Case:
        model, size, seq, batch, *fields = text.split(":")
        pairs = tuple((key, int(value)) for key, _, value in (field.partition("=") for field in fields))
        return cls(model, size, int(seq), int(batch), pairs)

    def text(self) -> str:
        return ":".join([self.model, self.size, str(self.seq), str(self.batch), *(f"{k}={v}" for k, v in self.fields)])

    def label(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.fields)
        return f"hf:{self.model} {self.size}{extra}, {self.batch} × {self.seq}"


@dataclass(frozen=True)
class Measured:
    """One child's run: its peak RSS (None: it did not finish), step times, what it said."""

    peak_bytes: int | None
    steps_s: tuple[float, ...]
    saved_bytes: int | None
    error: str

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.steps_s[1:]) if len(self.steps_s) > 1 else None


# --- the child: one set-up's training steps ---------------------------------------------------


def _child(case: Case, setup: str, steps: int, compile_budget: float, count_saved: bool) -> None:
    import torch

    import memopt.recompute
    from memopt.backends.torch.peers import Peer, PeerKind
    from memopt.recipes.hf import resolve_hf_target

    target = resolve_hf_target(f"hf:{case.model}", {"size": case.size, "seq_len": case.seq, **dict(case.fields)})
    torch.manual_seed(0)
    model = target.build_model()
    model.train()
    # The peers are applied as memopt's own frontier applies them (tune --frontier).
    if setup == "hf":
        model = Peer(PeerKind.HF_CHECKPOINTING).apply(model)
    if setup == "memopt":
        model = memopt.recompute.apply(model)  # reads MEMOPT_RECOMPUTE_POLICY, set by the parent
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = Peer(PeerKind.COMPILE, compile_budget).apply(model) if setup == "compile" else model
    batch, _ = target.make_batch(case.batch)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    times: list[float] = []
    for step in range(steps):
        start = time.perf_counter()
        hooks = (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
            if count_saved and step == 0
            else contextlib.nullcontext()
        )
        with hooks:
            loss = run(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        del loss
    print(json.dumps({"steps_s": times, "saved_bytes": sum(saved.values()) if count_saved else None}), flush=True)


# --- the parent: children in memory cgroups, their peaks from wait4 --------------------------


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int | None) -> Iterator[Callable[[], None] | None]:
    """A cgroup v1 memory group capped at ``limit_bytes`` (None: no group); yields what a child
    runs before ``exec`` to join it. Removed after, once its processes are gone."""
    if limit_bytes is None:
        yield None
        return
    group = CGROUP_ROOT / f"memopt-side-by-side-{os.getpid()}-{time.monotonic_ns()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as err:
        sys.exit(f"error: cannot make a memory cgroup at {group} ({err}); --memory-limit 0 runs without one")
    procs = group / "cgroup.procs"

    def join() -> None:
        procs.write_text(str(os.getpid()))

    try:
        yield join
    finally:
        for _ in range(50):  # a killed group's last process may take a moment to leave it
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def run_measured(argv: list[str], env: dict[str, str], limit_bytes: int | None, timeout_s: float) -> Measured:
    """Run ``argv`` to its end in a memory cgroup; its peak RSS from ``wait4``, its last JSON line."""
    with memory_cgroup(limit_bytes) as join, tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, preexec_fn=join, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.2)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().splitlines()
    result = next((json.loads(line) for line in reversed(lines) if line.startswith("{")), None)
    if child.returncode != 0 or result is None:
        killed = " (killed: out of memory or past the timeout)" if child.returncode == -signal.SIGKILL else ""
        last = next((line for line in reversed(lines) if line.strip()), "")
        return Measured(None, (), None, f"exit {child.returncode}{killed}: {last[-300:]}")
    return Measured(usage.ru_maxrss * 1024, tuple(result["steps_s"]), result["saved_bytes"], "")


def child_argv(case: Case, setup: str, steps: int, budget: float = 1.0, count_saved: bool = False) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", setup, "--cases", case.text()]
    return [*argv, "--steps", str(steps), "--compile-budget", str(budget), *(["--count-saved"] if count_saved else [])]


def tune(
    case: Case, budget_bytes: int, steps: int, runs_dir: Path, limit: int | None, timeout_s: float
) -> dict[str, Any]:
    """``memopt tune --backend torch … --no-tui --json`` at ``budget_bytes``; its JSON summary."""
    argv = [sys.executable, "-m", "memopt", "tune", "--backend", "torch", f"hf:{case.model}", "--size", case.size]
    argv += ["--seq", str(case.seq), "--target-batch", str(case.batch), "--budget", f"{budget_bytes}B"]
    argv += [*(x for k, v in case.fields for x in ("-o", f"{k}={v}")), "--steps", str(steps)]
    argv += ["--device", "cpu", "--runs-dir", str(runs_dir), "--no-tui", "--json"]
    with memory_cgroup(limit) as join:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, preexec_fn=join, timeout=timeout_s)
    if not done.stdout.strip().startswith("{"):
        return {"status": "error", "error": (done.stderr.strip().splitlines() or ["no output"])[-1], "trials": []}
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def _mib(value: int | None) -> str:
    return f"{value / MIB:,.0f}" if value is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="gpt2:tiny:128:16,llama:tiny:128:16", help="MODEL:SIZE:SEQ:BATCH[:k=v], …")
    parser.add_argument("--fraction", type=float, default=0.5, help="F: share of the saved activations kept")
    parser.add_argument(
        "--of-peak",
        type=float,
        default=None,
        help="the budget as this share of the no-recompute peak instead (compile's knob stays --fraction)",
    )
    parser.add_argument("--steps", type=int, default=4, help="training steps per run, the first a warm-up")
    parser.add_argument("--tune-steps", type=int, default=2, help="memopt tune's --steps")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"which of {', '.join(SETUPS)}")
    parser.add_argument("--memory-limit-mib", type=int, default=8192, help="each run's cgroup limit; 0: none")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--runs-dir", type=Path, default=None, help="memopt tune's runs folder (default: a temp one)")
    parser.add_argument("--child", choices=SETUPS, help=argparse.SUPPRESS)
    parser.add_argument("--compile-budget", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--count-saved", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cases = [Case.parse(text) for text in args.cases.split(",")]
    if args.child:
        _child(cases[0], args.child, args.steps, args.compile_budget, args.count_saved)
        return
    if args.steps < 2:
        parser.exit(2, "error: --steps must be 2 or more (the first is a warm-up)\n")
    if not 0 <= args.fraction <= 1:
        parser.exit(2, f"error: --fraction must be in [0, 1], not {args.fraction:g}\n")
    if args.of_peak is not None and not 0 < args.of_peak <= 1:
        parser.exit(2, f"error: --of-peak must be in (0, 1], not {args.of_peak:g}\n")
    setups = args.setups.split(",")
    limit = args.memory_limit_mib * MIB or None
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-side-by-side-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("MEMOPT_RECOMPUTE_POLICY", None)
    env.update(CPU_ALLOCATOR_ENV)
    print(
        "| case | set-up | peak MiB | vs none | median step s | vs none | fits budget | runs to an answer | notes |",
        flush=True,
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for case in cases:
        plain = run_measured(child_argv(case, "none", args.steps, count_saved=True), env, limit, args.timeout)
        if plain.peak_bytes is None or plain.saved_bytes is None:
            sys.exit(f"error: {case.label()}: the run without recompute failed: {plain.error}")
        if args.of_peak is None:
            budget = int(plain.peak_bytes - (1 - args.fraction) * plain.saved_bytes)
            rule = f"P0 − (1 − {args.fraction:g}) × saved activations {_mib(plain.saved_bytes)} MiB"
        else:
            budget = int(plain.peak_bytes * args.of_peak)
            rule = f"{args.of_peak:g} × P0"
        print(
            f"\n{case.label()}: no-recompute peak {_mib(plain.peak_bytes)} MiB, saved activations "
            f"{_mib(plain.saved_bytes)} MiB; {rule}: budget {_mib(budget)} MiB ({budget} bytes)\n",
            file=sys.stderr,
            flush=True,
        )
        for setup in setups:
            notes = ""
            runs = "1"
            if setup == "none":
                measured = plain
            elif setup == "memopt":
                summary = tune(case, budget, args.tune_steps, runs_dir, limit, args.timeout)
                trials = summary["trials"]
                best = summary.get("best") or {}
                tuned = "verified" if best.get("verified") else summary["status"]
                runs = f"{sum(not t['reused'] for t in trials)} (tune: {tuned})"
                if not best.get("policy_file") or not summary.get("export"):
                    # No export line: tune verified no policy (or failed), so there is nothing a user would re-run.
                    why = summary.get("error") or f"tune {summary['status']}: no export line"
                    measured = Measured(None, (), None, why)
                else:
                    # The job as a user re-runs it: the export line's variables in its environment.
                    exported = dict(word.split("=", 1) for word in shlex.split(summary["export"][-1])[1:])
                    policy_env = dict(env, **exported)
                    measured = run_measured(child_argv(case, setup, args.steps), policy_env, limit, args.timeout)
                    notes = f"`{'; '.join(best['plans']) or 'nothing'}`; tune measured {_mib(best.get('peak_bytes'))}"
            else:
                budget_knob = args.fraction if setup == "compile" else 1.0
                measured = run_measured(child_argv(case, setup, args.steps, budget_knob), env, limit, args.timeout)
                if setup == "compile" and measured.steps_s:
                    notes = (
                        f"activation_memory_budget={args.fraction:g}; first step (compiles) {measured.steps_s[0]:.0f} s"
                    )
            step = measured.median_step_s
            base_step = plain.median_step_s
            peak_ratio = f"{measured.peak_bytes / plain.peak_bytes:.2f}" if measured.peak_bytes else "-"
            step_ratio = f"{step / base_step:.2f}" if step and base_step else "-"
            fits = "-" if measured.peak_bytes is None else ("yes" if measured.peak_bytes <= budget else "no")
            print(
                f"| {case.label()} | {SETUP_NAMES[setup]} | {_mib(measured.peak_bytes)} | {peak_ratio} "
                f"| {f'{step:.2f}' if step else '-'} | {step_ratio} | {fits} | {runs} "
                f"| {notes or measured.error} |",
                flush=True,
            )
        print(
            f"| {case.label()} | budget | {_mib(budget)} | {budget / plain.peak_bytes:.2f} | | | | | {rule} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
