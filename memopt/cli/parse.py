"""``memopt parse``: the recompute plans ORT printed, their savings, and the config for a subset.

Everything shown comes from the logs, so it is printed as plain text, never as rich markup.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from memopt.backends.ort.config import parse_config_string
from memopt.backends.ort.logparse import (
    STEP_MEMORY_COLUMNS,
    ParseResult,
    Plan,
    StepMemory,
    Summary,
    parse_file,
    plans_dataframe,
    require_summaries,
    step_memory_dataframe,
)
from memopt.cli import app, console, error_console
from memopt.cli.dims import config_version, parse_dims_option
from memopt.cli.tables import add_entry_column, print_table
from memopt.errors import MemoptError
from memopt.graph.expr import Expression, ExpressionError
from memopt.units import format_bytes

__all__ = ["parse_command"]

_STEP_MEMORY_FIGURES = tuple(column for column in STEP_MEMORY_COLUMNS if column.endswith("_mib"))


@app.command("parse")
def parse_command(
    logs: list[str] = typer.Argument(..., help="ORT training logs; '-' reads standard input."),
    dims: str | None = typer.Option(
        None, "--dims", help="Evaluate savings at these dims, e.g. ids_dim0=32,ids_dim1=512 (others come from the log)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every summary as JSON."),
    as_csv: bool = typer.Option(
        False, "--csv", help="Print one CSV row per plan (per-step memory lines follow as a second table)."
    ),
    enable: list[str] = typer.Option(
        [], "--enable", "-e", help="Plan to enable (number, subgraph or config key; repeatable); prints its config."
    ),
    ort_version: str | None = typer.Option(
        None, "--ort-version", help="Write the config for this ORT release (default: the log's)."
    ),
    config_out: Path | None = typer.Option(None, "--config-out", help="For ORT 1.19: write the JSON config file here."),
    force: bool = typer.Option(False, "--force", help="Overwrite --config-out if it is a regular file."),
) -> None:
    """ORT: list the recompute plans in ORT's LOGS, largest saving first.

    Reads every memory-optimizer summary (and per-step memory line) in LOGS. A log that cannot
    be read is reported and the others still shown; the exit status is then 2.
    """
    if as_json and as_csv:
        raise MemoptError("choose one of --json and --csv")
    if config_out is not None:
        from memopt.run.files import check_write_target  # only for a config to write, as print_config below

        check_write_target(config_out, overwrite=force)  # before the logs are read and shown
    user_dims = parse_dims_option(dims)
    results, failures = _read_all(logs)
    evaluation = _Evaluation(user_dims)
    if as_json:
        documents = [_result_json(result, evaluation) for result in results]
        documents += [{"source": source, "error": str(problem)} for source, problem in failures]
        sys.stdout.write(json.dumps(documents, indent=2) + "\n")
    elif as_csv and results:
        _print_csv(results, evaluation)
    else:
        for result in results:
            _print_result(result, evaluation)
    for warning in evaluation.warnings:
        _warn(warning)
    for source, problem in failures:
        error_console.print(Text.assemble(("error: ", "bold red"), f"{source}: {problem}"), soft_wrap=True)
    if enable:
        if not results:
            raise typer.Exit(2)
        from memopt.cli.show import print_config  # trials' renderings: only needed for a config

        summary = _latest_summary_with_plans(results)
        version = config_version(ort_version, summary)
        keys = ",".join(_select_plan(summary, wanted).key for wanted in enable)
        entries = parse_config_string(keys, version).entries
        known = summary.plan_cells
        print_config(
            entries,
            version,
            known,
            out=config_out,
            force=force,
            console=error_console if as_json or as_csv else console,
        )
    if failures:
        raise typer.Exit(2)


def _read_all(logs: list[str]) -> tuple[list[ParseResult], list[tuple[str, MemoptError]]]:
    """Each log parsed on its own: what could be read, and why the others could not."""
    results: list[ParseResult] = []
    failures: list[tuple[str, MemoptError]] = []
    for log in logs:
        try:
            result = parse_file(log)
            results.append(result if result.step_memory else require_summaries(result))
        except MemoptError as err:
            failures.append((log, err))
    if not results and len(failures) == 1:
        raise failures[0][1]
    return results, failures


def _warn(text: str) -> None:
    error_console.print(Text.assemble(("warning: ", "yellow"), text), soft_wrap=True)


class _Evaluation:
    """Savings at the user's dims (over the logged ones); one that cannot be evaluated is
    unknown, with a warning. A symbol no dims name is the user's error."""

    def __init__(self, user_dims: dict[str, int]) -> None:
        self.user_dims = user_dims
        self.warnings: list[str] = []

    def dims_for(self, summary: Summary) -> dict[str, int]:
        return {**summary.dims, **self.user_dims}

    def saving(self, plan: Plan, summary: Summary) -> float | None:
        if not self.user_dims:
            return plan.saving_at_logged_dims
        try:
            return plan.saving_at(self.dims_for(summary))
        except ExpressionError as err:
            self.warnings.append(f"{plan.key}: saving at --dims unknown: {err}")
            return None


