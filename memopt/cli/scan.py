"""``memopt scan``: ORT's recompute plans from the graph alone, with savings at any size."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memopt.backends import Backend, choose_backend
from memopt.cli import app, console, error_console
from memopt.cli.dims import parse_dims_option
from memopt.cli.options import (
    BackendOption,
    CommandOption,
    HfTaskOption,
    OptionPairs,
    PythonOption,
    RunsDirOption,
    SizeOption,
    TargetOptions,
    TargetSeqOption,
    checked_count,
    choose_target,
    command_notes,
)
from memopt.cli.show import say
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RecipeTarget, runnable
from memopt.errors import MemoptError
from memopt.graph.polynomial import Polynomial
from memopt.graph.sizes import resolve_dims
from memopt.ort.stack import inspect_stack
from memopt.recipes import DEFAULT_RECIPE
from memopt.run import DEFAULT_RUNS_DIR
from memopt.run.files import check_write_target, replace_atomically
from memopt.run.settings import RunSettings
from memopt.run.target import ProbedGraph, load_target
from memopt.scan import ProbeLevel, ScanReport, fold_layers, scan_graph
from memopt.scan.parity import logged_parity
from memopt.scan.patterns import Pattern, order_patterns
from memopt.scan.savings import UNKNOWN_DIM_PREFIX
from memopt.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from memopt.backends.torch.scan import TorchScan

__all__ = ["scan_command"]


@app.command("scan")
def scan_command(
    target: str | None = typer.Argument(
        None,
        help=f"A recipe (built-in name, .py file, package.module[:attr]; default {DEFAULT_RECIPE}), an ONNX training graph with a YieldOp, or a forward-only ONNX model.",
        show_default=False,
    ),
    command: CommandOption = None,
    batch: int | None = typer.Option(
        None,
        "--batch",
        "-b",
        callback=checked_count,
        help="Evaluate savings at this batch size (every input's first dim).",
    ),
    seq: int | None = typer.Option(
        None,
        "--seq",
        callback=checked_count,
        help="Evaluate savings at this sequence length (second dim of token inputs).",
    ),
    dims: str | None = typer.Option(
        None, "--dims", help="Exact dim values, e.g. input_ids_dim0=32,input_ids_dim1=512."
    ),
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    hf_task: HfTaskOption = None,
    target_seq: TargetSeqOption = None,
    ort_version: str | None = typer.Option(
        None,
        "--ort-version",
        help="Apply this ORT release's rules (default: the ORT that built the graph, else the installed one).",
    ),
    basic: bool = typer.Option(
        False, "--basic", help="Probe level Basic (cheap ops only) instead of ORTModule's Advanced."
    ),
    layerwise: bool = typer.Option(
        False, "--layerwise", help="Analyse as ORTMODULE_MEMORY_OPT_LEVEL=1/2 does (transformer layer boundaries)."
    ),
    details: bool = typer.Option(
        False, "--details", help="List every occurrence: entry node, module and recomputed nodes."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plans as JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="Print the plans as CSV."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write a PNG/SVG: savings per plan and stashed memory vs batch."
    ),
    loss: str = typer.Option(
        "outside",
        "--loss",
        help="Forward-only ONNX: where the loss is. outside (ORTModule's case: computed in PyTorch), cross-entropy or mse (added to the graph).",
    ),
    probe_batch: int = typer.Option(
        2, "--probe-batch", callback=checked_count, help="Batch of the short probe that builds a recipe's graph."
    ),
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    python: PythonOption = None,
    backend: BackendOption = None,
    fake: bool = typer.Option(
        False,
        "--fake",
        help="--backend torch: scan with fake tensors (no memory, any size; recompute times not measured).",
    ),
) -> None:
    """Find the stashed activations ORT could recompute, grouped into ORT's plans, with their savings."""
    if as_json and as_csv:
        raise MemoptError("choose one of --json and --csv")
    chosen_backend = choose_backend(backend)
    chosen = choose_target(target, command)
    if chosen_backend.backend is Backend.TORCH:
        # Imported here: an ORT scan loads no torch in this process.
        from memopt.backends.torch.command_scan import scan_command as scan_job
        from memopt.backends.torch.scan import scan_recipe

        options = TargetOptions(seq, size, option, hf_task, target_seq).options_for(chosen)
        if fake and not isinstance(chosen, RecipeTarget):
            raise MemoptError("--fake scans a recipe in this process; a command's model is captured in its own run")
        say(chosen_backend.line())
        if not isinstance(chosen, RecipeTarget):
            settings = RunSettings(
                target=runnable(chosen), python=command_notes(chosen, python, batch or probe_batch), runs_dir=runs_dir
            )
            with console.status(f"Capturing a training forward of {escape(str(chosen))} in three short runs…"):
                scanned = scan_job(settings, batch or probe_batch)
        else:
            with console.status(f"Capturing a training step of {escape(str(chosen))} at a few sizes…"):
                scanned = scan_recipe(chosen.load(options), batch or probe_batch, timed=not fake)
        _print_torch_scan(scanned, str(chosen), fake)
        return
    python = command_notes(chosen, python, probe_batch)
    # A recipe's batch is built at --seq; an ONNX file or a command has no recipe to pass it to.
    recipe = isinstance(chosen, RecipeTarget)
    given = TargetOptions(seq, size, option, hf_task, target_seq)
    options = (given if recipe else replace(given, seq=None, target_seq=None)).options_for(chosen)
    explicit_dims = parse_dims_option(dims)
    if plot is not None:
        _check_plot_path(plot)  # before the scan, not after it
    status = error_console if as_json or as_csv else console
    with status.status(f"Building the training graph of {escape(str(chosen))} (ORTModule export and session, once)…"):
        loaded = load_target(
            chosen, options=options, runs_dir=runs_dir, probe_batch=probe_batch, python=python, loss=loss
        )
    version = ort_version or loaded.ort_version or inspect_stack().ort_version
    if version is None:
        raise MemoptError("no ORT installed to take rules from; give --ort-version")
    level = ProbeLevel.BASIC if basic else ProbeLevel.ADVANCED
    report = scan_graph(loaded.graph, version, level=level, layer_boundary=layerwise)
    values = resolve_dims(
        report.inputs,
        report.symbols,
        batch=batch,
        seq=seq,
        target_seq=target_seq,
        explicit=explicit_dims,
        defaults=loaded.logged_dims,
    )
    # Said once the input is known good (the target loads, its ORT release has rules, its dims
    # are known names), so that bad input stays one error line.
    say(chosen_backend.line())
    report = replace(report, patterns=order_patterns(report.patterns, values))
    # ORT names a dim its shape inference cannot tell empty_dim_param<k>, with no value anywhere:
    # the plans that name one stay symbolic, as in ORT's own table; the others get bytes.
    unnamed = sorted(s for s in report.symbols - set(values) if s.startswith(UNKNOWN_DIM_PREFIX))
    missing = sorted(report.symbols - set(values) - set(unnamed))
    differences = _differences_from_probe(report, loaded, version, level)
    for warning in (*report.warnings, *differences):
        error_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    if not report.patterns and report.analysis.yield_order is None:
        raise MemoptError(f"{chosen}: {report.warnings[0] if report.warnings else 'nothing to scan'}")
    if missing:
        error_console.print(
            f"[yellow]warning:[/] no value for {escape(', '.join(missing))}: savings stay symbolic "
            "(give --batch/--seq or --dims)",
            highlight=False,
            soft_wrap=True,
        )
    if unnamed:
        error_console.print(
            f"[yellow]warning:[/] ORT knows no size for {escape(', '.join(unnamed))} (a dim its shape inference "
            "leaves unnamed): the plans naming it stay symbolic, as ORT prints them",
            highlight=False,
            soft_wrap=True,
        )
    frame = plans_frame(report, values if not missing else None)
    if as_json:
        sys.stdout.write(json.dumps(_json(report, values, loaded.description, version, differences), indent=2) + "\n")
    elif as_csv:
        sys.stdout.write(frame.to_csv(index=False))
    else:
        _print_table(report, frame, values, loaded.description, version, details)
    if plot is not None:
        if missing or unnamed:
            raise MemoptError(f"--plot needs values for {', '.join(missing or unnamed)}")
        from memopt.scan.plot import plot_scan

        replace_atomically(plot, plot_scan(report, values, _image_format(plot)))
        status.print(f"plot written to {plot}", markup=False, highlight=False)


