"""The README's shell blocks, read as a shell would run them (the README's command tests)."""

from __future__ import annotations

import re
import shlex

__all__ = ["shell_blocks"]


def shell_blocks(readme: str) -> list[list[list[str]]]:
    """Each ```sh block as the commands a shell would run, each a list of words:
    continuations joined, comments and the ``…`` elisions of shown output dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    commands: list[list[list[str]]] = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
        commands.append([words for words in lines if words and words != ["…"]])
    return commands
