"""The config a session hands back: where it goes and the shell line that applies it.

Working out the line (``export_lines``) never touches the disk, so views may call it as
often as they redraw; ``write_config`` writes the file the line names (ORT 1.19 reads a
JSON file, older releases the string itself) and belongs on a worker thread.

A config file is named by its content (``tune-<label>-b<batch>-<digest>.json``): memopt
processes sharing a runs folder never replace each other's file, and an export line always
points at the very config the session verified.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memopt.backends.ort import (
    ENV_VAR,
    ConfigEntry,
    OrtVersion,
    export_line,
    format_config_string,
    render_json_config,
    takes_json_file,
    validate_entries,
)
from memopt.core import Target
from memopt.run.files import replace_atomically

__all__ = ["ConfigExport", "UNSET_LINE", "plan_export", "write_config"]

UNSET_LINE = f"unset {ENV_VAR}  # no recompute needed"


@dataclass(frozen=True)
class ConfigExport:
    """A config for one target and batch: its entries, the value the variable takes, the file."""

    entries: tuple[ConfigEntry, ...]
    version: OrtVersion
    path: Path  # the JSON file (1.19) or the text file holding the string (<=1.18)

    @property
    def value(self) -> str | None:
        """What ORTMODULE_MEMORY_OPT_CONFIG must hold; None: unset it."""
        if not self.entries:
            return None
        if takes_json_file(self.version):
            return str(self.path.resolve())
        return format_config_string(self.entries, self.version)

    @property
    def lines(self) -> list[str]:
        value = self.value
        return [UNSET_LINE] if value is None else [export_line(value)]


def plan_export(
    entries: Iterable[ConfigEntry],
    version: OrtVersion,
    runs_dir: Path,
    target: Target,
    batch: int,
    path: Path | None = None,
    kind: str = "tune",
) -> ConfigExport:
    """The export of ``entries`` for ``target`` at ``batch`` (file ``<kind>-<label>-b<batch>-<digest>``,
    the digest of its content, unless ``path`` is given); nothing is written."""
    entries = tuple(entries)
    if path is None:
        json_file = takes_json_file(version)
        content = render_json_config(entries) if json_file else _string_of(entries, version)
        digest = hashlib.sha256(content.encode()).hexdigest()[:12]
        path = Path(runs_dir) / f"{kind}-{target.label}-b{batch}-{digest}{'.json' if json_file else '.txt'}"
    return ConfigExport(entries, version, path)


def write_config(export: ConfigExport, overwrite: bool = True) -> Path:
    """Write the file ``export`` names (atomically): the JSON config (1.19) or the config string (<=1.18).

    A regular file already there is replaced only when ``overwrite`` (the default suits
    memopt's own, content-named files), keeping its mode; anything else there is refused
    (``check_write_target``). Entries that enable nothing give the empty config ORT reads as
    no recompute (``[]``, or an empty line)."""
    validate_entries(export.entries, export.version)
    content = render_json_config(export.entries) if takes_json_file(export.version) else (export.value or "") + "\n"
    return replace_atomically(export.path, content, overwrite=overwrite).resolve()


def _string_of(entries: tuple[ConfigEntry, ...], version: OrtVersion) -> str:
    return format_config_string(entries, version) if entries else ""
