"""Files memopt writes: what a write may go to, locked updates, atomic replacement.

Every file memopt writes, at a path the user named (``plan --out``, ``config emit --out``,
``parse --config-out``, ``scan --plot``) or one of its own in the runs folder, goes through
``replace_atomically``. It writes only to a new path or over a regular file: a folder, a
symlink (even one to a regular file), a FIFO, a socket or a device node at the path is
refused with one line, whatever ``--force`` says, so a user's ``/dev/null`` or named pipe
never becomes a file and no write goes through a link to somewhere else.

The text goes to a temporary file with a unique name beside its target, then replaces the
target in one step (``os.replace``), so a reader sees the old content or the new one, never
half of either. Read-modify-write updates (the model library) hold an exclusive lock on a
lock file beside the target for the whole update, so no process's change is lost.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memopt.errors import MemoptError, path_kind, write_failure

__all__ = ["check_write_target", "config_file_argument", "exclusive_lock", "replace_atomically", "unwritable_folder"]


def check_write_target(target: Path, *, overwrite: bool) -> None:
    """Raise ``MemoptError`` unless ``target`` is a new path, or a regular file and ``overwrite``,
    in a folder that takes new files (a read-only mount is named as such).

    The path itself is looked at (``lstat``): a symlink is refused, not followed. Only an
    existing regular file's message mentions ``--force``; nothing else can be overwritten."""
    try:
        mode: int | None = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:  # a parent that is a file, a name too long: the write would fail the same way
        raise MemoptError(write_failure(target, err)) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise MemoptError(f"{target} is a folder; name the file to write in it")
    if mode is not None and not stat.S_ISREG(mode):
        raise MemoptError(f"{target} is {path_kind(mode)}; memopt writes only to a regular file or a new path")
    if mode is not None and not overwrite:
        raise MemoptError(f"{target} exists; pass --force to overwrite it")
    # The file is written beside the target and renamed: its folder (or the nearest one
    # there is, where the missing ones will be made) must take a new file.
    folder = next((parent for parent in target.absolute().parents if parent.exists()), Path("/"))
    problem = unwritable_folder(folder)
    if problem is not None:
        raise MemoptError(write_failure(target, problem))


@contextmanager
def exclusive_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for updating ``target`` (on ``.<name>.lock`` beside it)."""
    lock_path = target.parent / f".{target.name}.lock"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise MemoptError(write_failure(target, err)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def replace_atomically(target: Path, content: str | bytes, *, overwrite: bool = True) -> Path:
    """Write ``content`` to ``target`` through a uniquely named temporary file beside it.

    ``target`` must pass ``check_write_target``. With ``overwrite`` a regular file there is
    replaced (``os.replace``), keeping its mode; without, the file appears only if nothing
    took its name meanwhile. A failed write leaves the target as it was and no temporary file."""
    check_write_target(target, overwrite=overwrite)
    data = content.encode() if isinstance(content, str) else content
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise MemoptError(write_failure(target, err)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), _mode_for(target))
        if overwrite:
            os.replace(name, target)
        else:
            _link_without_overwriting(Path(name), target)
    except OSError as err:
        raise MemoptError(write_failure(target, err)) from None
    finally:
        Path(name).unlink(missing_ok=True)
    return target


def _mode_for(path: Path) -> int:
    """The mode a file written at ``path`` gets: the mode of the file it replaces, else what the
    user's umask gives a new file (a temporary file starts private)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def unwritable_folder(folder: Path) -> OSError | None:
    """Why no file can be created in ``folder``, as the error a write would get; None if one can.

    A read-only mount is named as such (``EROFS``), not as a permission problem."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return OSError(errno.EROFS, os.strerror(errno.EROFS), str(folder))
    except OSError as err:
        return err
    if not os.access(folder, os.W_OK | os.X_OK):
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
    return None


def _link_without_overwriting(temporary: Path, path: Path) -> None:
    try:
        os.link(temporary, path)  # fails if ``path`` exists, with no window for a race
    except FileExistsError:
        check_write_target(path, overwrite=False)  # says what took the name
        raise
    except OSError:
        # A file system without hard links: check, then rename.
        check_write_target(path, overwrite=False)
        os.replace(temporary, path)


def config_file_argument(text: str, error: type[MemoptError] = MemoptError) -> Path | None:
    """The config file a command-line config argument names, or None when ``text`` is the
    config itself (a config string, or plan keys such as ``Gelu+``).

    A name ending in ``.json`` or holding a ``/`` names a file, as does any other existing
    path whose last part holds no ``:`` (every config string holds one). That file must be a
    regular one, or a symlink to one: a folder, a device or a FIFO is refused (as ``error``),
    never read as the name of a plan. Both back ends' ``--config`` take their files so."""
    path = Path(text)
    names_a_file = text.endswith(".json") or "/" in text
    if not names_a_file and ":" in path.name:
        return None
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError) as err:
        # Missing, or text no file could be named (too long, a NUL): a config string, unless it names a file.
        if not names_a_file:
            return None
        if isinstance(err, (FileNotFoundError, NotADirectoryError)):
            raise error(f"the config file {text} does not exist") from None
        raise error(f"cannot read the config file {text}: {getattr(err, 'strerror', None) or err}") from None
    if not stat.S_ISREG(mode):
        raise error(f"the config {text} is {path_kind(mode)}, not a config file")
    return path
