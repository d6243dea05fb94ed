"""Real tmpfs mounts for tests that need a small or a read-only file system (root only)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["tmpfs"]


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
