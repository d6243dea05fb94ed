"""Options shared by ``memopt parse`` and ``memopt config``: dims and ORT versions."""

from __future__ import annotations

from memopt.backends.ort.logparse import Summary
from memopt.backends.ort.version import OrtVersion
from memopt.errors import MemoptError

__all__ = ["config_version", "parse_dims_option"]


# Larger sizes overflow the 64-bit products of the shapes they enter.
_MAX_DIM_DIGITS = 18


def parse_dims_option(text: str | None) -> dict[str, int]:
    """``--dims ids_dim0=32,ids_dim1=512`` as a dict; each value a positive integer (a size)."""
    dims: dict[str, int] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier():
            raise MemoptError(f"--dims takes name=size pairs separated by commas, not {pair.strip()[:80]!r}")
        digits = value.removeprefix("-")  # a negative size is told as such below
        if not (digits.isascii() and digits.isdigit()):
            raise MemoptError(f"--dims {name}={value[:40]}: write a size in digits, a whole number (e.g. {name}=512)")
        if len(digits) > _MAX_DIM_DIGITS:
            raise MemoptError(f"--dims {name}={value[:40]}: too large; a size has at most {_MAX_DIM_DIGITS} digits")
        dims[name] = int(value)
        if dims[name] < 1:
            raise MemoptError(f"--dims {name}={value}: a dim is a size, at least 1")
    return dims


def config_version(given: str | None, summary: Summary | None) -> OrtVersion:
    """The release to write a config for: ``--ort-version``, else what the log shows."""
    if given is not None:
        return OrtVersion.parse(given)
    if summary is None:
        raise MemoptError("give --ort-version (the config syntax depends on the ORT release)")
    versions = summary.versions
    if versions.exact is not None:
        return versions.exact
    if versions.highest_minor <= 18 or versions.lowest_minor >= 19:
        # Within 1.14-1.16 and within 1.17-1.18 every release takes the same configs.
        return OrtVersion(versions.lowest_minor)
    raise MemoptError(f"the log could come from ORT {versions}; give --ort-version to choose the config syntax")
