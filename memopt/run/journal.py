"""The trial journal: one JSON line per finished trial, written the moment it ends.

Each line is appended, flushed and fsynced before the next trial starts, so a memopt
that is killed loses at most the trial in flight. A torn line (the process died
mid-write) is skipped on reading and ended before the next record is appended; any other
line that does not hold a record (not JSON, not an object with a key, longer than any record
memopt writes) is skipped with a ``DamagedRecord`` warning (``report_damaged``); appends
hold an exclusive lock on the file, so memopt processes sharing a runs folder never
interleave or tear each other's lines. The journal is never opened through a symlink.
``--resume`` looks trials up by their key: a digest of what decides the outcome (recipe,
options, batch, config, steps, device, versions).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from memopt.core.records import report_damaged
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError, write_failure
from memopt.run.files import unwritable_folder

__all__ = ["JOURNAL_NAME", "Journal", "JournalEntry", "journaled_trial", "read_trial"]

JOURNAL_NAME = "journal.jsonl"
# A record memopt writes is a few KiB (a trial's config, plans and ranks); a line far past
# that is damage, skipped without holding it in memory whole.
_MOST_LINE_BYTES = 1 << 20


@dataclass(frozen=True)
class JournalEntry:
    """One journal line: ``record`` is the trial as ``TrialResult.to_record()`` wrote it."""

    line_number: int
    key: str
    record: Mapping[str, Any]
    path: Path

    @property
    def where(self) -> str:
        """The line, as a message names it."""
        return f"{self.path} line {self.line_number}"


class Journal:
    """A JSON-lines file of trial records; safe to read while another process appends."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @classmethod
    def in_folder(cls, folder: Path | str) -> Journal:
        return cls(Path(folder) / JOURNAL_NAME)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write ``record`` (it must hold a ``key``) as one line, durably."""
        if "key" not in record:
            raise ValueError("a journal record needs a 'key'")
        line = json.dumps(record, sort_keys=True, default=str, separators=(",", ":")) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._open()
        except OSError as err:
            raise self._error(err) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the torn-line check and the write, one writer at a time
            # A writer that died mid-line left a torn fragment: end it, or this record joins it.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            data = line.encode()
            while data:  # O_APPEND: every write lands at the end
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as err:
            raise self._error(err) from None
        finally:
            os.close(fd)  # also releases the lock

    def check_writable(self) -> None:
        """Raise ``MemoptError`` now, before a trial runs, if a record could not be appended later."""
        try:
            if self.path.is_symlink() or self.path.exists():
                os.close(self._open())
            elif (problem := unwritable_folder(self._existing_parent())) is not None:
                raise problem
        except OSError as err:
            raise self._error(err) from None

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)

    def _existing_parent(self) -> Path:
        return next((p for p in self.path.parents if p.exists()), Path("."))

    def _error(self, err: OSError) -> MemoptError:
        if err.errno == errno.ELOOP:
            return MemoptError(f"the journal {self.path} is a symlink; memopt does not write through one")
        return MemoptError(write_failure(f"the journal {self.path}", err))

    def entries(self, kind: str | None | tuple[str | None, ...] = None) -> Iterator[JournalEntry]:
        """Every complete line of ``kind`` (or of any of several), oldest first; unreadable lines are skipped.

        Trials are records without a ``kind``; other records name theirs (``calibration``).
        """
        kinds = kind if isinstance(kind, tuple) else (kind,)
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return
        with handle:
            for number, line in enumerate(_lines(handle), 1):
                if line is None:
                    self._skipped(number, f"longer than {_MOST_LINE_BYTES // 1024} KiB")
                    continue
                if not line.strip():
                    continue
                try:  # a number past Python's 4300 digits is a ValueError too
                    record = json.loads(line.decode("utf-8", errors="replace"))
                except ValueError as err:
                    self._skipped(number, f"not JSON: {str(err)[:80]}")
                    continue
                if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                    self._skipped(number, "not a record with a key")
                elif record.get("kind") in kinds:
                    yield JournalEntry(number, record["key"], record, self.path)

    def _skipped(self, number: int, why: str) -> None:
        report_damaged(f"{self.path} line {number}: skipped a damaged record ({why})")

    def newest_first(
        self, keys: tuple[str, ...], kind: str | None | tuple[str | None, ...] = None
    ) -> list[JournalEntry]:
        """The entries of ``kind`` with one of ``keys``, newest first."""
        return [entry for entry in self.entries(kind) if entry.key in keys][::-1]

    def latest(self, key: str, usable: tuple[str, ...] | None = None, kind: str | None = None) -> JournalEntry | None:
        """The newest entry of ``kind`` with ``key`` (whose ``status`` is in ``usable``, when given)."""
        found = None
        for entry in self.entries(kind):
            if entry.key == key and (usable is None or entry.record.get("status") in usable):
                found = entry
        return found


def _lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """Each complete line of ``handle`` (None for one longer than ``_MOST_LINE_BYTES``, read
    past in pieces); a last line without its newline is torn (its writer died mid-line, or is
    writing it now) and ends the lines."""
    while True:
        line = handle.readline(_MOST_LINE_BYTES + 1)
        if not line.endswith(b"\n"):
            if len(line) <= _MOST_LINE_BYTES:
                return
            while not line.endswith(b"\n"):
                line = handle.readline(_MOST_LINE_BYTES)
                if not line:
                    return
            yield None
            continue
        yield line


def journaled_trial(
    journal: Journal,
    key: str,
    usable: Callable[[TrialResult], bool],
    read: Callable[[JournalEntry], TrialResult | None] | None = None,
    keys: tuple[str, ...] = (),
    kind: str | None | tuple[str | None, ...] = None,
    passed: int = 0,
    oldest_first: bool = False,
) -> TrialResult | None:
    """The newest trial the journal holds under ``key`` (or ``keys``, an older release's) that
    is ``usable`` (the oldest, with ``oldest_first``), passing over ``passed`` usable ones before
    it in that order (a repeat of the same run reuses its own): each record read (``read``,
    default ``TrialResult.from_record`` checked against the journal's folder) and checked on the
    way, a damaged one reported and passed over."""
    entries = journal.newest_first((key, *keys), kind)
    for entry in reversed(entries) if oldest_first else entries:
        trial = read(entry) if read is not None else read_trial(entry)
        if trial is not None and usable(trial):
            if passed == 0:
                return trial
            passed -= 1
    return None


def read_trial(entry: JournalEntry) -> TrialResult | None:
    """The trial ``entry`` holds, checked (its run folder in the journal's); None where it is damaged."""
    return TrialResult.from_record(entry.record, entry.where, entry.path.parent)