def _print_torch_scan(scanned: TorchScan, label: str, fake: bool) -> None:
    at = (
        f"batch {scanned.batch}" + (f", seq {scanned.seq}" if scanned.seq else "") + (" (fake tensors)" if fake else "")
    )
    rows = [
        (
            str(row.plan),
            str(row.tensors),
            str(row.modules),
            format_bytes(row.saving_bytes),
            "not measured" if fake else f"{row.recompute_seconds * 1e3:.2f}",
            str(row.saving) if row.saving is not None else "not a polynomial in batch, seq",
        )
        for row in scanned.rows
    ]
    # As ORT's table: plans and figures whole on one line, so a plan copies whole; only the formula folds.
    table = Table(title=f"{label}: recompute plans for plain PyTorch at {at}", box=box.SIMPLE_HEAD)
    add_entry_column(table, "plan", (row[0] for row in rows))
    for index, header in enumerate(("tensors", "modules", "saving", "recompute (ms)"), start=1):
        width = max(len(header), *(len(row[index]) for row in rows)) if rows else len(header)
        table.add_column(header, justify="right", no_wrap=True, min_width=width)
    table.add_column("saving (bytes)", overflow="fold", min_width=12)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    print_table(table)
    console.print(
        f"activations kept for backward: {format_bytes(scanned.saved_bytes)} = {scanned.saved or 'no polynomial'} bytes",
        markup=False,
        highlight=False,
    )


