"""Log text to clean lines: bounded reads, ANSI codes, rank tags, 1.16 re-wrapping.

Everything here is a generator over lines so a log of any size is read in bounded memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

__all__ = ["EQUALS_RULE", "CapturedRecordJoiner", "LogLine", "MAX_LINE_LENGTH", "bounded_lines", "brief", "clean_line"]

# Longer lines are not summary lines (a 50-op subgraph row is ~1,500 characters); the
# rest of such a line is skipped so that a file without newlines cannot fill memory.
MAX_LINE_LENGTH = 1 << 16
# The "=====" line that borders ORT's C++ summaries (Format A and MemoryInsight alike).
EQUALS_RULE = re.compile(r"(?:^|\s)={20,}\s*$")

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# torchrun ("[rank0]:", "[default0]:"), mpirun --tag-output ("[1,0]<stdout>:"), srun --label ("0: ").
_RANK_TAG = re.compile(r"^(?:\[((?:rank|default)\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:|\s*(\d{1,5}): )")
# The 1.16 Python logger re-emits captured C++ output as one record: pieces of at most
# 180 characters, each on its own line after a 4-space indent (textwrap.wrap).
_CAPTURED_HEADER = re.compile(r"Filtered logs \(\d+ records suppressed\):\s*$")
_WRAP_WIDTH = 180
_WRAP_INDENT = "    "


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based, of the first physical line
    stream: str | None  # rank tag, None for untagged lines
    text: str  # without line ending, ANSI codes or rank tag
    captured: bool = False  # inside a 1.16 "Filtered logs" record


def brief(text: str) -> str:
    """``text`` stripped and short enough to quote in a one-line warning."""
    text = text.strip()
    return text if len(text) <= 200 else f"{text[:160]}… ({len(text):,} characters)"


def bounded_lines(handle: TextIO, limit: int = MAX_LINE_LENGTH) -> Iterator[str]:
    """Lines of ``handle``; a line longer than ``limit`` is cut to its first ``limit`` characters."""
    while True:
        line = handle.readline(limit)
        if not line:
            return
        if len(line) == limit and not line.endswith("\n"):
            while (rest := handle.readline(limit)) and not rest.endswith("\n"):
                pass
        yield line


def clean_line(number: int, raw: str) -> LogLine:
    """One physical line without its ending, ANSI codes or rank tag."""
    text = raw.rstrip("\r\n")
    if "\r" in text:
        # A carriage return inside a line overwrites what came before it on a terminal.
        text = text.rsplit("\r", 1)[1] or text.replace("\r", "")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    stream = None
    if text[:1] in "[0123456789 ":
        match = _RANK_TAG.match(text)
        if match is not None:
            stream = match.group(1) or match.group(2) or match.group(3)
            text = text[match.end() :]
            if text.startswith(" ") and match.group(3) is None:
                text = text[1:]
    return LogLine(number, stream, text)


class CapturedRecordJoiner:
    """Rejoins the pieces the 1.16 logger split long lines into, and marks captured lines.

    Feed it the lines of one stream; a line comes out once the next one shows it is
    complete. A piece continues the previous line exactly when textwrap would have put
    its first word there had it fit in 180 columns.
    """

    def __init__(self) -> None:
        self._pending: LogLine | None = None
        self._pending_piece_length = 0
        self._in_record = False

    @property
    def holding(self) -> bool:
        """Whether a line is held back because the next one may continue it."""
        return self._pending is not None

    def feed(self, line: LogLine) -> list[LogLine]:
        """The lines now complete, in order: none while ``line`` extends the held one."""
        pending = self._pending
        piece_length = len(line.text) - len(_WRAP_INDENT)
        if self._in_record and pending is not None and line.text.startswith(_WRAP_INDENT) and line.text[4:5].strip():
            first_word = line.text[4:].split(" ", 1)[0]
            if self._pending_piece_length + 1 + len(first_word) > _WRAP_WIDTH:
                joiner = "" if self._pending_piece_length >= _WRAP_WIDTH else " "
                self._pending = LogLine(pending.number, pending.stream, pending.text + joiner + line.text[4:], True)
                self._pending_piece_length = piece_length
                return []
        indented = line.text.startswith(_WRAP_INDENT)
        self._in_record = (self._in_record and indented) or (
            "Filtered logs" in line.text and _CAPTURED_HEADER.search(line.text) is not None
        )
        complete = [] if pending is None else [pending]
        if self._in_record:
            # Only a line inside a captured record can be continued by the next one.
            self._pending = LogLine(line.number, line.stream, line.text, True) if indented else line
            self._pending_piece_length = piece_length
        else:
            self._pending = None
            complete.append(line)
        return complete

    def flush(self) -> LogLine | None:
        pending, self._pending = self._pending, None
        return pending
