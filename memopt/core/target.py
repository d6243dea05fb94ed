"""What the user points memopt at, parsed once: one class per kind of target.

A target's ``spec`` is its one text form: what the user typed for a recipe or a graph file,
``hf:NAME`` for a Hugging Face config and ``cmd:LINE`` for the user's own command. Journals,
saved models, settings and the child process keep the spec; everything else holds the
``Target`` that ``parse_target`` made of it and asks it, never the string, what it is.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from memopt.errors import MemoptError
from memopt.recipes import (
    BUILTIN_RECIPES,
    Recipe,
    check_hf_recipe,
    check_recipe,
    load_hf_recipe,
    load_recipe,
    recipe_source,
)
from memopt.recipes.hf import HF_PREFIX
from memopt.recipes.hf import PRESETS as HF_PRESETS

__all__ = [
    "BATCH_PLACEHOLDER",
    "COMMAND_PREFIX",
    "HF_PREFIX",
    "BuiltinRecipe",
    "Command",
    "GraphFile",
    "HfConfig",
    "RecipeSource",
    "RecipeTarget",
    "RunnableTarget",
    "Target",
    "command_target",
    "parse_runnable",
    "parse_target",
    "runnable",
]

COMMAND_PREFIX = "cmd:"
BATCH_PLACEHOLDER = "{batch}"


@dataclass(frozen=True)
class Target(ABC):
    spec: str
    noun: ClassVar[str] = "recipe"  # what a message calls it

    def __str__(self) -> str:
        return self.spec

    @property
    @abstractmethod
    def label(self) -> str:
        """A short name for run folders and config files."""

    def identity(self) -> str:
        """What the target's results depend on, as journals and saved models key them."""
        return self.spec

    @property
    def fixed_batch(self) -> bool:
        """The target runs at its own batch size, which memopt cannot vary."""
        return False


class RunnableTarget(Target):
    """A target memopt can train: a recipe in its child process, or the user's command."""