def _differences_from_probe(report: ScanReport, loaded: ProbedGraph, version: str, level: ProbeLevel) -> list[str]:
    """One line per row where the scan differs from the Plan table ORT printed in the probe
    that built the graph (compared only where both analysed alike: same release, ORTModule's
    probe level, no layer boundaries)."""
    alike = loaded.ort_version == version and level is ProbeLevel.ADVANCED and not report.layer_boundary
    parity = logged_parity(report.patterns, loaded.log_path) if loaded.log_path is not None and alike else None
    if parity is None:
        return []
    return [f"differs from ORT's Plan table in the probe ({loaded.log_path}): {line}" for line in parity.differences()]


def _check_plot_path(plot: Path) -> None:
    folder = plot.parent
    if plot.is_dir():
        raise MemoptError(f"--plot {plot} is a folder; name the image file, e.g. {plot / 'plans.png'}")
    _image_format(plot)
    if not folder.is_dir():
        raise MemoptError(f"--plot {plot}: the folder {folder} does not exist")
    check_write_target(plot, overwrite=True)


def _image_format(plot: Path) -> str:
    """``png`` or ``svg``, from the file name."""
    image_format = plot.suffix.lower().removeprefix(".")
    if image_format not in ("png", "svg"):
        raise MemoptError(f"--plot needs a .png or .svg file name, not {plot.name!r}")
    return image_format


def plans_frame(report: ScanReport, dims: dict[str, int] | None) -> pd.DataFrame:
    """One row per plan, largest exact saving first when dims are known."""
    import pandas as pd  # only for this table: every other command starts without pandas

    rows = [{**_plan_fields(p, dims), "modules": ";".join(fold_layers(p.modules))} for p in report.patterns]
    frame = pd.DataFrame(
        rows,
        columns=[
            "config",
            "subgraph",
            "type",
            "frequency",
            "saving_symbolic",
            "ort_saving_symbolic",
            "saving_bytes",
            "ort_saving_bytes",
            "modules",
        ],
    )
    if dims is not None:
        frame = frame.sort_values("saving_bytes", ascending=False, kind="stable")
    return frame.reset_index(drop=True)


