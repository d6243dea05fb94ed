"""Real tmpfs mounts for tests that need a small or a read-only file system (root only)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["read_only_copy", "tmpfs"]


@contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at the new folder ``folder`` with ``options`` (``size=1m``, ``ro,size=1m``)
    for the ``with`` block, unmounted after it; the test is skipped where mounting is not allowed."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@contextmanager
def read_only_copy(folder: Path, source: Path) -> Iterator[Path]:
    """A copy of the folder ``source`` on a tmpfs at the new folder ``folder``, remounted read-only
    for the ``with`` block (root writes through a folder's mode bits, not through a read-only mount)."""
    with tmpfs(folder, "size=256m") as mounted:
        shutil.copytree(source, mounted, dirs_exist_ok=True)
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(mounted)], capture_output=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount a tmpfs read-only here: {remounted.stderr.decode().strip()}")
        yield mounted
