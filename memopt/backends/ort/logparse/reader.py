"""Streaming reader: log lines in, ``ParseResult`` out, in memory bounded by the summaries.

Each rank tag gets its own state, so interleaved multi-process logs are kept apart. A
summary is one session build: the per-node lines, the C++ summary, the feature table and
its dims note, in that order; a piece that cannot belong to the current build starts the
next one.

Almost every line of a training log is something else, so lines are only counted until
one holds a keyword a report line must contain (``bytes.find`` over 256 KiB at a time, one
pass per keyword); only those lines, and every line while a summary is being read, are
decoded and looked at.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from memopt.backends.ort.logparse.assemble import Piece, SummaryDraft
from memopt.backends.ort.logparse.clues import version_clue
from memopt.backends.ort.logparse.events import (
    EVENT_KEYWORDS,
    node_event,
    ort_config_error,
    total_recomputed_nodes,
)
from memopt.backends.ort.logparse.feature_table import (
    DIMS_NOTE,
    MEMORY_ROW,
    FeatureTableParser,
    parse_dims,
)
from memopt.backends.ort.logparse.format_a import FORMAT_A_HEADER, FormatAParser
from memopt.backends.ort.logparse.insight import INSIGHT_HEADER, InsightParser
from memopt.backends.ort.logparse.lines import (
    MAX_LINE_LENGTH,
    CapturedRecordJoiner,
    LogLine,
    bounded_lines,
    brief,
    clean_line,
)
from memopt.backends.ort.logparse.model import ParseResult, StepMemory, Summary
from memopt.backends.ort.logparse.step_memory import STEP_MEMORY_KEYWORD, step_memory
from memopt.backends.ort.version import OrtVersionRange
from memopt.errors import MemoptError
from memopt.step_lines import WARM_UP_DONE

__all__ = ["LogReadError", "NoSummaryError", "parse_file", "parse_lines", "parse_text", "require_summaries"]

_BINARY_PROBE_BYTES = 8192
_CHUNK_BYTES = 1 << 18
# Every line the reader acts on holds one of these (a rank tag, ANSI codes or the 1.16
# re-wrapping come before or around them, never inside); NUL bytes and escape codes are
# looked at so that binary data is counted and coloured text cleaned.
_KEYWORDS = (
    "Summary",
    "Memory Optimizer",
    "emory saving is calculated based on the 1st batch",  # the Note before the dims
    "Versions: ONNX Runtime",
    "Filtered logs",
    STEP_MEMORY_KEYWORD,
    *EVENT_KEYWORDS,
    "[memopt] rank ",  # a memopt run's step lines: where its warm-up step ended
    "\x00",
    "\x1b",
)
_MATTERS = re.compile("|".join(map(re.escape, _KEYWORDS)))
_KEYWORD_BYTES = tuple(keyword.encode() for keyword in _KEYWORDS)
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
        self.step_memory: list[StepMemory] = []
        self.warnings: list[str] = []
        self.versions_seen: OrtVersionRange | None = None
        self.warm_up_end_line: int | None = None
        self.binary_lines = 0
        self._busy_streams: set[str | None] = set()

    @property
    def busy(self) -> bool:
        """Whether some stream is inside a report, so that every line must be looked at."""
        return bool(self._busy_streams)

    def feed(self, number: int, raw: str) -> None:
        line = clean_line(number, raw[:MAX_LINE_LENGTH])
        if "\x00" in line.text:
            self.binary_lines += 1
        stream = self.streams.get(line.stream)
        if stream is None:
            stream = self.streams[line.stream] = _Stream()
        for complete in stream.joiner.feed(line):
            self._dispatch(stream, complete)
        if stream.block is not None or stream.expecting_dims or stream.joiner.holding:
            self._busy_streams.add(line.stream)
        else:
            self._busy_streams.discard(line.stream)

    def finish(self, source: str, lines_read: int) -> ParseResult:
        warnings = list(self.warnings)
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
        return ParseResult(
            source,
            tuple(summaries),
            lines_read,
            tuple(warnings),
            tuple(self.ort_errors),
            tuple(self.step_memory),
            self.warm_up_end_line,
        )

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
            stream.draft.dims, unreadable = parse_dims(line.text)
            if unreadable:
                stream.draft.warnings.append(f"line {line.number}: unreadable value of {', '.join(unreadable)}")
            elif not stream.draft.dims and line.text.strip():
                stream.draft.warnings.append(f"line {line.number}: no dims in {brief(line.text)!r}")
            return
        text = line.text
        if _MATTERS.search(text) is None:
            return  # most lines of a captured record: nothing to start
        if "Summary" in text:
            if FORMAT_A_HEADER.search(text):
                self._start_block(stream, line, FormatAParser(line), "cpp")
                return
            if INSIGHT_HEADER.search(text):
                self._start_block(stream, line, InsightParser(line), "cpp")
                return
        if STEP_MEMORY_KEYWORD in text and (record := step_memory(line, self.warnings.append)) is not None:
            self.step_memory.append(record)
        elif "Memory Optimizer" in text and MEMORY_ROW.search(text):
            self._start_block(stream, line, FeatureTableParser(line), "feature")
        elif "Note " in text and DIMS_NOTE.search(text):
            self._draft(stream, line, "dims").clues.extend(filter(None, [version_clue(text)]))
            stream.expecting_dims = True
        elif "PrintSummary]" in text:
            stream.prefix_clue = version_clue(text)
        elif "Versions: ONNX Runtime" in text:
            self.versions_seen = version_clue(text) or self.versions_seen
        elif WARM_UP_DONE.match(text):
            self.warm_up_end_line = line.number  # the last rank's: every rank's session is built by then
        else:
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
    number = 0
    for number, raw in enumerate(lines, start=1):
        if reader.busy or _MATTERS.search(raw):
            reader.feed(number, raw)
    return reader.finish(source, number)


def parse_text(text: str, source: str = "<text>") -> ParseResult:
    return parse_lines(bounded_lines(io.StringIO(text, newline=None)), source)


def parse_file(path: str | Path) -> ParseResult:
    """Parse a log file, or standard input when ``path`` is ``"-"``.

    Every input is read once, front to back, as a stream: a pipe (``<(cat log)``, a FIFO)
    reads as a file does."""
    if str(path) == "-":
        return _parse_stream(sys.stdin.buffer, "standard input", "<stdin>")
    path = Path(path)
    try:
        with path.open("rb", buffering=_BINARY_PROBE_BYTES) as handle:
            return _parse_stream(handle, str(path), str(path))
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


def _parse_stream(handle: BinaryIO, name: str, source: str) -> ParseResult:
    """Refuse binary data, seen in the first bytes without consuming them (``peek``: a
    pipe cannot seek back), then parse."""
    head = handle.peek(_BINARY_PROBE_BYTES) if hasattr(handle, "peek") else b""
    if b"\x00" in head[:_BINARY_PROBE_BYTES]:
        raise LogReadError(f"{name} holds binary data, not a log")
    return _parse_binary_handle(handle, source)


def _parse_binary_handle(handle: BinaryIO, source: str) -> ParseResult:
    """Lines end at \\n, \\r\\n or a lone \\r, as Python's universal newlines read them."""
    reader = _Reader()
    number = 0
    for chunk, end in _chunks(handle):
        keywords = _KeywordFinder(chunk, end)
        position = 0
        while position < end:
            if reader.busy:
                start = position
            else:
                found = keywords.first(position)
                if found < 0:
                    number += _count_lines(chunk, position, end)
                    break
                start = max(chunk.rfind(b"\n", position, found), chunk.rfind(b"\r", position, found)) + 1
                start = max(start, position)
                number += _count_lines(chunk, position, start)
            position = _line_end(chunk, start, end)
            for raw in _universal_lines(chunk[start:position].decode("utf-8", "replace")):
                number += 1
                reader.feed(number, raw)
    return reader.finish(source, number)


