"""``memopt scan``: a training step's recompute plans with their savings (``Backend.scan``): ORT's from
the training graph alone, at any size; plain PyTorch's from a captured step."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from functools import singledispatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memopt.backends import choose_backend
from memopt.backends.base import OrtScanOptions, ScanRequest, TorchScanOptions
from memopt.backends.ort.commands import OrtScanReport
from memopt.backends.ort.scan import ScanReport, fold_layers
from memopt.backends.ort.scan.patterns import Pattern
from memopt.backends.torch.commands import TorchScanReport
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
)
from memopt.cli.progress import CommandProgress
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RecipeTarget
from memopt.errors import MemoptError
from memopt.graph.polynomial import Polynomial
from memopt.recipes import DEFAULT_RECIPE
from memopt.run import DEFAULT_RUNS_DIR
from memopt.run.files import check_write_target, replace_atomically
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
    """What recompute could save, plan by plan: ORT's plans, or (--backend torch) PyTorch's per module and op.

    With ORT, the stashed activations ORT could recompute, grouped into ORT's plans, from the
    training graph of a recipe's or command's short probe or of an ONNX file. With --backend torch,
    what autograd keeps for backward, grouped by module pattern and aten op, with each plan's
    saving as a polynomial in batch and sequence and its recompute time.
    """
    if as_json and as_csv:
        raise MemoptError("choose one of --json and --csv")
    chosen_backend = choose_backend(backend)
    chosen_backend.backend.prepare()
    chosen = choose_target(target, command)
    # A recipe's batch is built at --seq; an ONNX file or a command has no recipe to pass it to.
    given = TargetOptions(seq, size, option, hf_task, target_seq)
    recipe = isinstance(chosen, RecipeTarget)
    ort = OrtScanOptions(
        seq=seq,
        target_seq=target_seq,
        dims=parse_dims_option(dims),
        ort_version=ort_version,
        basic=basic,
        layerwise=layerwise,
        loss=loss,
    )
    if plot is not None:
        _check_plot_path(plot)  # before the scan, not after it
    request = ScanRequest(
        target=chosen,
        options=(given if recipe else replace(given, seq=None, target_seq=None)).options_for(chosen),
        batch=batch,
        probe_batch=probe_batch,
        runs_dir=runs_dir,
        ort=ort,
        torch=TorchScanOptions(fake=fake),
    )
    status = error_console if as_json or as_csv else console
    scanned = chosen_backend.backend.scan(request, CommandProgress(chosen_backend.line(), status, python))
    _show(scanned, _View(as_json, as_csv, details, plot, status))


@dataclass(frozen=True)
class _View:
    """How the command prints a scan: ``--json``, ``--csv``, the table (``--details``), ``--plot``."""

    as_json: bool
    as_csv: bool
    details: bool
    plot: Path | None
    status: Console  # where lines beside the result go


@singledispatch
def _show(scanned: object, view: _View) -> None:
    raise TypeError(f"no view of {type(scanned).__name__}")


@_show.register
def _(scanned: OrtScanReport, view: _View) -> None:
    report, values, version, differences = scanned.report, scanned.values, scanned.version, scanned.differences
    frame = plans_frame(report, values if not scanned.missing else None)
    description = scanned.loaded.description
    if view.as_json:
        sys.stdout.write(json.dumps(_json(report, values, description, version, list(differences)), indent=2) + "\n")
    elif view.as_csv:
        sys.stdout.write(frame.to_csv(index=False))
    else:
        _print_table(report, frame, values, description, version, view.details)
    if view.plot is not None:
        unknown = scanned.missing or scanned.unnamed
        if unknown:
            raise MemoptError(f"--plot needs values for {', '.join(unknown)}")
        from memopt.backends.ort.scan.plot import plot_scan

        replace_atomically(view.plot, plot_scan(report, values, _image_format(view.plot)))
        view.status.print(f"plot written to {view.plot}", markup=False, highlight=False)


@_show.register
def _(scanned: TorchScanReport, view: _View) -> None:
    _print_torch_scan(scanned.scanned, scanned.label, scanned.fake)


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
