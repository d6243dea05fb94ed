"""Plans (one row per plan of every summary) and per-step memory lines as pandas DataFrames."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.backends.ort.logparse.model import ParseResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PLAN_COLUMNS", "STEP_MEMORY_COLUMNS", "plans_dataframe", "step_memory_dataframe"]

PLAN_COLUMNS = (
    "source",
    "summary",
    "first_line",
    "stream",
    "ort_versions",
    "plan_number",
    "subgraph",
    "optimization",
    "config_key",
    "enabled",
    "frequency",
    "requested_count",
    "applied_count",
    "max_saving_bytes",
    "saving_symbolic",
    "saving_at_logged_dims",
    "dims",
    "stashed_outputs",
)


STEP_MEMORY_COLUMNS = (
    "source",
    "line",
    "stream",
    "rank",
    "world_size",
    "step",
    "phase",
    "allocated_mib",
    "max_allocated_mib",
    "cached_mib",
    "max_cached_mib",
    "inactive_mib",
    "max_inactive_mib",
    "param_mib",
    "grad_mib",
    "buffer_mib",
)


def plans_dataframe(result: ParseResult) -> pd.DataFrame:
    import pandas as pd  # only for tables: reading a log does not pay for importing pandas

    rows = []
    for index, summary in enumerate(result.summaries):
        dims = ",".join(f"{name}={value}" for name, value in summary.dims.items())
        for plan in summary.plans:
            outputs = [output.shape for cluster in plan.clusters for output in cluster.outputs]
            rows.append(
                (
                    result.source,
                    index,
                    summary.first_line,
                    summary.stream,
                    str(summary.versions),
                    plan.plan_number,
                    plan.subgraph,
                    plan.optimization.label,
                    plan.key,
                    plan.enabled,
                    plan.frequency,
                    plan.requested_count,
                    plan.applied_count,
                    plan.max_saving_bytes,
                    None if plan.saving_symbolic is None else str(plan.saving_symbolic),
                    plan.saving_at_logged_dims,
                    dims,
                    "; ".join(outputs),
                )
            )
    frame = pd.DataFrame.from_records(rows, columns=list(PLAN_COLUMNS))
    for column in ("plan_number", "frequency", "requested_count", "applied_count", "max_saving_bytes"):
        frame[column] = frame[column].astype("Int64")
    return frame


def step_memory_dataframe(result: ParseResult) -> pd.DataFrame:
    """One row per per-step memory line, in log order; figures in MiB."""
    import pandas as pd

    rows = [
        (result.source, record.line_number, *(getattr(record, name) for name in STEP_MEMORY_COLUMNS[2:]))
        for record in result.step_memory
    ]
    frame = pd.DataFrame.from_records(rows, columns=list(STEP_MEMORY_COLUMNS))
    for column in STEP_MEMORY_COLUMNS[3:]:
        if column != "phase":
            frame[column] = frame[column].astype("Int64")
    return frame
