"""``memopt parse``: the recompute plans ORT printed, their savings, and the config for a subset."""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from memopt.cli import app, console, error_console
from memopt.cli.dims import config_version, parse_dims_option
from memopt.cli.show import print_config
from memopt.errors import MemoptError
from memopt.logparse import ParseResult, Plan, Summary, parse_file, plans_dataframe, require_summaries
from memopt.ort.config import parse_config_string
from memopt.units import format_bytes

__all__ = ["parse_command"]


@app.command("parse")
def parse_command(
    logs: list[str] = typer.Argument(..., help="ORT training logs; '-' reads standard input."),
    dims: str | None = typer.Option(
        None, "--dims", help="Evaluate savings at these dims, e.g. ids_dim0=32,ids_dim1=512 (others come from the log)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every summary as JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="Print one CSV row per plan."),
    enable: list[str] = typer.Option(
        [], "--enable", "-e", help="Plan to enable (number, subgraph or config key; repeatable); prints its config."
    ),
    ort_version: str | None = typer.Option(
        None, "--ort-version", help="Write the config for this ORT release (default: the log's)."
    ),
    config_out: Path | None = typer.Option(None, "--config-out", help="For ORT 1.19: write the JSON config file here."),
    force: bool = typer.Option(False, "--force", help="Overwrite --config-out if it exists."),
) -> None:
    """Read every memory-optimizer summary in LOGS and list its plans, largest saving first."""
    if as_json and as_csv:
        raise MemoptError("choose one of --json and --csv")
    user_dims = parse_dims_option(dims)
    results = _read_all(logs)
    if as_json:
        sys.stdout.write(json.dumps([_result_json(result, user_dims) for result in results], indent=2) + "\n")
    elif as_csv:
        _print_csv(results, user_dims)
    else:
        for result in results:
            _print_result(result, user_dims)
    if enable:
        summary = _latest_summary_with_plans(results)
        version = config_version(ort_version, summary)
        keys = ",".join(_select_plan(summary, wanted).config_key for wanted in enable)
        entries = parse_config_string(keys, version).entries
        known = {key.rsplit(":", 1)[0] for plan in summary.plans for key in plan.config_key.split(",")}
        print_config(
            entries,
            version,
            known,
            out=config_out,
            force=force,
            console=error_console if as_json or as_csv else console,
        )


def _read_all(logs: list[str]) -> list[ParseResult]:
    results: list[ParseResult] = []
    problems: list[MemoptError] = []
    for log in logs:
        try:
            results.append(require_summaries(parse_file(log)))
        except MemoptError as err:
            problems.append(err)
    if not results:
        raise problems[0] if len(problems) == 1 else MemoptError("; ".join(map(str, problems)))
    for problem in problems:
        error_console.print(f"[yellow]warning:[/] {problem}", highlight=False, soft_wrap=True)
    return results


def _dims_for(summary: Summary, user_dims: dict[str, int]) -> dict[str, int]:
    return {**summary.dims, **user_dims}


def _saving(plan: Plan, summary: Summary, user_dims: dict[str, int]) -> float | None:
    """Bytes at the user's dims (over the logged ones); unknown symbols are an error."""
    if not user_dims:
        return plan.saving_at_logged_dims
    return plan.saving_at(_dims_for(summary, user_dims))


def _sorted_plans(summary: Summary, user_dims: dict[str, int]) -> list[tuple[Plan, float | None]]:
    rows = [(plan, _saving(plan, summary, user_dims)) for plan in summary.plans]
    return sorted(rows, key=lambda row: -1.0 if row[1] is None else row[1], reverse=True)


def _print_result(result: ParseResult, user_dims: dict[str, int]) -> None:
    for warning in result.warnings:
        error_console.print(f"[yellow]warning:[/] {result.source}: {warning}", highlight=False, soft_wrap=True)
    for summary in result.summaries:
        dims = _dims_for(summary, user_dims)
        shown_dims = ", ".join(f"{name}={value}" for name, value in dims.items()) or "none logged"
        where = f"{result.source}, line {summary.first_line}" + (f", rank {summary.stream}" if summary.stream else "")
        state = {True: "ON", False: "OFF", None: "?"}[summary.memory_optimizer_on]
        console.print(
            f"[bold]{where}[/]: ORT {summary.versions}, memory optimizer {state}"
            + (f" ({summary.optimization_level})" if summary.optimization_level else "")
            + (f", config {summary.user_config}" if summary.user_config else ""),
            highlight=False,
        )
        console.print(
            f"  dims: {shown_dims}" + (" (--dims over the log's)" if user_dims else " (first batch, from the log)"),
            highlight=False,
        )
        if summary.total_recomputed_nodes is not None or summary.node_events:
            count = (
                summary.total_recomputed_nodes
                if summary.total_recomputed_nodes is not None
                else len(summary.node_events)
            )
            console.print(f"  recomputed nodes: {count}", highlight=False)
        if summary.plans:
            console.print(_plan_table(summary, user_dims))


def _plan_table(summary: Summary, user_dims: dict[str, int]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("Plan", justify="right", no_wrap=True)
    table.add_column("State", no_wrap=True)
    table.add_column("Config", overflow="fold", min_width=20)
    table.add_column("Freq", justify="right", no_wrap=True)
    table.add_column("Saving" + (" at --dims" if user_dims else ""), justify="right", no_wrap=True)
    table.add_column("ORT Max Saving", justify="right", no_wrap=True)
    table.add_column("Saving Symbolic", overflow="fold")
    for plan, saving in _sorted_plans(summary, user_dims):
        table.add_row(
            "" if plan.plan_number is None else str(plan.plan_number),
            {True: "ON", False: "OFF", None: "?"}[plan.enabled],
            plan.config_key,
            "" if plan.frequency is None else str(plan.frequency),
            "" if saving is None else f"{saving:,.0f} ({format_bytes(saving)})",
            "" if plan.max_saving_bytes is None else f"{plan.max_saving_bytes:,}",
            "" if plan.saving_symbolic is None else str(plan.saving_symbolic),
        )
    return table


def _result_json(result: ParseResult, user_dims: dict[str, int]) -> dict[str, object]:
    summaries = []
    for summary in result.summaries:
        document = _plain(dataclasses.asdict(summary))
        document["versions"] = str(summary.versions)
        for plan_document, plan in zip(document["plans"], summary.plans):
            plan_document["saving_at_dims"] = _saving(plan, summary, user_dims)
        summaries.append(document)
    return {
        "source": result.source,
        "lines_read": result.lines_read,
        "warnings": list(result.warnings),
        "ort_errors": list(result.ort_errors),
        "summaries": summaries,
    }


def _plain(value: object) -> Any:
    """``dataclasses.asdict`` output with expressions and enums as text."""
    if isinstance(value, dict):
        if set(value) == {"root", "text"}:
            return value["text"]
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Enum):
        return value.name.lower()
    return value


def _print_csv(results: list[ParseResult], user_dims: dict[str, int]) -> None:
    import pandas as pd

    frames = []
    for result in results:
        frame = plans_dataframe(result)
        frame["saving_at_dims"] = [
            _saving(plan, summary, user_dims) for summary in result.summaries for plan in summary.plans
        ]
        frames.append(frame)
    pd.concat(frames, ignore_index=True).to_csv(sys.stdout, index=False)


def _latest_summary_with_plans(results: list[ParseResult]) -> Summary:
    for result in reversed(results):
        for summary in reversed(result.summaries):
            if summary.plans:
                return summary
    raise MemoptError("--enable: the logs list no plans to enable")


def _select_plan(summary: Summary, wanted: str) -> Plan:
    wanted = wanted.strip()
    number = wanted.removeprefix("Plan").strip()
    for plan in summary.plans:
        if (number.isdigit() and plan.plan_number == int(number)) or wanted in (plan.subgraph, plan.config_key):
            return plan
    if number.isdigit() and all(plan.plan_number is None for plan in summary.plans):
        ordered = _sorted_plans(summary, {})
        if 1 <= int(number) <= len(ordered):
            return ordered[int(number) - 1][0]
    choices = ", ".join(str(plan.plan_number or plan.subgraph) for plan in summary.plans)
    raise MemoptError(
        f"--enable {wanted!r} matches no plan of the summary at line {summary.first_line} (plans: {choices})"
    )
