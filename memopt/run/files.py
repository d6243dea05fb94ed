"""Files several memopt processes may write at once: locked updates, atomic replacement.

Every write goes to a temporary file with a unique name beside its target, then replaces
the target in one step (``os.replace``), so a reader sees the old content or the new one,
never half of either, and a symlink placed at the target is replaced, never written
through. Read-modify-write updates (the model library) hold an exclusive lock on a lock
file beside the target for the whole update, so no process's change is lost.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memopt.errors import MemoptError, write_failure
from memopt.ort.config import mode_for

__all__ = ["exclusive_lock", "replace_atomically"]


@contextmanager
def exclusive_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for updating ``target`` (on ``.<name>.lock`` beside it)."""
    lock_path = target.parent / f".{target.name}.lock"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise MemoptError(f"cannot lock {target} for an update: {err.strerror or err}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def replace_atomically(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` through a uniquely named temporary file and ``os.replace``."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise MemoptError(write_failure(target, err)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode_for(target))
        os.replace(name, target)
    except OSError as err:
        raise MemoptError(write_failure(target, err)) from None
    finally:
        Path(name).unlink(missing_ok=True)
    return target
