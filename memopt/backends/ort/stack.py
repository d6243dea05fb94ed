"""What ORT training stack an interpreter has, and whether ORTModule can run on it.

Everything here reads files and package metadata only: it imports neither torch nor
onnxruntime, so it is cheap and works even where those imports would fail.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from memopt.errors import MemoptError

__all__ = [
    "EXTENSIONS_INSTALL_COMMAND",
    "TORCH_SUPPORTED",
    "StackError",
    "StackInfo",
    "check_stack",
    "inspect_stack",
    "torch_problem",
]

# Torch releases ORTModule 1.19.2 runs with, as (major, minor) from-inclusive/to-exclusive.
# 2.6.0 trains; from 2.7.0 ORTModule's C++ extension builds but cannot load (undefined
# symbol typeinfo for torch::autograd::PyNode): docs/supported-stacks.md. Plain tuples rather than
# `packaging`, so the check runs in an interpreter that has nothing installed.
TORCH_SUPPORTED = ((2, 1), (2, 7))
_RELEASE = re.compile(r"^(\d+)\.(\d+)")
EXTENSIONS_INSTALL_COMMAND = "python -m onnxruntime.training.ortmodule.torch_cpp_extensions.install"
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_PACKAGE_LINE = re.compile(r"""^package_name\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_CUDA_LINE = re.compile(r"""^cuda_version\s*=\s*["']([^"']*)["']""", re.MULTILINE)


class StackError(MemoptError):
    """The interpreter cannot run ORTModule; the message says what to do."""


@dataclass(frozen=True)
class StackInfo:
    """Versions and build state of the ORT training stack one interpreter would import."""

    ort_version: str | None
    ort_package: str | None
    ort_cuda_version: str | None
    has_ortmodule: bool
    extensions_dir: str | None
    extensions_built: bool
    torch_version: str | None


def inspect_stack() -> StackInfo:
    ort_dir = _package_dir("onnxruntime")
    torch_version = _distribution_version("torch")
    if ort_dir is None:
        return StackInfo(None, None, None, False, None, False, torch_version)
    package_info = _read(ort_dir / "capi" / "build_and_package_info.py")
    version = _first(_VERSION_LINE, _read(ort_dir / "__init__.py"))
    extensions = ort_dir / "training" / "ortmodule" / "torch_cpp_extensions"
    return StackInfo(
        ort_version=version,
        ort_package=_first(_PACKAGE_LINE, package_info),
        ort_cuda_version=_first(_CUDA_LINE, package_info) or None,
        has_ortmodule=(extensions.parent / "ortmodule.py").is_file(),
        extensions_dir=str(extensions),
        extensions_built=any(any(extensions.glob(pattern)) for pattern in ("*.so", "*.dll", "*.dylib")),
        torch_version=torch_version,
    )


def torch_problem(torch_version: str | None) -> str | None:
    """Why ORTModule cannot use this torch, or None when it can."""
    if torch_version is None:
        return "torch is not installed: pip install 'torch==2.4.1'"
    match = _RELEASE.match(torch_version)
    if match is None:
        return f"torch version {torch_version!r} is not a version memopt can read"
    lowest, beyond = TORCH_SUPPORTED
    if not lowest <= (int(match.group(1)), int(match.group(2))) < beyond:
        supported = f">={lowest[0]}.{lowest[1]},<{beyond[0]}.{beyond[1]}"
        return (
            f"torch {torch_version} cannot run ORTModule 1.19.2 (it works with torch{supported}): "
            "pip install 'torch==2.4.1' in this environment"
        )
    return None


def check_stack(info: StackInfo) -> None:
    """Raise StackError naming the first thing that keeps ORTModule from running."""
    if info.ort_version is None:
        raise StackError(
            "onnxruntime-training is not installed: pip install 'memopt[cpu]' (or 'memopt[gpu]' on a CUDA 11.8 machine)"
        )
    if not info.has_ortmodule:
        raise StackError(
            f"the installed onnxruntime {info.ort_version} ({info.ort_package or 'unknown build'}) "
            "has no training support: pip uninstall onnxruntime, then pip install 'memopt[cpu]'"
        )
    problem = torch_problem(info.torch_version)
    if problem:
        raise StackError(problem)
    if not info.extensions_built:
        raise StackError(f"ORTModule's C++ extensions are not built: run `{EXTENSIONS_INSTALL_COMMAND}`")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return match.group(1) if match else None
