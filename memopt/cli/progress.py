"""What a back end's command work shows while it runs (``memopt.backends.base.Progress``): the
back end's line once the request is checked, progress lines on stderr, a spinner while it works."""

from __future__ import annotations

from contextlib import AbstractContextManager

from rich.console import Console
from rich.markup import escape

from memopt.cli import console, error_console
from memopt.cli.options import command_notes
from memopt.cli.show import say, stdout_kept_for_the_result
from memopt.core import Target

__all__ = ["CommandProgress"]


class CommandProgress:
    """``line``: the command's first line, once its request is checked (its back end; None: the
    command said it already); ``status``: where the spinner goes (stderr where stdout carries
    ``--json``); ``python``: the interpreter ``--python`` names, for a run of the target."""

    def __init__(self, line: str | None, status: Console = console, python: str | None = None) -> None:
        self.line = line
        self.status = status
        self.python = python

    def checked(self) -> None:
        if self.line is not None:
            say(self.line)

    def say(self, line: str) -> None:
        say(line)

    def warn(self, line: str) -> None:
        error_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)

    def result_kept(self) -> AbstractContextManager[object]:
        return stdout_kept_for_the_result()

    def working(self, what: str) -> AbstractContextManager[object]:
        return self.status.status(escape(what))

    def interpreter(self, target: Target, batch: int) -> str | None:
        return command_notes(target, self.python, batch)
