"""The Python feature table's "Memory Optimizer" row, its Plan table, and the Notes line
with the first batch's dims (ORT 1.16-1.19; 1.16 has the memory row only)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memopt.backends.ort.config import PlanKey
from memopt.backends.ort.logparse.clues import version_clue
from memopt.backends.ort.logparse.lines import LogLine, brief
from memopt.backends.ort.logparse.numbers import read_int
from memopt.backends.ort.version import OrtVersionRange
from memopt.graph.expr import Expression, ExpressionError, parse_expression

__all__ = ["DIMS_NOTE", "FeatureBlock", "FeatureTableParser", "TableRow", "parse_dims"]

MEMORY_ROW = re.compile(r"Memory Optimizer\s*:\s*(ON|OFF)\s*:\s*(.*?)\s*$")
DIMS_NOTE = re.compile(r"Note \d+: (?:\[Memory Optimizer\] )?[Mm]emory saving is calculated based on the 1st batch")
_LEVEL = re.compile(r"Memory Optimization Level: \[(\w+)\], Optimization Config: \[(.*)\]")
_CONFIG_IN_HINT = re.compile(r"ORTMODULE_MEMORY_OPT_CONFIG=(.*)$")
_PLAN_HEADER = re.compile(r"Configs\s+Freq\s+Max Saving\(Bytes\)\s+Saving Symbolic\(Bytes\)")
_PLAN_ROW = re.compile(r"- Plan (\d+)\s*:\s*(ON|OFF)\s*:\s*(.*?)\s*$")
# Cells are left-justified to the column width plus 2, so two spaces always separate them,
# while sympy prints a sum with single spaces ("a + b").
_CELL_GAP = re.compile(r"\s{2,}")
_SAVING_NUMBER = re.compile(r"^\d{1,3}(?:,\d{3})*$")
_DIM = re.compile(r"([A-Za-z_]\w*)=(-?\d+)")


@dataclass(frozen=True)
class TableRow:
    line_number: int
    number: int
    enabled: bool
    key: PlanKey
    frequency: int
    max_saving_bytes: int | None  # None where ORT printed none or it was unreadable
    saving_symbolic: Expression | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PlanKey(self.key))  # a key read back from text is a PlanKey again


@dataclass(frozen=True)
class FeatureBlock:
    first_line: int
    memory_optimizer_on: bool
    optimization_level: str | None
    user_config: str | None
    rows: tuple[TableRow, ...]
    versions: OrtVersionRange | None
    warnings: tuple[str, ...]


class FeatureTableParser:
    """Starts at the "Memory Optimizer" row; ``feed`` returns False after the last Plan row."""

    def __init__(self, header: LogLine) -> None:
        match = MEMORY_ROW.search(header.text)
        assert match is not None
        self.first_line = header.number
        self.on = match.group(1) == "ON"
        description = match.group(2)
        self.versions = version_clue(description)
        self.level: str | None = None
        self.user_config: str | None = None
        if level := _LEVEL.search(description):
            self.level, self.user_config = level.group(1), level.group(2)
        elif self.on and (hint := _CONFIG_IN_HINT.search(description)):
            self.user_config = hint.group(1)
        self.rows: list[TableRow] = []
        self.warnings: list[str] = []
        self.complete = False

    def feed(self, line: LogLine) -> bool:
        if self.complete:
            return False
        text = line.text
        if _PLAN_HEADER.search(text):
            self.versions = self.versions or OrtVersionRange(17)
            return True
        match = _PLAN_ROW.search(text)
        if match is None:
            self.complete = True
            return False
        cells = _CELL_GAP.split(match.group(3))
        number = read_int(match.group(1))
        frequency = read_int(cells[1]) if len(cells) == 4 else None
        if number is None or frequency is None:
            self.warnings.append(f"line {line.number}: unreadable Plan row {brief(text)!r}")
            return True
        config_key, _, max_saving, symbolic = cells
        max_saving_bytes = read_int(max_saving.replace(",", "")) if _SAVING_NUMBER.match(max_saving) else None
        if max_saving_bytes is None and _SAVING_NUMBER.match(max_saving):
            self.warnings.append(f"line {line.number}: Plan {number} max saving {brief(max_saving)!r} out of range")
        try:
            expression: Expression | None = parse_expression(symbolic)
        except ExpressionError as err:
            self.warnings.append(f"line {line.number}: Plan {number} saving {brief(symbolic)!r} unreadable: {err}")
            expression = None
        self.rows.append(
            TableRow(
                line_number=line.number,
                number=number,
                enabled=match.group(2) == "ON",
                key=PlanKey(config_key),
                frequency=frequency,
                max_saving_bytes=max_saving_bytes,
                saving_symbolic=expression,
            )
        )
        return True

    def block(self) -> FeatureBlock:
        return FeatureBlock(
            self.first_line,
            self.on,
            self.level,
            self.user_config,
            tuple(self.rows),
            self.versions,
            tuple(self.warnings),
        )


def parse_dims(text: str) -> tuple[dict[str, int], list[str]]:
    """``input_ids_dim0=4,  input_ids_dim1=16,`` as a dict, and the dims whose value is unreadable."""
    dims: dict[str, int] = {}
    unreadable: list[str] = []
    for name, text_value in _DIM.findall(text):
        value = read_int(text_value)
        if value is None:
            unreadable.append(name)
        else:
            dims[name] = value
    return dims, unreadable
