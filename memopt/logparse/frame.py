"""Plans as a pandas DataFrame, one row per plan of every summary."""

from __future__ import annotations

import pandas as pd

from memopt.logparse.model import ParseResult

__all__ = ["PLAN_COLUMNS", "plans_dataframe"]

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


def plans_dataframe(result: ParseResult) -> pd.DataFrame:
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
                    plan.config_key,
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
