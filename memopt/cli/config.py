"""``memopt config``: check an ORTMODULE_MEMORY_OPT_CONFIG value, or write one, for an ORT release."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import typer
from rich.console import Console

from memopt.cli import app, console
from memopt.cli.dims import config_version
from memopt.errors import MemoptError
from memopt.logparse import Summary, parse_file, require_summaries
from memopt.ort.config import (
    ENV_VAR,
    ConfigEntry,
    ValidatedConfig,
    export_line,
    format_config_string,
    parse_config_string,
    read_config_file,
    render_json_config,
    takes_json_file,
    validate_entries,
    write_json_config,
)
from memopt.ort.version import OrtVersion

__all__ = ["config_app", "print_config"]

config_app = typer.Typer(help="Check or write ORTMODULE_MEMORY_OPT_CONFIG for an ORT release.", no_args_is_help=True)
app.add_typer(config_app, name="config")

_VERSION_HELP = "ORT release the config is for (default: the --log's)."
_LOG_HELP = "A log of the model: warns about subgraphs it has no plan for."


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
    _print_validated(config, version, console)
    console.print(
        export_line(str(Path(value).resolve()) if takes_json_file(version) else value), highlight=False, soft_wrap=True
    )


@config_app.command("emit")
def emit_command(
    entries: list[str] = typer.Argument(
        ..., help="Entries <subgraph>:<type>:<count>, or a bare subgraph for <subgraph>:1:-1."
    ),
    ort_version: str | None = typer.Option(None, "--ort-version", help=_VERSION_HELP),
    out: Path | None = typer.Option(None, "--out", help="ORT 1.19: the JSON file to write (atomically)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    log: str | None = typer.Option(None, "--log", help=_LOG_HELP),
) -> None:
    """Write the config enabling ENTRIES, in the form VERSION reads, and the export line."""
    summary = _summary_of(log)
    version = config_version(ort_version, summary)
    text = ",".join(entry if ":" in entry else f"{entry}:1:-1" for entry in entries)
    parsed = parse_config_string(text, version)
    print_config(list(parsed.entries), version, _known_plans(summary), out=out, force=force, console=console)


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
    _print_validated(validated, version, console)
    if not takes_json_file(version):
        if out is not None:
            raise MemoptError(f"ORT {version} takes the config string itself; --out is for 1.19 JSON files")
        console.print(export_line(format_config_string(entries, version)), highlight=False, soft_wrap=True)
        return
    if out is None:
        console.print(f"# ORT {version} reads a JSON file; save this as config.json (or pass --out):", highlight=False)
        console.print(render_json_config(entries).rstrip(), highlight=False, soft_wrap=True)
        console.print(export_line("config.json"), highlight=False)
        return
    path = write_json_config(entries, out, version, overwrite=force)
    console.print(f"# wrote {path}", highlight=False, soft_wrap=True)
    console.print(export_line(str(path)), highlight=False, soft_wrap=True)


def _print_validated(config: ValidatedConfig, version: OrtVersion, console: Console) -> None:
    for warning in config.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    shown = ", ".join(str(entry) for entry in config.entries) or "no entries"
    console.print(f"# ORT {version} accepts this config: {shown}", highlight=False, soft_wrap=True)


def _summary_of(log: str | None) -> Summary | None:
    if log is None:
        return None
    summaries = [summary for summary in require_summaries(parse_file(log)).summaries if summary.plans]
    return summaries[-1] if summaries else None


def _known_plans(summary: Summary | None) -> set[str]:
    if summary is None:
        return set()
    return {key.rsplit(":", 1)[0] for plan in summary.plans for key in plan.config_key.split(",")}
