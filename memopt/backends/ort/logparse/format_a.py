"""Format A, "MemoryOptimizer Summary" (ORT 1.14-1.16, raw or re-logged by 1.16's Python logger).

Markers are searched for rather than anchored so that per-line prefixes and the 1.16
re-wrapped form (TABs expanded, trailing spaces dropped, empty lines dropped) parse alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memopt.backends.ort.config import plan_key
from memopt.backends.ort.logparse.lines import EQUALS_RULE, LogLine
from memopt.backends.ort.logparse.model import LOGGED_TYPES, Cluster, OptimizationType, Plan, StashedOutput
from memopt.backends.ort.logparse.numbers import read_int
from memopt.backends.ort.logparse.shapes import element_count

__all__ = ["FORMAT_A_HEADER", "FormatABlock", "FormatAParser"]

FORMAT_A_HEADER = re.compile(r"MemoryOptimizer Summary:\s*$")
_USER_CONFIG = re.compile(r"(?:^|\s)User config:\s*$")
_SECTION = re.compile(r"#{4,}(Recompute|RecomputeWithCompromise)#{4,}\s*$")
_SUBGRAPH = re.compile(r"(?:^|\s)Subgraph: ?(\S*)\s*$")
_TYPE = re.compile(
    r"(?:^|\s)OptimizationType: (\w+)(?: \(requested_count=(-?\d+), actual applied_count=(-?\d+)\))?\s*$"
)
_PATTERNS = re.compile(r"(?:^|\s)Patterns:\s*$")
_SHAPE = re.compile(r"(?:^|\s)PatternShape:(.*?)\s*Frequency:(\d+)\s*$")
_DIVIDER = re.compile(r"(?:^|\s)-{20,}\s*$")
_STATUS = {"Recomputed": True, "Recompute": True, "Disabled": False}


@dataclass(frozen=True)
class FormatABlock:
    first_line: int
    user_config: str | None
    plans: tuple[Plan, ...]
    rewrapped: bool
    complete: bool
    warnings: tuple[str, ...] = ()


@dataclass
class _PlanDraft:
    subgraph: str
    optimization: OptimizationType
    enabled: bool | None = None
    requested_count: int | None = None
    applied_count: int | None = None
    clusters: list[Cluster] = field(default_factory=list)

    def freeze(self) -> Plan:
        return Plan(
            subgraph=self.subgraph,
            optimization=self.optimization,
            # <=1.16 has no type 2: type 1 enables a subgraph in both sections.
            key=plan_key(self.subgraph, OptimizationType.RECOMPUTE),
            enabled=self.enabled,
            frequency=_total([cluster.frequency for cluster in self.clusters]),
            requested_count=self.requested_count,
            applied_count=self.applied_count,
            clusters=tuple(self.clusters),
        )


class FormatAParser:
    """Fed the lines after the header; ``feed`` returns False at the first foreign line."""

    def __init__(self, header: LogLine) -> None:
        self.first_line = header.number
        self.rewrapped = header.captured
        self.user_config: str | None = None
        self.plans: list[Plan] = []
        self.complete = False
        self.warnings: list[str] = []
        self._state = "config_label"
        self._section = OptimizationType.RECOMPUTE
        self._plan: _PlanDraft | None = None

    def feed(self, line: LogLine) -> bool:
        if self.complete:
            return False
        text = line.text
        state = self._state
        if state == "config_label":
            return self._advance(_USER_CONFIG.search(text) is not None, "config_value")
        if state == "config_value":
            if EQUALS_RULE.search(text):
                self._state = "section"
                return True
            self.user_config = text.strip() or None
            self._state = "config_rule"
            return True
        if state == "config_rule":
            return self._advance(EQUALS_RULE.search(text) is not None, "section")
        if state == "section":
            match = _SECTION.search(text)
            if match is None:
                return False
            self._section = LOGGED_TYPES[match.group(1)]
            self._state = "plans"
            return True
        return self._feed_plan_line(line.number, text)

    def block(self) -> FormatABlock:
        self._close_plan()
        return FormatABlock(
            self.first_line, self.user_config, tuple(self.plans), self.rewrapped, self.complete, tuple(self.warnings)
        )

    def _advance(self, matched: bool, next_state: str) -> bool:
        if matched:
            self._state = next_state
        return matched

    def _feed_plan_line(self, number: int, text: str) -> bool:
        if match := _SUBGRAPH.search(text):
            self._close_plan()
            self._plan = _PlanDraft(match.group(1), self._section)
            return True
        if _DIVIDER.search(text):
            self._close_plan()
            return True
        if EQUALS_RULE.search(text):
            self._close_plan()
            if self._section is OptimizationType.COMPROMISE:
                self.complete = True
            else:
                self._state = "section"
            return True
        plan = self._plan
        if plan is None:
            return False
        if match := _TYPE.search(text):
            plan.enabled = _STATUS.get(match.group(1))
            if match.group(2) is not None:
                plan.requested_count = read_int(match.group(2))
                plan.applied_count = read_int(match.group(3))
                if plan.requested_count is None or plan.applied_count is None:
                    self.warnings.append(f"line {number}: {plan.subgraph}: unreadable count, taken as unknown")
            return True
        if _PATTERNS.search(text):
            return True
        if match := _SHAPE.search(text):
            shape = match.group(1).strip()
            # Each dim is printed followed by " x ", so the shape ends with " x" once stripped.
            dims = [dim.strip() for dim in (shape + " ").split(" x ")] if shape != "unknown" else None
            output = StashedOutput(
                shape=shape,
                element_count=None if dims is None else element_count([dim for dim in dims if dim]),
            )
            frequency = read_int(match.group(2))
            if frequency is None:
                self.warnings.append(f"line {number}: {plan.subgraph}: unreadable frequency, taken as unknown")
            plan.clusters.append(Cluster(frequency, (output,)))
            return True
        return False

    def _close_plan(self) -> None:
        if self._plan is not None:
            self.plans.append(self._plan.freeze())
            self._plan = None


def _total(counts: list[int | None]) -> int | None:
    """The sum, or None when one count is unknown."""
    return None if None in counts else sum(count for count in counts if count is not None)
