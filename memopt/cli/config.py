"""``memopt config``: check an ORTMODULE_MEMORY_OPT_CONFIG value, or write one, for an ORT release."""

from __future__ import annotations

from pathlib import Path

import typer

from memopt.backends.ort.config import (
    ENV_VAR,
    PlanKey,
    export_line,
    parse_config_string,
    read_config_file,
    refuse_unknown_entries,
    takes_json_file,
)
from memopt.backends.ort.logparse import Summary, parse_file, require_summaries
from memopt.cli import app, console, error_console
from memopt.cli.dims import config_version
from memopt.cli.show import print_config, print_validated
from memopt.errors import MemoptError
from memopt.run.files import check_write_target

__all__ = ["config_app", "print_config"]

config_app = typer.Typer(help="Check or write ORTMODULE_MEMORY_OPT_CONFIG for an ORT release.", no_args_is_help=True)
app.add_typer(config_app, name="config")

_VERSION_HELP = "ORT release the config is for (default: the --log's)."
_LOG_HELP = (
    "A log of the model (e.g. its probe's ort.log): entries its Plan table lacks are flagged (check) or refused (emit)."
)


@config_app.command("check")
def check_command(
    value: str = typer.Argument(
        ..., help="The variable's value: the config string (ORT <=1.18) or the JSON file path (1.19)."
    ),
    ort_version: str | None = typer.Option(None, "--ort-version", help=_VERSION_HELP),
    log: str | None = typer.Option(None, "--log", help=_LOG_HELP),
) -> None:
    """Say whether ORT accepts VALUE, why not, and what it would silently ignore."""
    summary = _summary_of(log)
    version = config_version(ort_version, summary)
    known = _known_plans(summary)
    if takes_json_file(version):
        if not Path(value).is_file():
            raise MemoptError(
                f"ORT {version} reads {ENV_VAR} as a JSON file path and {value!r} is no file "
                "(ORT: Fail to parse from json file)"
            )
        config = read_config_file(value, version, known)
    else:
        config = parse_config_string(value, version, known)
    print_validated(config, version, console)
    console.print(
        export_line(str(Path(value).resolve()) if takes_json_file(version) else value),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@config_app.command("emit")
def emit_command(
    entries: list[str] = typer.Argument(
        ..., help="Entries <subgraph>:<type>:<count>, or a bare subgraph for <subgraph>:1:-1."
    ),
    ort_version: str | None = typer.Option(None, "--ort-version", help=_VERSION_HELP),
    out: Path | None = typer.Option(None, "--out", help="ORT 1.19: the JSON file to write (atomically)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it is a regular file."),
    log: str | None = typer.Option(None, "--log", help=_LOG_HELP),
) -> None:
    """Write the config enabling ENTRIES, in the form VERSION reads, and the export line."""
    if out is not None:
        check_write_target(out, overwrite=force)  # before any output: the refusal is the one line
    summary = _summary_of(log)
    version = config_version(ort_version, summary)
    text = PlanKey.from_short(entries)
    parsed = parse_config_string(text, version)
    known = _known_plans(summary)
    if summary is not None:
        refuse_unknown_entries(parsed.entries, known, f"the Plan table in {log}")
    else:
        error_console.print(
            "[yellow]warning:[/] not checked against the model's plans: give --log (its probe's ort.log) "
            "to refuse entries ORT would ignore",
            highlight=False,
            soft_wrap=True,
        )
    print_config(list(parsed.entries), version, known, out=out, force=force, console=console)


def _summary_of(log: str | None) -> Summary | None:
    if log is None:
        return None
    summaries = [summary for summary in require_summaries(parse_file(log)).run_summaries if summary.plans]
    return summaries[-1] if summaries else None


def _known_plans(summary: Summary | None) -> set[str]:
    if summary is None:
        return set()
    return set(summary.plan_cells)
