"""Single-line reports around the summary: per-node lines, totals, config errors."""

from __future__ import annotations

import re

from memopt.backends.ort.logparse.lines import LogLine
from memopt.backends.ort.logparse.model import NodeEvent
from memopt.backends.ort.logparse.numbers import read_int

__all__ = ["EVENT_KEYWORDS", "node_event", "ort_config_error", "total_recomputed_nodes"]

_RECOMPUTED = re.compile(r"Node (.*)\((\w+)\) is Recomputed\s*$")
_APPLYING = re.compile(
    r"Node (.*)\((\w+)\) is applying following optimization:\s*type \[(\w+)\], request count \[(-?\d+)\]"
)
_TOTAL = re.compile(r"Total number of recomputed nodes: (\d+)")
_CONFIG_ERROR = re.compile(
    r"(Fail to parse from json file: .*?|Fail to convert to int from string: .*?"
    r"|Config value is longer than maximum length: \d+"
    r"|Parse\w*ConfigFromString\(.*?\)\s*\.IsOK\(\) was false\.)\s*$"
)
# Substrings one of which every line these functions accept contains (long ones: the reader
# looks for each in every byte of the log).
EVENT_KEYWORDS = (
    ") is Recomputed",
    ") is applying following optimization",
    "Total number of recomputed nodes: ",
    "Fail to parse from json file: ",
    "Fail to convert to int from string: ",
    "Config value is longer than maximum length: ",
    "ConfigFromString(",
)


def node_event(line: LogLine) -> NodeEvent | None:
    if match := _APPLYING.search(line.text):
        return NodeEvent(line.number, match.group(1), match.group(2), match.group(3), read_int(match.group(4)))
    if match := _RECOMPUTED.search(line.text):
        return NodeEvent(line.number, match.group(1), match.group(2), "Recompute")
    return None


def total_recomputed_nodes(line: LogLine) -> int | None:
    match = _TOTAL.search(line.text)
    return None if match is None else read_int(match.group(1))


def ort_config_error(line: LogLine) -> str | None:
    match = _CONFIG_ERROR.search(line.text)
    return None if match is None else match.group(1)
