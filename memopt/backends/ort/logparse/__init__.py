"""Read every ORT memory-optimizer summary (1.14-1.19) from training logs.

``parse_file``/``parse_text``/``parse_lines`` stream the log line by line; the result
holds one ``Summary`` per session build, each with its ``Plan`` list, and the per-step
memory lines ORTModule prints on CUDA (``StepMemory``). Text that cannot be read becomes
a warning and an unknown value, never an exception.
"""

from memopt.backends.ort.logparse.arena import ArenaGrowth, growth_parts_at, training_arena_growth
from memopt.backends.ort.logparse.frame import PLAN_COLUMNS, STEP_MEMORY_COLUMNS, plans_dataframe, step_memory_dataframe
from memopt.backends.ort.logparse.model import (
    Cluster,
    NodeEvent,
    OptimizationType,
    ParseResult,
    Plan,
    StashedOutput,
    StepMemory,
    Summary,
    SummarySource,
)
from memopt.backends.ort.logparse.reader import (
    LogReadError,
    NoSummaryError,
    parse_file,
    parse_lines,
    parse_text,
    require_summaries,
)

__all__ = [
    "ArenaGrowth",
    "growth_parts_at",
    "PLAN_COLUMNS",
    "STEP_MEMORY_COLUMNS",
    "Cluster",
    "LogReadError",
    "NoSummaryError",
    "NodeEvent",
    "OptimizationType",
    "ParseResult",
    "Plan",
    "StashedOutput",
    "StepMemory",
    "Summary",
    "SummarySource",
    "parse_file",
    "plans_dataframe",
    "parse_lines",
    "parse_text",
    "require_summaries",
    "step_memory_dataframe",
    "training_arena_growth",
]
