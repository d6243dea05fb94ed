"""Console renderings more than one command prints: a trial's summary, a config to paste."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from memopt.backends.ort import (
    ConfigEntry,
    OrtVersion,
    ValidatedConfig,
    export_line,
    format_config_string,
    render_json_config,
    takes_json_file,
    validate_entries,
)
from memopt.cli import console as default_console
from memopt.cli import error_console
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.run.files import replace_atomically
from memopt.units import format_bytes, format_cuda_memory, format_mib

__all__ = ["print_config", "print_trial", "print_validated", "say", "stdout_kept_for_the_result"]


def say(line: str) -> None:
    """One progress line on stderr, as written (stdout is kept for the result)."""
    error_console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def stdout_kept_for_the_result() -> Iterator[None]:
    """While the work runs, file descriptor 1 points at stderr, so that nothing but the result
    printed after it reaches stdout, which scripts read: libraries' C code prints there beyond
    Python's reach (scipy's HiGHS MIP solver prints a debug line, `…transformNewIntegerFeasibleSolution
    tmpSolver.run();`, whatever its output options)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        # C's stdio buffers what its printf wrote while fd 1 was stderr (buffered when stderr is a
        # pipe or a file): flushed now, or it would reach the real stdout at exit, after the result.
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def print_config(
    entries: Sequence[ConfigEntry],
    version: OrtVersion,
    known_plans: Collection[str],
    *,
    out: Path | None,
    force: bool,
    console: Console,
) -> None:
    """Validate ``entries`` for ``version`` and print what to paste (writing the 1.19 file to ``out``)."""
    validated = validate_entries(entries, version, known_plans)
    print_validated(validated, version, console)
    if not takes_json_file(version):
        if out is not None:
            raise MemoptError(f"ORT {version} takes the config string itself; --out is for 1.19 JSON files")
        console.print(
            export_line(format_config_string(entries, version)), highlight=False, markup=False, soft_wrap=True
        )
        return
    if out is None:
        console.print(
            f"# ORT {version} reads a JSON file; save this as config.json (or pass --out):",
            highlight=False,
            markup=False,
        )
        console.print(render_json_config(entries).rstrip(), highlight=False, markup=False, soft_wrap=True)
        console.print(export_line("config.json"), highlight=False, markup=False)
        return
    path = replace_atomically(out, render_json_config(entries), overwrite=force).resolve()
    console.print(f"# wrote {path}", highlight=False, markup=False, soft_wrap=True)
    console.print(export_line(str(path)), highlight=False, markup=False, soft_wrap=True)


def print_validated(config: ValidatedConfig, version: OrtVersion, console: Console) -> None:
    for warning in config.warnings:
        console.print(Text.assemble(("warning: ", "yellow"), warning), highlight=False, soft_wrap=True)
    shown = ", ".join(str(entry) for entry in config.entries) or "no entries"
    console.print(f"# ORT {version} accepts this config: {shown}", highlight=False, markup=False, soft_wrap=True)


def _phases_counted(result: TrialResult) -> str:
    """What the whole-run figure covers: the job's own exit (atexit, finalizers) where it was
    measured (CPU, a job that ended by itself after its steps)."""
    if result.memory.exit_peak_bytes is not None:
        return f"start-up and the job's exit included (exit {format_mib(result.memory.exit_peak_bytes)})"
    if result.memory.memory_kind == "rss":
        return "start-up included; the job's exit not measured"
    return "start-up included"


def print_trial(result: TrialResult, console: Console = default_console) -> None:
    """The console summary of one trial."""
    shown = ", ".join(f"{k}={v}" for k, v in result.options.items()) or "default options"
    config = ", ".join(result.config) or "no config"
    where = (result.device or "?").upper()
    console.print(
        f"[bold]Trial of {escape(str(result.target))}[/] ({escape(shown)}) at batch {result.batch_size} on {where}: "
        f"[bold]{result.outcome.label}[/]{' (reused from the journal)' if result.reused else ''}",
        highlight=False,
    )
    console.print(f"  config       {config}", markup=False, highlight=False, soft_wrap=True)
    if result.config_value:
        console.print(
            f"  applied as   ORTMODULE_MEMORY_OPT_CONFIG={result.config_value}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"  stack        ORT {result.ort_version} ({result.ort_package}), torch {result.torch_version}",
        markup=False,
        highlight=False,
    )
    if result.error:
        console.print(f"  error        {result.error}", markup=False, highlight=False, soft_wrap=True)
    if result.ran:
        label = "peak RSS" if result.memory.memory_kind == "rss" else "peak allocated"
        line = f"  memory       {label} {format_mib(result.memory.peak_bytes)} in the measured steps; static {format_bytes(result.memory.static_bytes)} before step 1"
        if result.memory.cuda_reserved_bytes:
            line += f"; reserved {format_bytes(result.memory.cuda_reserved_bytes)}"
        console.print(line, highlight=False)
        if len(result.ranks) > 1:
            per_rank = ", ".join(f"{r.get('rank')}: {format_mib(r.get('peak_bytes'))}" for r in result.ranks)
            console.print(f"  ranks        {per_rank} (the trial's peak is the highest)", highlight=False)
        whole_run = result.memory.whole_run_peak
        console.print(
            f"  whole run    {format_mib(whole_run)} at its peak ({result.memory.binding_phase}): "
            f"what a hard limit sees, {_phases_counted(result)}",
            highlight=False,
        )
        judged, judged_on = result.memory.device_peak, "whole run"
        if result.memory.on_cuda and result.memory.cuda_reserved_bytes is not None:
            judged_on = "reserved + outside the allocator: what runs out on the card"
            console.print(
                "  on the card  "
                + format_cuda_memory(
                    result.memory.whole_run_peak, result.memory.cuda_reserved_bytes, result.memory.cuda_outside_bytes
                ),
                highlight=False,
            )
        if result.at_the_edge:
            console.print(f"  [yellow]at the edge[/]  {result.at_the_edge}", highlight=False, soft_wrap=True)
        if result.start_up_binds:
            console.print(f"  [yellow]start-up[/]     {result.start_up_binds}", highlight=False, soft_wrap=True)
        if result.budget_bytes is not None:
            console.print(
                f"  budget       {format_mib(result.budget_bytes)}: "
                f"{'within' if judged and judged <= result.budget_bytes else 'OVER'} ({judged_on})",
                highlight=False,
            )
        if result.predicted_peak_bytes is not None:
            console.print(
                f"  predicted    {format_mib(result.predicted_peak_bytes)} "
                f"({(result.prediction_error or 0) * 100:+.1f}% vs measured)",
                highlight=False,
            )
        console.print(
            f"  steps        median {result.median_step_s:.3f} s, {result.throughput:.1f} samples/s "
            f"(warm-up {result.step_times_s[0]:.2f} s)",
            highlight=False,
        )
        on = ", ".join(result.plans_on) or "none"
        console.print(
            f"  ORT plans    ON: {escape(on)}; {result.recomputed_nodes if result.recomputed_nodes is not None else '?'} "
            f"nodes recomputed; {result.plans_seen or 0} plans listed",
            highlight=False,
            soft_wrap=True,
        )
    if result.plans_off:
        console.print(
            f"  [yellow]ignored[/]      ORT did not report {escape(', '.join(result.plans_off))} ON: it ignored "
            f"{'this entry' if len(result.plans_off) == 1 else 'these entries'}, which saved nothing",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"  run folder   [bold]{escape(result.run_dir)}[/]", highlight=False, soft_wrap=True)
