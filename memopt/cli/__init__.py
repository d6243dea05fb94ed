"""The ``memopt`` command line: a thin view over the library.

Each command lives in its own module here and registers itself on ``app``. Every
``MemoptError`` (and any file-system error) becomes one line on stderr and exit status 2;
nothing else the library raises should reach the user as a traceback. SIGINT, SIGTERM and
SIGHUP end every run memopt started, print one line and exit 128 + the signal's number;
on every other way out, runs still going are ended too. Exit status 3
(``EXIT_DOES_NOT_FIT``) is a result, not an error: ``plan --verify`` measured its config over
the budget, or ``tune`` ended without a config measured to fit.
"""

from __future__ import annotations

import importlib
import signal
import sys
import warnings
from pathlib import Path
from types import FrameType

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
    help=(
        "Find what to recompute so a training batch fits a memory budget, and verify it by a real run: "
        "an ORTMODULE_MEMORY_OPT_CONFIG for ONNX Runtime Training's ORTModule (--backend ort), or a "
        "recompute policy for plain PyTorch that memopt.recompute.apply(model) reads from "
        "MEMOPT_RECOMPUTE_POLICY (--backend torch). Start with scan, then tune."
    ),
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
    """memopt: recompute configs for ORTModule and plain PyTorch, without the guesswork."""


_COMMANDS = ("config", "export", "parse", "plan", "probe", "scan", "stack", "trial", "tune")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_stopped_by: list[int] = []  # the stop signal that arrived, if one did


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; the runs memopt started are already ended."""


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    end_all_runs()
    if not _stopped_by:
        _stopped_by.append(signum)
    for stop in _STOP_SIGNALS:  # a second signal while unwinding must not cut the clean-up short
        signal.signal(stop, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def end_all_runs() -> None:
    """End every run memopt started; without the launcher loaded, none was started (and
    ``memopt parse`` keeps its start-up free of onnx)."""
    launch = sys.modules.get("memopt.run.launch")
    if launch is not None:
        launch.end_all_runs()


def main() -> None:
    for stop in _STOP_SIGNALS:
        signal.signal(stop, _on_stop_signal)
    warnings.showwarning = _show_warning
    # Each module registers its command. A command named on the command line needs only its
    # own (``memopt parse`` starts without the planner's scipy or the scanner's onnx); help
    # and errors in the command name need them all.
    named = next((argument for argument in sys.argv[1:] if not argument.startswith("-")), None)
    for command in (named,) if named in _COMMANDS else _COMMANDS:
        importlib.import_module(f"memopt.cli.{command}")
    try:
        code = app(standalone_mode=False, prog_name="memopt")
    except typer.TyperException as err:  # an unknown or malformed option or command: one line too
        # No arguments at all: typer has shown the help, as no_args_is_help asks.
        if type(err).__name__ != "NoArgsIsHelpError":
            _say(Text.assemble(("error: ", "bold red"), _usage_text(err)))
        sys.exit(EXIT_ERROR)
    except typer.Abort:  # an end of input, as typer reports it
        _say(Text.assemble(("error: ", "bold red"), "the input ended"))
        sys.exit(EXIT_ERROR)
    except (MemoptError, OSError) as err:
        if _stopped_by:
            _stopped()
        _say(Text.assemble(("error: ", "bold red"), _error_text(err)))
        sys.exit(EXIT_ERROR)
    except (KeyboardInterrupt, SystemExit):
        if _stopped_by:
            _stopped()
        raise
    finally:
        end_all_runs()
    if _stopped_by:  # typer turned the stop signal's interrupt into exit status 130
        _stopped()
    if isinstance(code, int) and code:  # an exit typer asked for (typer.Exit)
        sys.exit(code)


def _usage_text(err: typer.TyperException) -> str:
    command = getattr(getattr(err, "ctx", None), "command_path", None) or "memopt"
    return f"{err.format_message()} (see {command} --help)"


def _error_text(err: Exception) -> str:
    if isinstance(err, MemoptError):
        return str(err)
    # A file-system problem no command foresaw: still one line.
    where = f": {err.filename}" if isinstance(err, OSError) and err.filename else ""
    return f"{getattr(err, 'strerror', None) or err}{where}"


def _stopped() -> None:
    end_all_runs()
    name = signal.Signals(_stopped_by[0]).name
    _say(Text(f"interrupted by {name}: every process memopt started for this command was ended"))
    sys.exit(128 + _stopped_by[0])


_warned: set[str] = set()  # each warning's text, said once however often it is raised


def _show_warning(message: Warning | str, category: type[Warning], filename: str, *_: object, **__: object) -> None:
    """Python's warnings (a damaged record skipped, ...) as one-line warnings, each once; one
    raised inside a library (torch's own deprecations) is said as that library's."""
    text = str(message)
    if text in _warned:
        return
    _warned.add(text)
    parts = Path(filename).parts
    library = parts[parts.index("site-packages") + 1].removesuffix(".py") if "site-packages" in parts[:-1] else None
    said_by = f"{library} says: " if library not in (None, "memopt") else ""
    _say(Text.assemble(("warning: ", "yellow"), said_by, text))


def _say(line: Text) -> None:
    try:
        error_console.print(line, highlight=False, soft_wrap=True)
    except OSError:  # the terminal is gone (SIGHUP): nothing to tell
        pass
