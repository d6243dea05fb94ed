"""Formats B (ORT 1.17-1.18) and C (1.19), the "MemoryInsight Summary" table."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memopt.backends.ort.logparse.clues import version_clue
from memopt.backends.ort.logparse.lines import EQUALS_RULE, LogLine, brief
from memopt.backends.ort.logparse.model import LOGGED_TYPES, OptimizationType, StashedOutput
from memopt.backends.ort.logparse.numbers import read_int
from memopt.backends.ort.logparse.shapes import element_count
from memopt.backends.ort.version import OrtVersionRange

__all__ = ["INSIGHT_HEADER", "InsightBlock", "InsightOption", "InsightParser"]

INSIGHT_HEADER = re.compile(r"MemoryInsight Summary - User config(?: file path)?: (.*?)\s*$")
_NOT_PROVIDED = "not provided"
_ROW = re.compile(r"\|([^|]{7})\|(.*)\|\s*$")
_SEPARATOR_FREQ = "_ _ _ _"
_NOTE = re.compile(r"Note: use comma as a separator")
_RECORD_INTRO = "For each row options are mutually exclusive"
_OPTION = re.compile(r"^>>Option (\d+)\s*: (RecomputeWithCompromise|Recompute) subgraph (\S*)$")
_ENABLED = re.compile(r"^Status\s*: Enabled, requested count=(-?\d+), actual applied count=(-?\d+)$")
_DISABLED = re.compile(r"^Status\s*: Disabled\.(?: Enable with export ORTMODULE_MEMORY_OPT_CONFIG=\S*)?$")
_STASHED = re.compile(r"^Stashed Activations:$")
_REUSE = re.compile(r"^- ReuseFreq\s*:")
_OUTPUT = re.compile(r"^- Output (\d+)\s*: \[(.*)\], byte/elem: (\d+), (-?\d+)% saved$")


@dataclass(frozen=True)
class InsightOption:
    """One ">>Option" of a table row."""

    line_number: int
    subgraph: str
    optimization: OptimizationType
    frequency: int | None  # None where the row's figure was unreadable
    enabled: bool | None
    requested_count: int | None
    applied_count: int | None
    outputs: tuple[StashedOutput, ...]


@dataclass(frozen=True)
class InsightBlock:
    first_line: int
    user_config: str | None
    options: tuple[InsightOption, ...]
    versions: OrtVersionRange | None
    complete: bool
    warnings: tuple[str, ...]


@dataclass
class _OptionDraft:
    line_number: int
    subgraph: str
    optimization: OptimizationType
    frequency: int | None
    enabled: bool | None = None
    requested_count: int | None = None
    applied_count: int | None = None
    outputs: list[StashedOutput] = field(default_factory=list)

    def freeze(self) -> InsightOption:
        return InsightOption(
            self.line_number,
            self.subgraph,
            self.optimization,
            self.frequency,
            self.enabled,
            self.requested_count,
            self.applied_count,
            tuple(self.outputs),
        )


class InsightParser:
    """Fed the lines after the header; ``feed`` returns False at the first foreign line."""

    def __init__(self, header: LogLine) -> None:
        match = INSIGHT_HEADER.search(header.text)
        assert match is not None
        self.first_line = header.number
        self.user_config = None if match.group(1) in ("", _NOT_PROVIDED) else match.group(1)
        self.versions = version_clue(header.text)
        self.options: list[InsightOption] = []
        self.warnings: list[str] = []
        self.complete = False
        self._borders = 0
        self._frequency: int | None = None
        self._option: _OptionDraft | None = None

    def feed(self, line: LogLine) -> bool:
        if self.complete:
            return False
        text = line.text
        if self._borders == 2:
            # Only the closing note may follow the second border.
            self.complete = True
            return _NOTE.search(text) is not None
        if EQUALS_RULE.search(text):
            self._borders += 1
            self._close_option()
            return True
        match = _ROW.search(text)
        if match is None or self._borders == 0:
            return False
        freq_cell, body = match.group(1).strip(), match.group(2).strip()
        if freq_cell == _SEPARATOR_FREQ:
            self._close_option()
            self._frequency = None
        elif freq_cell == "Freq":
            pass
        elif freq_cell:
            self._close_option()
            self._frequency = read_int(freq_cell)
            if self._frequency is None or not body.startswith(_RECORD_INTRO):
                self.warnings.append(f"line {line.number}: unreadable MemoryInsight row {brief(text)!r}")
        elif body:
            self._feed_body(line.number, body)
        return True

    def block(self) -> InsightBlock:
        self._close_option()
        return InsightBlock(
            self.first_line,
            self.user_config,
            tuple(self.options),
            self.versions,
            self.complete,
            tuple(self.warnings),
        )

    def _feed_body(self, line_number: int, body: str) -> None:
        if match := _OPTION.match(body):
            self._close_option()
            if self._frequency is None:
                self.warnings.append(f"line {line_number}: option outside a row, frequency unknown")
            self._option = _OptionDraft(line_number, match.group(3), LOGGED_TYPES[match.group(2)], self._frequency)
            return
        option = self._option
        if option is not None and (match := _ENABLED.match(body)):
            option.enabled = True
            option.requested_count = read_int(match.group(1))
            option.applied_count = read_int(match.group(2))
            if option.requested_count is None or option.applied_count is None:
                self.warnings.append(f"line {line_number}: unreadable count in {brief(body)!r}, taken as unknown")
        elif option is not None and _DISABLED.match(body):
            option.enabled = False
            self._narrow(version_clue(body))
        elif option is not None and (match := _OUTPUT.match(body)):
            shape = match.group(2)
            figures = [read_int(match.group(group)) for group in (1, 3, 4)]
            if None in figures:
                self.warnings.append(f"line {line_number}: unreadable figure in {brief(body)!r}, taken as unknown")
            option.outputs.append(
                StashedOutput(
                    shape=shape,
                    element_count=None if shape == "unknown" else element_count([shape]),
                    output_index=figures[0],
                    bytes_per_element=figures[1],
                    saved_percent=figures[2],
                )
            )
        elif not (
            (option is not None and (_STASHED.match(body) or _REUSE.match(body))) or body.startswith(_RECORD_INTRO)
        ):
            self.warnings.append(f"line {line_number}: unreadable MemoryInsight row {brief(body)!r}")

    def _narrow(self, clue: OrtVersionRange | None) -> None:
        if clue is not None:
            self.versions = clue if self.versions is None else (self.versions.narrow(clue) or self.versions)

    def _close_option(self) -> None:
        if self._option is not None:
            self.options.append(self._option.freeze())
            self._option = None
