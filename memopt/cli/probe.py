"""``memopt probe``: run a recipe briefly under ORTModule and keep what ORT printed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import typer
from rich.markup import escape

from memopt.backends.ort.logparse import parse_file
from memopt.cli import app, console
from memopt.cli.options import (
    BatchOption,
    CommandOption,
    DeviceOption,
    HfTaskOption,
    OptionalRecipeArgument,
    OptionPairs,
    PythonOption,
    RunOptions,
    RunsDirOption,
    SeqOption,
    SizeOption,
    StepsOption,
    TargetOptions,
    TargetSeqOption,
    TimeoutOption,
    choose_target,
    run_settings,
)
from memopt.core import Target, runnable
from memopt.errors import MemoptError
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.probe import ProbeResult, probe
from memopt.units import format_bytes

__all__ = ["probe_command"]


@app.command("probe")
def probe_command(
    recipe: OptionalRecipeArgument = None,
    command: CommandOption = None,
    batch: BatchOption = 8,
    seq: SeqOption = None,
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    hf_task: HfTaskOption = None,
    target_seq: TargetSeqOption = None,
    steps: StepsOption = DEFAULT_STEPS,
    device: DeviceOption = "auto",
    log_level: str = typer.Option(
        "INFO",
        "--log-level",
        help="ORTModule log level: INFO prints the Plan table; DEVINFO adds ORT's C++ summary; VERBOSE everything.",
    ),
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    python: PythonOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """ORT: run RECIPE for a few ORTModule training steps and save ORT's log, graphs, memory and timings."""
    target = runnable(choose_target(recipe, command))
    settings = run_settings(
        target,
        batch,
        TargetOptions(seq, size, option, hf_task, target_seq),
        RunOptions(steps, device, timeout, python, runs_dir),
        shell_config_applies=True,
    )
    with console.status(f"Probing {escape(str(target))} at batch {batch} (export, session build, {steps + 1} steps)…"):
        result = probe(settings, batch, log_level=log_level.upper())
    run = result.run
    if not run.ran:
        raise MemoptError(f"{run.status.failure(target.noun)}: {run.error} (log: {run.log_path})")
    _summarise(target, batch, settings.options, result)


def _plans_line(log: Path) -> str:
    summaries = [s for s in parse_file(log).run_summaries if s.plans]
    if not summaries:
        return "ORT printed no memory-optimizer plans (nothing it can recompute)"
    plans = summaries[-1].plans
    top = max(plans, key=lambda p: p.max_saving_bytes or 0)
    state = "ON" if summaries[-1].memory_optimizer_on else "OFF"
    return (
        f"{len(plans)} in ORT's Plan table (memory optimizer {state}); largest {top.key} "
        f"saves {format_bytes(top.max_saving_bytes)} at this batch — `memopt parse {log}` lists them"
    )


def _summarise(target: Target, batch: int, options: Mapping[str, object], result: ProbeResult) -> None:
    run = result.run
    stack = run.stack
    where = run.cuda_device_name or run.device.upper() if run.device else "?"
    shown = ", ".join(f"{k}={v}" for k, v in options.items())
    console.print(
        f"[bold]Probe of {escape(str(target))}[/] ({escape(shown or 'default options')}) at batch {batch} on {escape(where)}"
    )
    console.print(
        f"  stack        ORT {stack.get('ort_version')} ({stack.get('ort_package')}), torch {stack.get('torch_version')}"
    )
    measured = ", ".join(f"{t:.3f}" for t in run.step_times_s[1:])
    console.print(
        f"  steps        warm-up {run.step_times_s[0]:.2f} s (export + session); "
        f"measured {measured} s (median {run.median_step_s:.3f} s)"
    )
    label = "peak RSS" if run.memory.memory_kind == "rss" else "peak allocated"
    console.print(
        f"  memory       {label} {format_bytes(run.memory.peak_over_run_bytes)} over the run, "
        f"{format_bytes(run.memory.peak_bytes)} in the measured steps"
    )
    console.print(f"  plans        {_plans_line(run.log_path)}", markup=False)
    graph = result.execution_graph
    console.print(
        f"  graphs       {len(result.graphs)} ONNX files; execution training graph: {graph or 'not saved'}",
        markup=False,
    )
    console.print(f"  log          {run.log_path}", markup=False)
    console.print(f"  run folder   [bold]{escape(str(run.run_dir))}[/]")
