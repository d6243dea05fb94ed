"""``memopt stack``: show the ORT training stack and build ORTModule's C++ extensions once."""

from __future__ import annotations

import subprocess
import sys

import typer

from memopt.backends.ort.stack import (
    EXTENSIONS_INSTALL_COMMAND,
    StackError,
    check_stack,
    inspect_stack,
)
from memopt.cli import app, console

__all__ = ["stack_command"]


@app.command("stack")
def stack_command(
    build_extensions: bool = typer.Option(
        False, "--build-extensions", help="Build ORTModule's C++ extensions if they are not built yet."
    ),
) -> None:
    """ORT: show the ORT and torch versions and whether ORTModule can run here; exit 2 when it cannot."""
    info = inspect_stack()
    if build_extensions and info.has_ortmodule and not info.extensions_built:
        console.print(f"Building ORTModule's C++ extensions (once; a few minutes): {EXTENSIONS_INSTALL_COMMAND}")
        command = [sys.executable, *EXTENSIONS_INSTALL_COMMAND.split()[1:]]
        if subprocess.run(command, check=False).returncode != 0:
            raise StackError(
                f"building ORTModule's C++ extensions failed; see the output above ({EXTENSIONS_INSTALL_COMMAND})"
            )
        info = inspect_stack()
    build = info.ort_package or "not installed"
    console.print(
        f"onnxruntime  {info.ort_version or '-'} ({build}{', CUDA ' + info.ort_cuda_version if info.ort_cuda_version else ''})",
        markup=False,
    )
    console.print(f"torch        {info.torch_version or 'not installed'}", markup=False)
    console.print(
        f"extensions   {'built' if info.extensions_built else 'not built'} ({info.extensions_dir or '-'})", markup=False
    )
    check_stack(info)
    console.print("ORTModule can run here.")
