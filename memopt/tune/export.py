"""The config a session hands back: where it goes and the shell line that applies it.

Working out the line (``export_lines``) never touches the disk, so views may call it as
often as they redraw; ``write_config`` writes the file the line names (ORT 1.19 reads a
JSON file, older releases the string itself) and belongs on a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memopt.ort import (
    ENV_VAR,
    ConfigEntry,
    OrtVersion,
    export_line,
    format_config_string,
    takes_json_file,
    write_json_config,
)
from memopt.run import target_label

__all__ = ["ConfigExport", "plan_export", "write_config"]

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
    recipe: str,
    batch: int,
    path: Path | None = None,
    kind: str = "tune",
) -> ConfigExport:
    """The export of ``entries`` for ``recipe`` at ``batch`` (file ``<kind>-<recipe>-b<batch>``); nothing is written."""
    name = target_label(recipe)
    suffix = ".json" if takes_json_file(version) else ".txt"
    return ConfigExport(tuple(entries), version, path or Path(runs_dir) / f"{kind}-{name}-b{batch}{suffix}")


def write_config(export: ConfigExport) -> Path:
    """Write the file ``export`` names: the JSON config (1.19) or the config string (<=1.18)."""
    if takes_json_file(export.version):
        return write_json_config(export.entries, export.path, export.version, overwrite=True).resolve()
    export.path.parent.mkdir(parents=True, exist_ok=True)
    export.path.write_text((export.value or "") + "\n")
    return export.path.resolve()