def _sorted_plans(summary: Summary, evaluation: _Evaluation) -> list[tuple[Plan, float | None]]:
    rows = [(plan, evaluation.saving(plan, summary)) for plan in summary.plans]
    return sorted(rows, key=lambda row: -1.0 if row[1] is None else row[1], reverse=True)


def _print_result(result: ParseResult, evaluation: _Evaluation) -> None:
    for warning in result.warnings:
        _warn(f"{result.source}: {warning}")
    for summary in result.summaries:
        dims = evaluation.dims_for(summary)
        shown_dims = ", ".join(f"{name}={value}" for name, value in dims.items()) or "none logged"
        where = f"{result.source}, line {summary.first_line}" + (f", rank {summary.stream}" if summary.stream else "")
        state = {True: "ON", False: "OFF", None: "?"}[summary.memory_optimizer_on]
        console.print(
            Text.assemble(
                (where, "bold"),
                f": ORT {summary.versions}, memory optimizer {state}"
                + (f" ({summary.optimization_level})" if summary.optimization_level else "")
                + (f", config {summary.user_config}" if summary.user_config else ""),
            )
        )
        source_of_dims = " (--dims over the log's)" if evaluation.user_dims else " (first batch, from the log)"
        console.print(Text(f"  dims: {shown_dims}{source_of_dims}"))
        if summary.total_recomputed_nodes is not None or summary.node_events:
            count = (
                summary.total_recomputed_nodes
                if summary.total_recomputed_nodes is not None
                else len(summary.node_events)
            )
            console.print(Text(f"  recomputed nodes: {count}"))
        if summary.plans:
            print_table(_plan_table(summary, evaluation))
    if result.step_memory:
        console.print(Text.assemble((result.source, "bold"), ": ORT per-step memory (MiB)"))
        console.print(_step_memory_table(result.step_memory))


def _plan_table(summary: Summary, evaluation: _Evaluation) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("Plan", justify="right", no_wrap=True)
    table.add_column("State", no_wrap=True)
    add_entry_column(table, "Config", (plan.key for plan in summary.plans))
    table.add_column("Freq", justify="right", no_wrap=True)
    table.add_column("Saving" + (" at --dims" if evaluation.user_dims else ""), justify="right", no_wrap=True)
    table.add_column("ORT Max Saving", justify="right", no_wrap=True)
    table.add_column("Saving Symbolic", overflow="fold", min_width=20)
    for plan, saving in _sorted_plans(summary, evaluation):
        cells = (
            "" if plan.plan_number is None else str(plan.plan_number),
            {True: "ON", False: "OFF", None: "?"}[plan.enabled],
            plan.key,
            "" if plan.frequency is None else str(plan.frequency),
            "" if saving is None else f"{saving:,.0f} ({format_bytes(saving)})",
            "" if plan.max_saving_bytes is None else f"{plan.max_saving_bytes:,}",
            "" if plan.saving_symbolic is None else str(plan.saving_symbolic),
        )
        table.add_row(*map(Text, cells))
    return table


