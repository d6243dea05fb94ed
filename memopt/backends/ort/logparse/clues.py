"""Which ORT releases printed a given line: text that changed between releases."""

from __future__ import annotations

import re

from memopt.backends.ort.version import OrtVersion, OrtVersionError, OrtVersionRange

__all__ = ["version_clue"]

_CLUES: tuple[tuple[re.Pattern[str], OrtVersionRange], ...] = tuple(
    (re.compile(pattern), OrtVersionRange(lowest, highest))
    for pattern, lowest, highest in (
        (r"MemoryOptimizer Summary:", 14, 16),
        (r"MemoryInsight Summary - User config:", 17, 18),
        (r"MemoryInsight Summary - User config file path:", 19, 19),
        (r"Status\s*: Disabled\. Enable with export", 17, 18),
        (r"Status\s*: Disabled\.\s*$", 19, 19),
        (r"memory_optimizer\.cc:(?:217 PrintSummary|69 ModifyGraph)\]", 17, 17),
        (r"memory_optimizer\.cc:(?:233 PrintSummary|91 ModifyGraph)\]", 18, 18),
        (r"memory_optimizer\.cc:(?:248 PrintSummary|105 ModifyGraph)\]", 19, 19),
        (r"is applying following optimization", 17, 19),
        (r"\) is Recomputed\s*$", 14, 16),
        (r"Enable with env ORTMODULE_MEMORY_OPT_CONFIG=<config>", 16, 16),
        (r"ORTMODULE_MEMORY_OPT_LEVEL=1 or ORTMODULE_MEMORY_OPT_CONFIG=<plan1 config>", 17, 17),
        (r"ORTMODULE_MEMORY_OPT_LEVEL=1/2 or ORTMODULE_MEMORY_OPT_CONFIG=<plan1 config>", 18, 18),
        (r"ORTMODULE_MEMORY_OPT_CONFIG=<config\.json>", 19, 19),
        (r"Memory Optimization Level: \[", 17, 19),
        (r"TRANSFORMER_LAYERWISE_RECOMPUTE_WITH_COMPROMISE", 18, 19),
        (r"Note \d+: memory saving is calculated", 17, 17),
        (r"Note \d+: \[Memory Optimizer\] Memory saving is calculated", 18, 19),
    )
)
_VERSIONS_LINE = re.compile(r"Versions: ONNX Runtime - (\S+?),")


def version_clue(text: str) -> OrtVersionRange | None:
    """The releases that print ``text``, or None when it says nothing about the release."""
    versions = _VERSIONS_LINE.search(text)
    if versions is not None:
        try:
            exact = OrtVersion.parse(versions.group(1))
        except OrtVersionError:
            return None
        return OrtVersionRange(exact.minor, exact.minor, exact)
    for pattern, releases in _CLUES:
        if pattern.search(text):
            return releases
    return None
