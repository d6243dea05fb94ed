"""The installed package: every folder of memopt that Python imports as a package is listed in
pyproject.toml, so that a wheel (``pip install memopt``, not editable) carries it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_installed() -> None:
    tomllib = pytest.importorskip("tomllib", reason="the standard library reads TOML from Python 3.11")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "memopt").glob("**/__init__.py")}
    mapped = {name: Path(folder) for name, folder in setuptools["package-dir"].items()}
    folders |= {
        ".".join((name, *init.parent.relative_to(ROOT / folder).parts))
        for name, folder in mapped.items()
        for init in (ROOT / folder).glob("**/__init__.py")
    }
    assert folders == set(setuptools["packages"])
