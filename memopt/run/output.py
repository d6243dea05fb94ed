"""A run's output, kept bounded: a job that never stops printing fills neither the disk nor memopt.

``LogPump`` copies a child's output from a pipe into the run folder's log: the first
``HEAD_BYTES`` as they come, then only the last ``TAIL_BYTES`` (held in memory), written
after a line that says how much was left out once the output ends. ``last_lines`` reads a
log's last lines from its end, whatever its size.
"""

from __future__ import annotations

import errno
import os
import select
import threading
from pathlib import Path
from typing import IO

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "LogPump", "full_disk_in", "last_lines"]

HEAD_BYTES = 64 * 1024 * 1024
TAIL_BYTES = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
# How often a pump waiting for output looks whether it was told to stop.
_POLL_S = 0.1
# How far back from a log's end ``last_lines`` looks: lines longer than this are cut.
_TAIL_WINDOW = 256 * 1024


class LogPump:
    """Copy ``source`` (a pipe's read end) into ``log`` (unbuffered) on a thread of its own, bounded."""

    def __init__(self, source: IO[bytes], log: IO[bytes], head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES):
        self._source = source
        self._log = log
        self._head_left = head_bytes
        self._tail_bytes = tail_bytes
        self._tail = bytearray()
        self._dropped = 0
        self.write_error: OSError | None = None
        self.failed = threading.Event()  # set on the first failed write: the run cannot be kept
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memopt-log", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Wait for the output to end (every writer gone), then write the kept tail."""
        self._thread.join(timeout_s)
        self._stop.set()  # a writer memopt could not end still holds the pipe: stop reading it
        self._thread.join()
        self._finish()

    def _run(self) -> None:
        fd = self._source.fileno()
        while not self._stop.is_set():
            if not select.select([fd], [], [], _POLL_S)[0]:
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return
            self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        if self._head_left > 0:
            head, chunk = chunk[: self._head_left], chunk[self._head_left :]
            self._head_left -= len(head)
            self._write(head)
        if chunk:
            self._tail += chunk
            excess = len(self._tail) - self._tail_bytes
            if excess > 0:
                del self._tail[:excess]
                self._dropped += excess

    def _finish(self) -> None:
        tail = bytes(self._tail)
        if self._dropped:
            # Start the kept tail on a whole line.
            newline = tail.find(b"\n")
            if 0 <= newline < len(tail) - 1:
                self._dropped += newline + 1
                tail = tail[newline + 1 :]
            self._write(
                f"\n[memopt] output cut: {self._dropped} bytes left out here; this log keeps the first "
                f"{HEAD_BYTES // 2**20} MiB and the last {self._tail_bytes // 2**20} MiB of the run's output\n".encode()
            )
        self._write(tail)
        self._tail.clear()

    def _write(self, data: bytes) -> None:
        if not data or self.write_error is not None:
            return
        try:
            while data:  # an unbuffered file may take part of it
                written = self._log.write(data)
                if not written:
                    raise OSError(errno.EIO, "the log takes no more")
                data = data[written:]
        except OSError as err:  # a full disk: keep draining the pipe so the job is not blocked
            self.write_error = err
            self.failed.set()


def last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` non-blank lines of ``path``, read from its end; [] when unreadable."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - _TAIL_WINDOW))
            data = handle.read(_TAIL_WINDOW)
    except OSError:
        return []
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-count:]


# How Python and the C library word a full disk in a traceback or an error line.
_DISK_FULL_WORDS = ("no space left on device", "[errno 28]", "disk quota exceeded")


def full_disk_in(lines: list[str]) -> bool:
    """Whether a run's last output lines say it failed on a full disk."""
    return any(words in line.lower() for line in lines for words in _DISK_FULL_WORDS)