def _plan_fields(pattern: Pattern, dims: dict[str, int] | None) -> dict[str, object]:
    """A plan as a table or JSON row; byte figures only where ``dims`` give every symbol."""
    return {
        "config": pattern.key,
        "subgraph": pattern.subgraph,
        "type": pattern.kind.label,
        "frequency": pattern.frequency,
        "saving_symbolic": str(pattern.exact),
        "ort_saving_symbolic": str(pattern.ort),
        "saving_bytes": _bytes(pattern.exact, dims),
        "ort_saving_bytes": _bytes(pattern.ort, dims),
    }


def _bytes(polynomial: Polynomial, dims: dict[str, int] | None) -> float | None:
    return polynomial.evaluate(dims) if dims is not None and polynomial.symbols <= set(dims) else None


def _print_table(
    report: ScanReport, frame: pd.DataFrame, dims: dict[str, int], source: str, version: str, details: bool
) -> None:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(dims.items())) or "symbolic"
    console.print(
        f"[bold]memopt scan[/] {escape(source)}: ORT {version} rules (family {report.family})"
        f"{', layer-wise' if report.layer_boundary else ''}; sizes {shown}",
        highlight=False,
    )
    import pandas as pd

    rows: list[tuple[str, ...]] = []
    for index, row in frame.iterrows():
        saving = format_bytes(row.saving_bytes) if pd.notna(row.saving_bytes) else row.saving_symbolic
        ort = format_bytes(row.ort_saving_bytes) if pd.notna(row.ort_saving_bytes) else row.ort_saving_symbolic
        cells = (index + 1, row.config, row.frequency, saving, ort, row.modules.replace(";", ", ") or "-")
        rows.append(tuple(str(cell) for cell in cells))
    print_table(_plans_table(rows))
    stashed = _bytes(report.stashed, dims)
    if stashed is not None and report.patterns:
        console.print(
            f"Stashed activations without recompute: {format_bytes(stashed)}; "
            f"'Saving' counts every stashed output, 'ORT prints' what ORT's Plan table shows.",
            highlight=False,
        )
    if not report.patterns:
        console.print("No recomputable plans in this graph.")
    if details:
        for pattern in report.patterns:
            console.print(Text(pattern.key, style="bold"), highlight=False)
            for occurrence in pattern.occurrences:
                console.print(
                    f"  {occurrence.module or '-'}: {occurrence.entry} <- {' + '.join(occurrence.nodes)}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )


def _plans_table(rows: list[tuple[str, ...]]) -> Table:
    """Entries and figures whole on one line; only ``Where`` folds."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    add_entry_column(table, "ORT config entry", (row[1] for row in rows))
    for index, header in enumerate(("Freq", "Saving", "ORT prints"), start=2):
        width = max(len(header), *(len(row[index]) for row in rows)) if rows else len(header)
        table.add_column(header, justify="right", no_wrap=True, min_width=width)
    table.add_column("Where", overflow="fold", min_width=12)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _json(
    report: ScanReport, dims: dict[str, int], source: str, version: str, differences: list[str]
) -> dict[str, Any]:
    return {
        "source": source,
        "ort_version": version,
        "family": report.family,
        "layerwise": report.layer_boundary,
        "dims": dims,
        "stashed_symbolic": str(report.stashed),
        "stashed_bytes": _bytes(report.stashed, dims),
        "plans": [
            {
                **_plan_fields(p, dims),
                "occurrences": [
                    {"entry": o.entry, "module": o.module, "nodes": list(o.nodes), "saving_symbolic": str(o.exact)}
                    for o in p.occurrences
                ],
            }
            for p in report.patterns
        ],
        "warnings": list(report.warnings),
        "differences_from_ort": differences,
    }
