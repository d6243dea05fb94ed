"""What a failed job said, in one line a user can act on: the failing rank's own exception, and
the fix of failures known to come from the ORT training stack.

Launchers bury the cause: torchrun ends with a summary of its own (``rank : 1 … To enable
traceback see …``) after the worker's traceback, and ORT's C++ assertions name no Python
cause. The log is read as text only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KNOWN_FAILURES", "KnownFailure", "explain_failure", "failing_line", "known_fix"]

# The longest exception line quoted; longer ones are cut at a word boundary.
_MAX_CHARS = 300
# ``[rank1]: RuntimeError: …`` (torchrun's prefix of worker output, elastic's ``--tee``).
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?(.*)$")
# The last line of a Python traceback: a dotted exception name, then its message.
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$")
_TRACEBACK = "Traceback (most recent call last):"
# torchrun's own exception, raised after a worker failed: it names no cause.
_LAUNCHER_ERRORS = ("ChildFailedError",)
# A traceback's frame line, and the libraries whose frames say nothing of where a job went wrong.
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+), in (\S+)')
_LIBRARIES = ("site-packages/torch/", "site-packages/onnxruntime/", "<frozen ")
# torchrun's summary names the first failing rank.
_ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class KnownFailure:
    """A failure of the ORT training stack recognised in a job's log, and its fix."""

    patterns: tuple[str, ...]  # regular expressions, all of which must occur in the log
    fix: str


KNOWN_FAILURES = (
    KnownFailure(
        (r"GradientBuilderBase::O\(|scaled_dot_product_attention|flash_attn",),
        "ORTModule cannot export sdpa or flash attention (transformers' default is sdpa): "
        'build the model with attn_implementation="eager"',
    ),
    KnownFailure(
        (r"Found no NVIDIA driver", r"set_device"),
        "a rank called torch.cuda.set_device on a machine without CUDA (optimum's ORTTrainer does "
        "on every rank but 0): on CPU skip that call (docs/ort.md, optimum's ORTTrainer)",
    ),
    KnownFailure(
        (r"No module named 'torch_ort'",),
        "optimum's ORTTrainer imports torch_ort: pip install --no-deps torch-ort==1.19.2 "
        "(its dependencies would replace the CPU build of ORT)",
    ),
    KnownFailure(
        (r"ORTModule's extensions were not detected",),
        "ORTModule's C++ extensions are not built: run "
        "`python -m onnxruntime.training.ortmodule.torch_cpp_extensions.install` (or `memopt stack --build-extensions`)",
    ),
)


def explain_failure(text: str) -> str | None:
    """The failing rank's exception line and the known fix, or None when the log shows neither."""
    said = failing_line(text)
    fix = known_fix(text)
    if said and fix:
        return f"{said} (fix: {fix})"
    return said or (f"fix: {fix}" if fix else None)


def failing_line(text: str) -> str | None:
    """The first ``[rankN]:`` exception line, else the first worker traceback's last line."""
    lines = text.splitlines()
    for line in lines:
        prefixed = _RANK_PREFIX.match(line.strip())
        if prefixed and _EXCEPTION.match(prefixed.group(2).strip()):
            return f"rank {prefixed.group(1)}: {_shorten(prefixed.group(2).strip())}"
    for exception, caller in _traceback_ends(lines):
        if not exception.startswith(_LAUNCHER_ERRORS) and ".ChildFailedError" not in exception:
            rank = _ROOT_CAUSE_RANK.search(text)
            who = f"rank {rank.group(1)}: " if rank else ""
            return who + _shorten(exception) + (f" (at {caller})" if caller else "")
    return None


def known_fix(text: str) -> str | None:
    for failure in KNOWN_FAILURES:
        if all(re.search(pattern, text) for pattern in failure.patterns):
            return failure.fix
    return None


def _traceback_ends(lines: list[str]) -> list[tuple[str, str | None]]:
    """Each traceback's exception line and its innermost frame outside torch and ORT (the
    code that called into them), in the order they were printed."""
    ends: list[tuple[str, str | None]] = []
    inside = False
    caller: str | None = None
    for line in lines:
        if line.strip() == _TRACEBACK:
            inside, caller = True, None
        elif inside and (frame := _FRAME.match(line)):
            if not any(library in frame.group(1) for library in _LIBRARIES):
                caller = f"{_short_path(frame.group(1))}:{frame.group(2)} in {frame.group(3)}"
        elif inside and line and not line[0].isspace():
            if _EXCEPTION.match(line.strip()):
                ends.append((line.strip(), caller))
            inside = False
    return ends


def _short_path(path: str) -> str:
    """A file inside an installed package from its package folder on; others as printed."""
    return path.split("site-packages/", 1)[-1]


def _shorten(line: str) -> str:
    if len(line) <= _MAX_CHARS:
        return line
    return line[:_MAX_CHARS].rsplit(" ", 1)[0] + " …"
