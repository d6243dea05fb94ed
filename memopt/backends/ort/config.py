"""ORTMODULE_MEMORY_OPT_CONFIG for a given ORT release: parse, validate, emit.

ORT <=1.18 reads the variable as the config string ``<subgraph>:<type>:<count>[,...]``;
1.19 reads it as the path of a JSON file holding an array of such strings. Validation
raises ``ConfigError`` for exactly what ORT rejects, naming the reason ORT's own message
hides, and returns warnings for what ORT silently ignores or does differently than asked.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import NewType

from memopt.backends.ort.version import OrtVersion
from memopt.core.plan import PlanName
from memopt.errors import MemoptError

__all__ = [
    "CONFIG_VARIABLES",
    "ConfigEntry",
    "ConfigError",
    "ENV_VAR",
    "LEVEL_VAR",
    "OptimizationType",
    "PlanCell",
    "PlanKey",
    "ValidatedConfig",
    "cell_subgraph",
    "export_line",
    "format_config_string",
    "parse_config_json",
    "parse_config_string",
    "plan_cell",
    "plan_config_entries",
    "plan_keys",
    "read_config_file",
    "refuse_unknown_entries",
    "render_json_config",
    "takes_json_file",
    "validate_entries",
]

ENV_VAR = "ORTMODULE_MEMORY_OPT_CONFIG"
LEVEL_VAR = "ORTMODULE_MEMORY_OPT_LEVEL"  # overrides any config
# What decides ORT's recompute in a run: a run that must choose its own unsets both.
CONFIG_VARIABLES = (ENV_VAR, LEVEL_VAR)
MAX_STRING_LENGTH = 2048  # 1.17 and 1.18 refuse longer session config values
_INT_PREFIX = re.compile(r"^\s*([+-]?\d+)")
_INT32 = range(-(2**31), 2**31)


class OptimizationType(IntEnum):
    """The ``<type>`` field of a config entry."""

    DISABLED = 0
    RECOMPUTE = 1
    COMPROMISE = 2  # "RecomputeWithCompromise": Cast up-casts keep their smaller input

    @property
    def label(self) -> str:
        return self.name.lower()


class ConfigError(MemoptError):
    """ORT would reject this config; the message says why."""


@dataclass(frozen=True)
class ConfigEntry:
    subgraph: str
    optimization: OptimizationType
    count: int = -1

    @property
    def cell(self) -> PlanCell:
        """``"<subgraph>:<type>"``: the cell of ORT's Plan table this entry enables."""
        return plan_cell(self.subgraph, self.optimization)

    @property
    def key(self) -> PlanKey:
        """The entry as a plan key: ``"<subgraph>:<type>:<count>"``."""
        return PlanKey(str(self))

    def __str__(self) -> str:
        return f"{self.subgraph}:{int(self.optimization)}:{self.count}"


@dataclass(frozen=True)
class ValidatedConfig:
    """Entries as ORT reads them (file order; ORT keeps the last entry per subgraph)."""

    entries: tuple[ConfigEntry, ...]
    warnings: tuple[str, ...]


def takes_json_file(version: OrtVersion) -> bool:
    return version.minor >= 19


def parse_config_string(text: str, version: OrtVersion, known_plans: Collection[str] = ()) -> ValidatedConfig:
    """Validate the comma-separated form. ``known_plans``: ``"<subgraph>:<type>"`` keys seen in a log."""
    if version.minor in (17, 18) and len(text) > MAX_STRING_LENGTH:
        raise ConfigError(
            f"ORT {version} refuses configs longer than {MAX_STRING_LENGTH} characters (this one has {len(text)}); "
            "ORT 1.19 reads a JSON file instead"
        )
    warnings: list[str] = []
    entries = [_parse_item(item, version, warnings) for item in _items(text, warnings)]
    return validate_entries(entries, version, known_plans, warnings)


def parse_config_json(text: str, version: OrtVersion, known_plans: Collection[str] = ()) -> ValidatedConfig:
    """Validate the content of a 1.19 JSON config file."""
    if not takes_json_file(version):
        raise ConfigError(f"ORT {version} reads {ENV_VAR} as the config string itself, not a JSON file")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        detail = (
            f"line {err.lineno} column {err.colno}: {err.msg}"
            if isinstance(err, json.JSONDecodeError)
            else "too deeply nested"
        )
        raise ConfigError(f"ORT 1.19 fails to parse the JSON file ({detail})") from None
    if not isinstance(document, list):
        raise ConfigError(
            f"the JSON file must hold an array of strings, not {_json_type(document)} (ORT: type must be array)"
        )
    warnings: list[str] = []
    entries: list[ConfigEntry] = []
    for position, element in enumerate(document):
        if not isinstance(element, str):
            raise ConfigError(f"element {position} of the JSON array is {_json_type(element)}; ORT needs strings")
        entries.extend(_parse_item(item, version, warnings) for item in _items(element, warnings))
    return validate_entries(entries, version, known_plans, warnings)