def _step_memory_table(records: tuple[StepMemory, ...]) -> Table:
    figures = [name for name in _STEP_MEMORY_FIGURES if any(getattr(record, name) is not None for record in records)]
    table = Table(show_edge=False, pad_edge=False)
    for title in ("Line", "Rank", "Step", "Phase"):
        table.add_column(title, justify="left" if title == "Phase" else "right", no_wrap=True)
    for name in figures:
        table.add_column(name.removesuffix("_mib").replace("_", " ").capitalize(), justify="right", no_wrap=True)
    for record in sorted(records, key=lambda r: (r.rank is None, r.rank or 0, r.line_number)):
        rank = "?" if record.rank is None else str(record.rank)
        if record.world_size is not None:
            rank += f"/{record.world_size}"
        cells = [str(record.line_number), rank, "?" if record.step is None else str(record.step), record.phase or "?"]
        cells += ["?" if getattr(record, name) is None else f"{getattr(record, name):,}" for name in figures]
        table.add_row(*map(Text, cells))
    return table


def _result_json(result: ParseResult, evaluation: _Evaluation) -> dict[str, object]:
    summaries = []
    for summary in result.summaries:
        document = _plain(summary)
        document["versions"] = str(summary.versions)
        for plan_document, plan in zip(document["plans"], summary.plans):
            plan_document["saving_at_dims"] = evaluation.saving(plan, summary)
        summaries.append(document)
    return {
        "source": result.source,
        "lines_read": result.lines_read,
        "warnings": list(result.warnings),
        "ort_errors": list(result.ort_errors),
        "summaries": summaries,
        "step_memory": [_plain(record) for record in result.step_memory],
    }


def _plain(value: object) -> Any:
    """Dataclasses as dicts, expressions as their text and enums as names (an expression's
    tree, which can be thousands of nodes deep, is never walked)."""
    if isinstance(value, Expression):
        return value.text
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Enum):
        return value.name.lower()
    return value


def _print_csv(results: list[ParseResult], evaluation: _Evaluation) -> None:
    """One row per plan; when the logs hold per-step memory lines, their rows follow after an
    empty line, under their own header."""
    import pandas as pd

    frames = []
    for result in results:
        frame = plans_dataframe(result)
        frame["saving_at_dims"] = [
            evaluation.saving(plan, summary) for summary in result.summaries for plan in summary.plans
        ]
        frames.append(frame)
    pd.concat(frames, ignore_index=True).to_csv(sys.stdout, index=False)
    memory = [step_memory_dataframe(result) for result in results if result.step_memory]
    if memory:
        sys.stdout.write("\n")
        pd.concat(memory, ignore_index=True).to_csv(sys.stdout, index=False)


def _latest_summary_with_plans(results: list[ParseResult]) -> Summary:
    for result in reversed(results):
        for summary in reversed(result.summaries):
            if summary.plans:
                return summary
    raise MemoptError("--enable: the logs list no plans to enable")


def _select_plan(summary: Summary, wanted: str) -> Plan:
    wanted = wanted.strip()
    number_text = wanted.removeprefix("Plan").strip()
    number = int(number_text) if number_text.isascii() and number_text.isdigit() and len(number_text) < 10 else None
    for plan in summary.plans:
        if (number is not None and plan.plan_number == number) or wanted in (plan.subgraph, plan.key):
            return plan
    if number is not None and all(plan.plan_number is None for plan in summary.plans):
        ordered = _sorted_plans(summary, _Evaluation({}))
        if 1 <= number <= len(ordered):
            return ordered[number - 1][0]
    choices = ", ".join(str(plan.plan_number or plan.subgraph) for plan in summary.plans)
    raise MemoptError(
        f"--enable {wanted!r} matches no plan of the summary at line {summary.first_line} (plans: {choices})"
    )
