"""What memopt recovers from ORT memory-optimizer logs.

One ``Summary`` per session build ORT reported on: the C++ summary (Format A
"MemoryOptimizer Summary" on 1.14-1.16, the "MemoryInsight Summary" table on 1.17-1.19),
the Python feature table's "Memory Optimizer" row with its Plan table and the first
batch's dims, and the per-node lines, merged into plans. Each field is None where the
log did not say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from memopt.backends.ort.config import OptimizationType, PlanCell, PlanKey
from memopt.backends.ort.version import OrtVersionRange
from memopt.graph.expr import Expression

__all__ = [
    "LOGGED_TYPES",
    "Cluster",
    "NodeEvent",
    "OptimizationType",
    "ParseResult",
    "Plan",
    "StashedOutput",
    "StepMemory",
    "Summary",
    "SummarySource",
]

# How ORT's C++ summaries (Format A sections, MemoryInsight options) name the config types.
LOGGED_TYPES = {"Recompute": OptimizationType.RECOMPUTE, "RecomputeWithCompromise": OptimizationType.COMPROMISE}


class SummarySource(Enum):
    MEMORY_OPTIMIZER_SUMMARY = "MemoryOptimizer Summary"  # Format A, 1.14-1.16
    MEMORY_INSIGHT_SUMMARY = "MemoryInsight Summary"  # Formats B and C, 1.17-1.19
    FEATURE_TABLE = "feature table"  # Python "Memory Optimizer" row, Plan table, Notes


@dataclass(frozen=True)
class StashedOutput:
    """An activation the plan would stop stashing for the backward pass."""

    shape: str  # as logged: "a x 16 x " (Format A) or "((a)*(16))" (Formats B/C)
    element_count: Expression | None  # None when ORT printed "unknown"
    output_index: int | None = None
    bytes_per_element: int | None = None
    saved_percent: int | None = None


@dataclass(frozen=True)
class Cluster:
    """Nodes sharing one activation pattern: a Format A PatternShape, or one option of a
    MemoryInsight table row."""

    frequency: int | None  # None where the log's figure was unreadable
    outputs: tuple[StashedOutput, ...]
    applied_count: int | None = None


@dataclass(frozen=True)
class Plan:
    """One recompute opportunity: a subgraph and how to treat it."""

    subgraph: str
    optimization: OptimizationType
    key: PlanKey  # what enables it: "<subgraph>:<type>:-1", comma-joined when combined
    enabled: bool | None
    frequency: int | None
    requested_count: int | None = None
    applied_count: int | None = None
    clusters: tuple[Cluster, ...] = ()
    plan_number: int | None = None  # "Plan <i>" in the feature table
    max_saving_bytes: int | None = None  # ORT's own figure at the first batch's dims
    saving_symbolic: Expression | None = None
    saving_at_logged_dims: float | None = None  # ``saving_symbolic`` evaluated by memopt

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PlanKey(self.key))  # a key read back from text is a PlanKey again

    def saving_at(self, dims: Mapping[str, int]) -> float | None:
        """Bytes saved at ``dims``; None when ORT printed no saving expression."""
        return None if self.saving_symbolic is None else self.saving_symbolic.evaluate(dims)


@dataclass(frozen=True)
class NodeEvent:
    """A per-node line: "is Recomputed" (<=1.16) or "is applying following optimization"."""

    line_number: int
    node_name: str
    op_type: str
    optimization: str | None = None
    request_count: int | None = None


@dataclass(frozen=True)
class Summary:
    first_line: int
    stream: str | None  # the rank tag ("rank1", "1") of a multi-process log
    sources: tuple[SummarySource, ...]
    versions: OrtVersionRange
    user_config: str | None  # config string (<=1.18) or JSON path (1.19) ORT reported
    memory_optimizer_on: bool | None
    optimization_level: str | None  # "USER_SPECIFIED", "TRANSFORMER_LAYERWISE_RECOMPUTE", ...
    plans: tuple[Plan, ...]
    dims: Mapping[str, int]  # the first batch's symbolic dim values (Notes)
    node_events: tuple[NodeEvent, ...] = ()
    total_recomputed_nodes: int | None = None
    warnings: tuple[str, ...] = ()
    truncated: bool = False

    @property
    def plan_cells(self) -> frozenset[PlanCell]:
        """Every "<subgraph>:<type>" cell of the Plan table: what a config can enable here."""
        return frozenset(cell for plan in self.plans for cell in plan.key.cells)


@dataclass(frozen=True)
class StepMemory:
    """One per-step memory line ORTModule prints on CUDA (``ORTMODULE_PRINT_MEMORY_STATS=1``).

    Figures are MiB as ORT rounded them; None where the line did not say or was unreadable.
    """

    line_number: int
    stream: str | None  # the launcher's rank tag of the line, if any
    rank: int | None  # the rank ORT printed ("rank-0", or "[0/2]" before 1.19)
    world_size: int | None  # only the "[rank/world size]" form (before 1.19) prints it
    step: int | None
    phase: str | None  # pre_forward, post_forward, pre_backward, post_backward
    allocated_mib: int | None = None
    max_allocated_mib: int | None = None
    cached_mib: int | None = None
    max_cached_mib: int | None = None
    inactive_mib: int | None = None
    max_inactive_mib: int | None = None
    param_mib: int | None = None  # 1.19 only
    grad_mib: int | None = None
    buffer_mib: int | None = None


@dataclass(frozen=True)
class ParseResult:
    source: str
    summaries: tuple[Summary, ...]
    lines_read: int
    warnings: tuple[str, ...] = ()
    ort_errors: tuple[str, ...] = ()  # config errors ORT raised, as logged
    step_memory: tuple[StepMemory, ...] = ()  # per-step memory lines, in log order
    warm_up_end_line: int | None = None  # where a memopt run's log says its warm-up step ended

    @property
    def run_summaries(self) -> tuple[Summary, ...]:
        """The summaries of the run's training session: in a memopt run's log, those that start
        before its warm-up step ended (ORT builds the session and prints its Plan table in that
        step; a table printed after it is the job's own text, whatever it looks like); in any
        other log, all of them."""
        if self.warm_up_end_line is None:
            return self.summaries
        return tuple(summary for summary in self.summaries if summary.first_line < self.warm_up_end_line)