def read_config_file(path: str | Path, version: OrtVersion, known_plans: Collection[str] = ()) -> ValidatedConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"ORT 1.19 cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    return parse_config_json(text, version, known_plans)


def validate_entries(
    entries: Iterable[ConfigEntry],
    version: OrtVersion,
    known_plans: Collection[str] = (),
    warnings: list[str] | None = None,
) -> ValidatedConfig:
    """Check entries against ``version``; raise for what ORT rejects, warn for what it ignores."""
    entries = tuple(entries)
    warnings = list(warnings or [])
    seen: dict[str, ConfigEntry] = {}
    for entry in entries:
        _check_entry(entry, version)
        if entry.subgraph != entry.subgraph.strip():
            warnings.append(f"{str(entry)!r}: ORT does not trim spaces, so this subgraph never matches")
        elif not entry.subgraph:
            warnings.append(f"{str(entry)!r}: an empty subgraph matches nothing")
        if entry.subgraph in seen:
            warnings.append(f"{entry.subgraph!r} is given twice; ORT keeps only the last ({entry})")
        seen[entry.subgraph] = entry
        warnings.extend(_ignored_parts(entry, version, known_plans))
    if not entries:
        warnings.append("the config enables nothing")
    return ValidatedConfig(entries, tuple(warnings))


def refuse_unknown_entries(entries: Iterable[ConfigEntry], known_plans: Collection[str], source: str) -> None:
    """Raise for the first entry whose "<subgraph>:<type>" is not among ``known_plans``, the
    cells of the Plan table ORT printed for the model (``source`` names where): ORT would ignore it."""
    for entry in entries:
        if entry.optimization is not OptimizationType.DISABLED and entry.cell not in known_plans:
            subgraphs = {cell_subgraph(cell) for cell in known_plans}
            what = "with that type" if entry.subgraph in subgraphs else "by that name"
            raise ConfigError(
                f"{entry}: ORT printed no plan {what} for this model ({source}), so it would ignore this entry; "
                f"its plans: {', '.join(sorted(known_plans)) or 'none'}"
            )


def format_config_string(entries: Iterable[ConfigEntry], version: OrtVersion) -> str:
    """The value for ORT <=1.18, checked as ORT would."""
    if takes_json_file(version):
        raise ConfigError(f"ORT {version} reads {ENV_VAR} as a JSON file path; not the config string itself")
    text = ",".join(str(entry) for entry in entries)
    parse_config_string(text, version)
    return text


def render_json_config(entries: Iterable[ConfigEntry]) -> str:
    """The content of a 1.19 config file: one entry per array element."""
    return json.dumps([str(entry) for entry in entries], indent=2) + "\n"


def export_line(value: str) -> str:
    """The shell line that sets the variable to ``value`` (a config string or a JSON path)."""
    return f"export {ENV_VAR}={shlex.quote(value)}"


def _items(text: str, warnings: list[str]) -> list[str]:
    items = text.split(",")
    kept = [item for item in items if item]
    if len(kept) != len(items) and text:
        warnings.append(f"{text!r}: empty items between commas are dropped by ORT")
    return kept


def _parse_item(item: str, version: OrtVersion, warnings: list[str]) -> ConfigEntry:
    fields = item.split(":")
    if len(fields) != 3:
        raise ConfigError(
            f"{item!r} has {len(fields)} ':'-separated field(s) where ORT needs <subgraph>:<type>:<count> "
            "(ORT itself only says ...ConfigFromString(...).IsOK() was false)"
        )
    subgraph, type_text, count_text = fields
    type_value = _read_int(type_text, item, "type", warnings)
    count = _read_int(count_text, item, "count", warnings)
    allowed = (0, 1, 2) if version.minor >= 17 else (0, 1)
    if type_value not in allowed:
        raise ConfigError(
            f"{item!r}: type {type_value} is not one of {', '.join(map(str, allowed))} on ORT {version}"
            + (" (type 2, RecomputeWithCompromise, starts with 1.17)" if type_value == 2 else "")
        )
    return ConfigEntry(subgraph, OptimizationType(type_value), count)


def _read_int(text: str, item: str, name: str, warnings: list[str]) -> int:
    # ORT reads numbers with an istringstream: leading spaces and trailing junk are allowed.
    match = _INT_PREFIX.match(text)
    if match is None or int(match.group(1)) not in _INT32:
        raise ConfigError(
            f"{item!r}: {name} {text!r} is not an integer (ORT: Fail to convert to int from string: {text})"
        )
    if match.end() != len(text):
        warnings.append(f"{item!r}: ORT reads {name} {text!r} as {int(match.group(1))}")
    return int(match.group(1))