@dataclass(frozen=True)
class RecipeTarget(RunnableTarget):
    """A recipe the child process imports (built-in, file, module or ``hf:`` config)."""

    @property
    def label(self) -> str:
        return _label(Path(recipe_source(self.spec)[0]).stem, "recipe")

    def load(self, options: Mapping[str, Any]) -> Recipe:
        """The recipe, imported and checked against the contract (in the child process)."""
        return load_recipe(self.spec, options)

    def check(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        """What can be checked before a run, without importing the user's code; the notes to say."""
        check_recipe(self.spec, options)
        return ()


@dataclass(frozen=True)
class BuiltinRecipe(RecipeTarget):
    """One of memopt's own recipes (``gpt``, ``bert``, …)."""


@dataclass(frozen=True)
class RecipeSource(RecipeTarget):
    """The user's recipe: a ``.py`` file or an importable module, ``:attr`` optional."""

    def identity(self) -> str:
        path = Path(recipe_source(self.spec)[0])
        if path.suffix == ".py" and path.is_file():
            return f"{path.resolve()}#{_digest(path.read_bytes())}"
        return self.spec


@dataclass(frozen=True)
class HfConfig(RecipeTarget):
    """A Hugging Face model by its config: a preset's name or a config file or folder."""

    @property
    def name(self) -> str:
        return self.spec[len(HF_PREFIX) :]

    @property
    def label(self) -> str:
        name = self.name.rstrip("/")
        if name.endswith("config.json"):
            name = str(Path(name).parent)
        return f"hf-{_label(Path(name).name, 'model')}"

    def load(self, options: Mapping[str, Any]) -> Recipe:
        return load_hf_recipe(self.spec, options)

    def check(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        return check_hf_recipe(self.spec, options)

    def identity(self) -> str:
        if self.name in HF_PRESETS:  # the loader takes a preset's name before any folder of that name
            return self.spec
        config = Path(self.name).expanduser()
        config = config / "config.json" if config.is_dir() else config
        if config.is_file():
            return f"{HF_PREFIX}{config.resolve()}#{_digest(config.read_bytes())}"
        return self.spec


@dataclass(frozen=True)
class Command(RunnableTarget):
    """The user's own training command, run as is; ``{batch}`` marks its batch size."""

    noun: ClassVar[str] = "training command"

    @property
    def line(self) -> str:
        return self.spec[len(COMMAND_PREFIX) :]

    @property
    def label(self) -> str:
        """The script the command runs, else its program."""
        words = self.words()
        scripts = [w for w in words if w.endswith(".py")]
        return _label(Path(scripts[0] if scripts else (words[0] if words else "cmd")).stem, "cmd")

    def identity(self) -> str:
        """The command, where it runs, and its scripts' content."""
        digest = hashlib.sha256()
        for word in self.words():
            path = Path(word)
            if path.suffix == ".py" and path.is_file():
                digest.update(path.read_bytes())
        return f"{self.spec} @ {Path.cwd()}#{digest.hexdigest()[:16]}"

    @property
    def has_batch_placeholder(self) -> bool:
        return BATCH_PLACEHOLDER in self.line

    @property
    def fixed_batch(self) -> bool:
        return not self.has_batch_placeholder

    def render(self, batch_size: int) -> str:
        """The command line as the job runs it: ``{batch}`` replaced by the batch size."""
        return self.line.replace(BATCH_PLACEHOLDER, str(batch_size))

    def words(self) -> list[str]:
        try:
            return shlex.split(self.line)
        except ValueError:
            return self.line.split()

    def python(self) -> str | None:
        """The interpreter the command runs (a ``python`` program or a launcher's ``#!`` line), where it can be told."""
        words = [w for w in self.words() if "=" not in w.split("/")[0]]  # skip VAR=value prefixes
        if not words:
            return None
        program = shutil.which(words[0])
        if program is None:
            return None
        if Path(program).name.startswith("python"):
            return program
        try:
            with open(program, "rb") as handle:
                first = handle.readline(512).decode(errors="replace")
        except OSError:
            return None
        if not first.startswith("#!"):
            return None
        interpreter = first[2:].split()
        if not interpreter:
            return None
        if Path(interpreter[0]).name == "env" and len(interpreter) > 1:
            return shutil.which(interpreter[1])
        return interpreter[0] if Path(interpreter[0]).name.startswith("python") else None


@dataclass(frozen=True)
class GraphFile(Target):
    """An ONNX file: a training graph as is, or a forward-only model for ORT's gradient builder."""

    noun: ClassVar[str] = "ONNX file"

    @property
    def path(self) -> Path:
        return Path(self.spec)

    @property
    def label(self) -> str:
        return _label(self.path.stem, "graph")


def command_target(command: str) -> Command:
    """The target of a command line as ``--cmd`` gives it."""
    command = command.strip()
    if not command:
        raise MemoptError("--cmd needs a command, e.g. --cmd 'python train.py --batch-size {batch}'")
    return Command(COMMAND_PREFIX + command)


# A label's longest: a run folder's name adds a date, a batch, a config digest.
_LABEL_CHARS = 64


def parse_target(spec: str) -> Target:
    """The target a spec names; the one place that reads a target's kind off its text."""
    if spec.startswith(COMMAND_PREFIX):
        return command_target(spec[len(COMMAND_PREFIX) :])
    if spec.startswith(HF_PREFIX):
        return HfConfig(spec)
    if spec in BUILTIN_RECIPES:
        return BuiltinRecipe(spec)
    if spec.endswith(".onnx") or (Path(spec).is_file() and not spec.endswith(".py")):
        return GraphFile(spec)
    return RecipeSource(spec)


def runnable(target: Target) -> RunnableTarget:
    """``target`` as one memopt can train; an ONNX file is only scanned."""
    if not isinstance(target, RunnableTarget):
        raise MemoptError(f"{target} is an ONNX file: only memopt scan reads one; give a recipe or --cmd")
    return target


def parse_runnable(spec: str) -> RunnableTarget:
    """The target a spec names, which must be one memopt can train."""
    return runnable(parse_target(spec))


def _label(name: str, fallback: str) -> str:
    """``name`` as part of a file name on any file system: letters, digits, ``-`` and ``_``
    only, and short (a long name keeps its start and gains a digest of the whole)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in name) or fallback
    if len(safe) <= _LABEL_CHARS:
        return safe
    return f"{safe[: _LABEL_CHARS - 13]}-{_digest(name.encode())[:12]}"


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:16]