class _KeywordFinder:
    """Where the next keyword starts in ``chunk[:end]``. ``bytes.find`` of one string runs at
    memory speed where a regular expression of alternatives is ten times slower, so each
    keyword is found on its own and where it was found is kept until passed."""

    def __init__(self, chunk: bytes, end: int) -> None:
        self.chunk, self.end = chunk, end
        self.found = [chunk.find(keyword, 0, end) for keyword in _KEYWORD_BYTES]

    def first(self, position: int) -> int:
        """The earliest keyword at or after ``position``; -1 when there is none."""
        earliest = -1
        for index, found in enumerate(self.found):
            if 0 <= found < position:
                found = self.found[index] = self.chunk.find(_KEYWORD_BYTES[index], position, self.end)
            if found >= 0 and (earliest < 0 or found < earliest):
                earliest = found
        return earliest


def _chunks(handle: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """Bytes and where the whole lines in them end, about ``_CHUNK_BYTES`` at a time; a line
    longer than ``MAX_LINE_LENGTH`` bytes keeps only its start, so memory stays bounded."""
    carry = b""
    skipping = False  # inside the unread rest of an over-long line
    while data := handle.read(_CHUNK_BYTES):
        if skipping:
            newline = data.find(b"\n")
            if newline < 0:
                continue
            data, skipping = data[newline:], False
        data = carry + data if carry else data
        # A \r ending the data may be the first half of a \r\n: it waits for the next read.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
        carry = data[cut : cut + MAX_LINE_LENGTH]
        skipping = len(data) - cut > MAX_LINE_LENGTH
        if cut:
            yield data, cut
    if carry:
        yield carry, len(carry)


def _line_end(chunk: bytes, start: int, end: int) -> int:
    """Where the line that starts at ``start`` ends (after its \\n, \\r\\n or \\r)."""
    newline = chunk.find(b"\n", start, end)
    carriage_return = chunk.find(b"\r", start, end if newline < 0 else newline)
    if carriage_return < 0:
        return end if newline < 0 else newline + 1
    return carriage_return + (2 if carriage_return + 1 == newline else 1)


def _count_lines(chunk: bytes, start: int, end: int) -> int:
    lines = chunk.count(b"\n", start, end)
    if chunk.find(b"\r", start, end) >= 0:
        lines += chunk.count(b"\r", start, end) - chunk.count(b"\r\n", start, end)
    if end > start and chunk[end - 1 : end] not in (b"\n", b"\r"):
        lines += 1  # the last line of a log that does not end with a newline
    return lines


def _universal_lines(text: str) -> Iterator[str]:
    if "\r" not in text:
        yield text
        return
    yield from io.StringIO(text, newline=None)
