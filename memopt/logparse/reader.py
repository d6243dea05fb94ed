"""Streaming reader: log lines in, ``ParseResult`` out, in memory bounded by the summaries.

Each rank tag gets its own state, so interleaved multi-process logs are kept apart. A
summary is one session build: the per-node lines, the C++ summary, the feature table and
its dims note, in that order; a piece that cannot belong to the current build starts the
next one.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from memopt.errors import MemoptError
from memopt.logparse.assemble import Piece, SummaryDraft
from memopt.logparse.clues import version_clue
from memopt.logparse.events import (
    EVENT_KEYWORDS,
    node_event,
    ort_config_error,
    total_recomputed_nodes,
)
from memopt.logparse.feature_table import (
    DIMS_NOTE,
    MEMORY_ROW,
    FeatureTableParser,
    parse_dims,
)
from memopt.logparse.format_a import FORMAT_A_HEADER, FormatAParser
from memopt.logparse.insight import INSIGHT_HEADER, InsightParser
from memopt.logparse.lines import (
    CapturedRecordJoiner,
    LogLine,
    bounded_lines,
    clean_lines,
)
from memopt.logparse.model import ParseResult, Summary
from memopt.ort.version import OrtVersionRange

__all__ = ["LogReadError", "NoSummaryError", "parse_file", "parse_lines", "parse_text", "require_summaries"]

_BINARY_PROBE_BYTES = 8192
_Block = FormatAParser | InsightParser | FeatureTableParser


class LogReadError(MemoptError):
    """The log cannot be read: missing, unreadable, or not text."""


class NoSummaryError(MemoptError):
    """The log holds no memory-optimizer summary."""


@dataclass
class _Stream:
    joiner: CapturedRecordJoiner = field(default_factory=CapturedRecordJoiner)
    block: _Block | None = None
    draft: SummaryDraft | None = None
    expecting_dims: bool = False
    prefix_clue: OrtVersionRange | None = None


class _Reader:
    def __init__(self) -> None:
        self.streams: dict[str | None, _Stream] = {}
        self.summaries: list[Summary] = []
        self.drafts: list[SummaryDraft] = []
        self.ort_errors: list[str] = []
        self.versions_seen: OrtVersionRange | None = None
        self.lines_read = 0
        self.binary_lines = 0

    def feed(self, line: LogLine) -> None:
        self.lines_read = line.number
        if "\x00" in line.text:
            self.binary_lines += 1
        stream = self.streams.get(line.stream)
        if stream is None:
            stream = self.streams[line.stream] = _Stream()
        complete = stream.joiner.feed(line)
        if complete is not None:
            self._dispatch(stream, complete)

    def finish(self, source: str) -> ParseResult:
        warnings: list[str] = []
        for stream in self.streams.values():
            last = stream.joiner.flush()
            if last is not None:
                self._dispatch(stream, last)
            if stream.block is not None and not stream.block.complete and stream.draft is not None:
                stream.draft.truncated = True
                stream.draft.warnings.append(
                    f"the log ends inside the summary that starts at line {stream.block.first_line}"
                )
            if stream.expecting_dims and stream.draft is not None:
                stream.draft.truncated = True
                stream.draft.warnings.append("the log ends before the first batch's dims")
        summaries = sorted((draft.build(self.versions_seen) for draft in self.drafts), key=lambda s: s.first_line)
        for summary in summaries:
            warnings.extend(f"summary at line {summary.first_line}: {warning}" for warning in summary.warnings)
        if self.binary_lines:
            warnings.append(f"{self.binary_lines} lines hold NUL bytes: binary data?")
        return ParseResult(source, tuple(summaries), self.lines_read, tuple(warnings), tuple(self.ort_errors))

    def _dispatch(self, stream: _Stream, line: LogLine) -> None:
        if stream.block is not None:
            if stream.block.feed(line):
                return
            if not stream.block.complete and stream.draft is not None:
                stream.draft.warnings.append(
                    f"the summary that starts at line {stream.block.first_line} ends unexpectedly at line {line.number}"
                )
            stream.block = None
        if stream.expecting_dims:
            stream.expecting_dims = False
            assert stream.draft is not None
            stream.draft.dims = parse_dims(line.text)
            if not stream.draft.dims and line.text.strip():
                stream.draft.warnings.append(f"line {line.number}: no dims in {line.text.strip()!r}")
            return
        text = line.text
        if "Summary" in text:
            if FORMAT_A_HEADER.search(text):
                self._start_block(stream, line, FormatAParser(line), "cpp")
                return
            if INSIGHT_HEADER.search(text):
                self._start_block(stream, line, InsightParser(line), "cpp")
                return
        if "Memory Optimizer" in text and MEMORY_ROW.search(text):
            self._start_block(stream, line, FeatureTableParser(line), "feature")
        elif "Note " in text and DIMS_NOTE.search(text):
            self._draft(stream, line, "dims").clues.extend(filter(None, [version_clue(text)]))
            stream.expecting_dims = True
        elif "PrintSummary]" in text:
            stream.prefix_clue = version_clue(text)
        elif "Versions: ONNX Runtime" in text:
            self.versions_seen = version_clue(text) or self.versions_seen
        elif any(keyword in text for keyword in EVENT_KEYWORDS):
            self._single_line_report(stream, line)

    def _single_line_report(self, stream: _Stream, line: LogLine) -> None:
        if (event := node_event(line)) is not None:
            draft = self._draft(stream, line, "event")
            draft.node_events.append(event)
            draft.clues.extend(filter(None, [version_clue(line.text)]))
        elif (total := total_recomputed_nodes(line)) is not None:
            self._draft(stream, line, "event").total_recomputed_nodes = total
        elif (error := ort_config_error(line)) is not None:
            self.ort_errors.append(f"line {line.number}: {error}")

    def _start_block(self, stream: _Stream, line: LogLine, block: _Block, piece: Piece) -> None:
        draft = self._draft(stream, line, piece)
        if isinstance(block, FeatureTableParser):
            draft.feature = block
        else:
            draft.cpp = block
            if stream.prefix_clue is not None:
                draft.clues.append(stream.prefix_clue)
        stream.prefix_clue = None
        stream.block = block

    def _draft(self, stream: _Stream, line: LogLine, piece: Piece) -> SummaryDraft:
        if stream.draft is None or not stream.draft.accepts(piece):
            stream.draft = SummaryDraft(line.number, line.stream)
            self.drafts.append(stream.draft)
        return stream.draft


def parse_lines(lines: Iterable[str], source: str = "<lines>") -> ParseResult:
    """Parse log lines (with or without line endings) one at a time."""
    reader = _Reader()
    for line in clean_lines(lines):
        reader.feed(line)
    return reader.finish(source)


def parse_text(text: str, source: str = "<text>") -> ParseResult:
    return parse_lines(bounded_lines(io.StringIO(text, newline=None)), source)


def parse_file(path: str | Path) -> ParseResult:
    """Parse a log file, or standard input when ``path`` is ``"-"``."""
    if str(path) == "-":
        stdin = sys.stdin.buffer
        probe = stdin.peek(_BINARY_PROBE_BYTES) if hasattr(stdin, "peek") else b""
        _reject_binary(probe[:_BINARY_PROBE_BYTES], "standard input")
        return _parse_binary_handle(stdin, "<stdin>")
    path = Path(path)
    try:
        with path.open("rb") as handle:
            _reject_binary(handle.read(_BINARY_PROBE_BYTES), str(path))
            handle.seek(0)
            return _parse_binary_handle(handle, str(path))
    except IsADirectoryError:
        raise LogReadError(f"{path} is a directory, not a log file") from None
    except OSError as err:
        raise LogReadError(f"cannot read {path}: {err.strerror or err}") from None


def require_summaries(result: ParseResult) -> ParseResult:
    """``result`` unchanged, or ``NoSummaryError`` saying why nothing was found."""
    if result.summaries:
        return result
    if result.lines_read == 0:
        raise NoSummaryError(f"{result.source} is empty")
    reason = (
        f"; ORT reported a config error: {result.ort_errors[0]}"
        if result.ort_errors
        else (" (ORT prints the Plan table at log level INFO or lower, the MemoryInsight table at DEVINFO)")
    )
    raise NoSummaryError(f"no memory-optimizer summary in {result.source} ({result.lines_read} lines){reason}")


def _reject_binary(head: bytes, name: str) -> None:
    if b"\x00" in head:
        raise LogReadError(f"{name} holds binary data, not a log")


def _parse_binary_handle(handle: BinaryIO, source: str) -> ParseResult:
    text = io.TextIOWrapper(handle, encoding="utf-8", errors="replace", newline=None)
    try:
        return parse_lines(bounded_lines(text), source)
    finally:
        text.detach()
