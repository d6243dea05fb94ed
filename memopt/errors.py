"""The one exception type memopt's CLI turns into a one-line message and a non-zero exit."""

from __future__ import annotations

import errno
import stat
from pathlib import Path

__all__ = ["DamagedRecord", "MemoptError", "disk_full", "one_line", "path_kind", "write_failure"]


class MemoptError(Exception):
    """A problem the user can act on; ``str(err)`` is the whole message, one line."""


class DamagedRecord(UserWarning):
    """A record read from disk that does not hold what memopt wrote: it is skipped, and said so."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, for errors whose full text goes to a log."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {(lines[0] if lines else '')[:limit]}"


def disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` is the file system saying it has no room left (or the user's quota is spent)."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def write_failure(path: Path | str, err: OSError) -> str:
    """The one line for a failed write of ``path``: a full disk and a read-only mount named as such."""
    if disk_full(err):
        return f"the disk is full: cannot write {path}"
    if err.errno == errno.EROFS:
        return f"the file system is read-only: cannot write {path}"
    return f"cannot write {path}: {err.strerror or err}"


_KINDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a symlink",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def path_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, as a message names it: "a folder", "a FIFO (named pipe)"..."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")