def _check_entry(entry: ConfigEntry, version: OrtVersion) -> None:
    allowed = (0, 1, 2) if version.minor >= 17 else (0, 1)
    if int(entry.optimization) not in allowed:
        raise ConfigError(f"{entry}: type {int(entry.optimization)} needs ORT 1.17 or later (this is {version})")
    if entry.count < -1:
        raise ConfigError(f"{entry}: count {entry.count} is below -1 (-1 means all occurrences); ORT rejects it")
    if ":" in entry.subgraph or "," in entry.subgraph:
        raise ConfigError(f"{entry}: a subgraph cannot contain ':' or ','")


def _ignored_parts(entry: ConfigEntry, version: OrtVersion, known_plans: Collection[str]) -> list[str]:
    warnings = []
    if entry.optimization is OptimizationType.DISABLED:
        warnings.append(f"{entry}: type 0 disables the subgraph, the same as leaving it out")
    elif entry.count >= 0 and version.minor >= 17:
        applies = "all occurrences but the last" if entry.count == 0 else "all occurrences"
        warnings.append(f"{entry}: ORT {version} ignores partial counts and recomputes {applies}; use -1 to say so")
    elif entry.count == 0:
        warnings.append(f"{entry}: count 0 recomputes nothing on ORT {version}")
    if known_plans and entry.subgraph.strip() == entry.subgraph and entry.optimization is not OptimizationType.DISABLED:
        if entry.cell not in known_plans:
            known_subgraphs = {cell_subgraph(cell) for cell in known_plans}
            reason = "that type" if entry.subgraph in known_subgraphs else "that subgraph"
            warnings.append(f"{entry}: the log has no plan with {reason}, so ORT ignores this entry")
    return warnings


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# One "<subgraph>:<type>" cell of ORT's Plan table (``"Gelu+:1"``): what a config entry enables,
# and what a printed table offers; a key names one or more of them.
PlanCell = NewType("PlanCell", str)


class PlanKey(PlanName):
    """A plan as ORT's Plan table names it and as a config enables it: "<subgraph>:<type>:<count>",
    or several such cells joined by "," where ORT groups plans that must go on together
    (``"LayerNormalization+:1:-1,Reshape+:1:-1"``). parse, scan, the planner, the tuner and the
    TUI all speak of plans by this key; it stays a ``str``, so JSON, journals and logs keep
    the text as is, and whatever reads a key back from them makes it a ``PlanKey`` again."""

    __slots__ = ()

    @property
    def cells(self) -> tuple[PlanCell, ...]:
        """``"A+:1:-1,B+:2:-1"`` -> ``("A+:1", "B+:2")``: the "<subgraph>:<type>" cells it enables."""
        return tuple(PlanCell(part.rsplit(":", 1)[0]) for part in self.split(",") if part)

    @classmethod
    def from_short(cls, items: Iterable[str]) -> PlanKey:
        """The key of ``items`` as people write them (``short``): a bare subgraph name is the
        plan recomputing its every occurrence (":1:-1")."""
        return cls(",".join(item if ":" in item else plan_key(item, OptimizationType.RECOMPUTE) for item in items))

    @property
    def short(self) -> str:
        """The key as people read it: the common ":1:-1" (recompute every occurrence) left off each cell."""
        return ",".join(cell.removesuffix(":1:-1") for cell in self.split(","))

    @property
    def subgraphs(self) -> str:
        """The subgraph names of its cells, joined as ORT joins them."""
        return ",".join(dict.fromkeys(cell_subgraph(cell) for cell in self.cells))


def plan_keys(texts: Iterable[str]) -> tuple[PlanKey, ...]:
    """Keys read back from a journal, a saved model or a command line."""
    return tuple(PlanKey(text) for text in texts)


def plan_key(subgraph: str, optimization: OptimizationType) -> PlanKey:
    """The key of the plan that recomputes every occurrence of ``subgraph`` (count -1)."""
    return ConfigEntry(subgraph, optimization).key


def plan_cell(subgraph: str, optimization: OptimizationType) -> PlanCell:
    """The ``"<subgraph>:<type>"`` cell ORT's Plan table names a plan by."""
    return PlanCell(f"{subgraph}:{int(optimization)}")


def cell_subgraph(cell: str) -> str:
    """``"A+:1"`` -> ``"A+"``."""
    return cell.rpartition(":")[0]


def plan_config_entries(
    keys: Iterable[PlanKey], counts: Mapping[PlanKey, int] | None = None
) -> tuple[ConfigEntry, ...]:
    """The config entries that enable ``keys`` (``counts``: occurrences per key, default all)."""
    found: dict[str, ConfigEntry] = {}
    for key in keys:
        count = (counts or {}).get(key, -1)
        for cell in key.cells:
            subgraph, _, kind = cell.rpartition(":")
            found[cell] = ConfigEntry(subgraph, OptimizationType(int(kind)), count)
    return tuple(found.values())
