"""The README's shell blocks, read as a shell would run them (the README's command tests)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

__all__ = ["README", "readme_block", "shell_blocks"]

README = Path(__file__).resolve().parents[2] / "README.md"


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


def readme_block(script: str) -> list[list[str]]:
    """The README's one shell block that runs ``script``: its scan, its tune, the export line
    tune prints and the job run after it."""
    found = [block for block in shell_blocks(README.read_text()) if any(script in " ".join(line) for line in block)]
    assert len(found) == 1, f"the README shows one {script} block"
    return found[0]
