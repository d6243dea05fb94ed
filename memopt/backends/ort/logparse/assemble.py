"""One session build's pieces (C++ summary, feature table, dims, node lines) to a ``Summary``.

The feature table's Plan rows are ORT's own aggregation, so they lead; the MemoryInsight
options with the same ``<subgraph>:<type>`` become their clusters (shapes, bytes, counts).
Options no Plan row claims become plans of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from memopt.backends.ort.config import plan_cell, plan_key
from memopt.backends.ort.logparse.feature_table import FeatureBlock, FeatureTableParser, TableRow
from memopt.backends.ort.logparse.format_a import FormatAParser
from memopt.backends.ort.logparse.insight import InsightOption, InsightParser
from memopt.backends.ort.logparse.model import (
    Cluster,
    NodeEvent,
    OptimizationType,
    Plan,
    Summary,
    SummarySource,
)
from memopt.backends.ort.version import OrtVersionRange
from memopt.errors import MemoptError

__all__ = ["Piece", "SummaryDraft"]

Piece = Literal["event", "cpp", "feature", "dims"]


@dataclass
class SummaryDraft:
    """A summary being read; ``accepts`` says whether a piece still belongs to this build."""

    first_line: int
    stream: str | None
    node_events: list[NodeEvent] = field(default_factory=list)
    total_recomputed_nodes: int | None = None
    cpp: FormatAParser | InsightParser | None = None
    feature: FeatureTableParser | None = None
    dims: dict[str, int] | None = None
    clues: list[OrtVersionRange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False

    def accepts(self, piece: Piece) -> bool:
        if piece in ("event", "cpp"):
            return self.cpp is None and self.feature is None
        if piece == "feature":
            return self.feature is None
        return self.dims is None

    def build(self, versions_seen: OrtVersionRange | None) -> Summary:
        warnings = list(self.warnings)
        feature = self.feature.block() if self.feature is not None else None
        sources: list[SummarySource] = []
        clues = list(self.clues)
        user_config: str | None = None
        cpp_plans: tuple[Plan, ...] = ()
        options: tuple[InsightOption, ...] = ()
        if isinstance(self.cpp, FormatAParser):
            block_a = self.cpp.block()
            sources.append(SummarySource.MEMORY_OPTIMIZER_SUMMARY)
            clues.append(OrtVersionRange(16, 16) if block_a.rewrapped else OrtVersionRange(14, 16))
            user_config, cpp_plans = block_a.user_config, block_a.plans
            warnings.extend(block_a.warnings)
        elif isinstance(self.cpp, InsightParser):
            block_b = self.cpp.block()
            sources.append(SummarySource.MEMORY_INSIGHT_SUMMARY)
            clues.extend(clue for clue in (block_b.versions,) if clue is not None)
            user_config, options = block_b.user_config, block_b.options
            warnings.extend(block_b.warnings)
        if feature is not None:
            sources.append(SummarySource.FEATURE_TABLE)
            clues.extend(clue for clue in (feature.versions,) if clue is not None)
            warnings.extend(feature.warnings)
            user_config = user_config or feature.user_config
        if versions_seen is not None:
            clues.append(versions_seen)
        plans = cpp_plans + _merge(feature.rows if feature else (), options)
        plans = tuple(_with_logged_saving(plan, self.dims, warnings.append) for plan in plans)
        if not plans and not self.node_events:
            warnings.append("the memory optimizer found no recompute opportunity")
        return Summary(
            first_line=self.first_line,
            stream=self.stream,
            sources=tuple(sources),
            versions=_narrow_all(clues, warnings.append),
            user_config=user_config,
            memory_optimizer_on=_memory_optimizer_on(feature, plans),
            optimization_level=feature.optimization_level if feature else None,
            plans=plans,
            dims=dict(self.dims or {}),
            node_events=tuple(self.node_events),
            total_recomputed_nodes=self.total_recomputed_nodes,
            warnings=tuple(warnings),
            truncated=self.truncated,
        )


def _merge(rows: Iterable[TableRow], options: tuple[InsightOption, ...]) -> tuple[Plan, ...]:
    claimed: set[int] = set()
    plans: list[Plan] = []
    for row in rows:
        entries = row.key.split(",")
        cells = set(row.key.cells)
        matched = [
            index for index, option in enumerate(options) if plan_cell(option.subgraph, option.optimization) in cells
        ]
        claimed.update(matched)
        subgraph, optimization = _split_entry(entries[0])
        plans.append(
            _plan_from_options(
                subgraph,
                optimization,
                [options[index] for index in matched],
                key=row.key,
                enabled=row.enabled,
                frequency=row.frequency,
                plan_number=row.number,
                max_saving_bytes=row.max_saving_bytes,
                saving_symbolic=row.saving_symbolic,
            )
        )
    unclaimed: dict[str, list[InsightOption]] = {}
    for index, option in enumerate(options):
        if index not in claimed:
            unclaimed.setdefault(plan_cell(option.subgraph, option.optimization), []).append(option)
    for group in unclaimed.values():
        enabled_states = {option.enabled for option in group}
        plans.append(
            _plan_from_options(
                group[0].subgraph,
                group[0].optimization,
                group,
                key=plan_key(group[0].subgraph, group[0].optimization),
                enabled=True if True in enabled_states else (False if enabled_states == {False} else None),
                frequency=_total([option.frequency for option in group]),
            )
        )
    return tuple(plans)


def _plan_from_options(
    subgraph: str, optimization: OptimizationType, options: list[InsightOption], **fields: object
) -> Plan:
    applied = [option.applied_count for option in options if option.applied_count is not None]
    requested = [option.requested_count for option in options if option.requested_count is not None]
    return Plan(
        subgraph=subgraph,
        optimization=optimization,
        requested_count=requested[0] if requested else None,
        applied_count=sum(applied) if applied else None,
        clusters=tuple(Cluster(option.frequency, option.outputs, option.applied_count) for option in options),
        **fields,  # type: ignore[arg-type]
    )


def _total(counts: list[int | None]) -> int | None:
    return None if None in counts else sum(count for count in counts if count is not None)


def _split_entry(entry: str) -> tuple[str, OptimizationType]:
    subgraph, _, rest = entry.partition(":")
    type_text = rest.partition(":")[0]
    try:
        return subgraph, OptimizationType(int(type_text))
    except ValueError:
        return subgraph, OptimizationType.RECOMPUTE


def _with_logged_saving(plan: Plan, dims: dict[str, int] | None, warn: Callable[[str], None]) -> Plan:
    if plan.saving_symbolic is None or dims is None:
        return plan
    name = f"Plan {plan.plan_number}" if plan.plan_number is not None else plan.key
    try:
        saving = plan.saving_symbolic.evaluate(dims)
    except MemoptError as err:
        warn(f"{name}: saving not evaluated at the logged dims: {err}")
        return plan
    if plan.max_saving_bytes is not None and round(saving) != plan.max_saving_bytes:
        warn(f"{name}: ORT printed {plan.max_saving_bytes:,} bytes but {plan.saving_symbolic} gives {saving:,.0f}")
    return replace(plan, saving_at_logged_dims=saving)


def _memory_optimizer_on(feature: FeatureBlock | None, plans: tuple[Plan, ...]) -> bool | None:
    if feature is not None:
        return feature.memory_optimizer_on
    return True if any(plan.enabled for plan in plans) else None


def _narrow_all(clues: list[OrtVersionRange], warn: Callable[[str], None]) -> OrtVersionRange:
    versions = OrtVersionRange()
    for clue in clues:
        narrowed = versions.narrow(clue)
        if narrowed is None:
            warn(f"the log's formats disagree on the ORT release ({versions} vs {clue})")
        else:
            versions = narrowed
    return versions
