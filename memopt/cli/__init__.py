"""The ``memopt`` command line: a thin view over the library.

Each command lives in its own module here and registers itself on ``app``. Every
``MemoptError`` becomes one line on stderr and exit status 2; nothing else the library
raises should reach the user as a traceback. Exit status 3 (``EXIT_DOES_NOT_FIT``) is a
result, not an error: ``plan --verify`` measured its config over the budget, or ``tune``
ended without a config measured to fit.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

from memopt import __version__
from memopt.errors import MemoptError

__all__ = ["EXIT_DOES_NOT_FIT", "EXIT_ERROR", "app", "console", "error_console", "main"]

EXIT_ERROR = 2
EXIT_DOES_NOT_FIT = 3

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


def main() -> None:
    from memopt.cli import (  # noqa: F401  (each registers its command)
        config,
        parse,
        plan,
        probe,
        scan,
        stack,
        trial,
        tune,
    )

    try:
        app()
    except MemoptError as err:
        error_console.print(Text.assemble(("error: ", "bold red"), str(err)), highlight=False, soft_wrap=True)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        error_console.print("interrupted")
        sys.exit(130)
