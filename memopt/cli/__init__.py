"""The ``memopt`` command line: a thin view over the library.

Each command lives in its own module here and registers itself on ``app``. Every
``MemoptError`` becomes one line on stderr and exit status 2; nothing else the library
raises should reach the user as a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.text import Text

from memopt import __version__
from memopt.errors import MemoptError

__all__ = ["app", "console", "error_console", "main"]

app = typer.Typer(
    name="memopt",
    help="Find, predict and verify ONNX Runtime Training memory-optimizer (recompute) configs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(soft_wrap=True)
error_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"memopt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """memopt: ORT memory-optimizer configs without the guesswork."""


_COMMANDS = ("config", "parse", "plan", "probe", "scan", "stack", "trial", "tune")


def main() -> None:
    # Each module registers its command. A command named on the command line needs only its
    # own (``memopt parse`` starts without the planner's scipy or the scanner's onnx); help
    # and errors in the command name need them all.
    named = next((argument for argument in sys.argv[1:] if not argument.startswith("-")), None)
    for command in (named,) if named in _COMMANDS else _COMMANDS:
        importlib.import_module(f"memopt.cli.{command}")
    try:
        app()
    except MemoptError as err:
        error_console.print(Text.assemble(("error: ", "bold red"), str(err)), highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        error_console.print("interrupted")
        sys.exit(130)
