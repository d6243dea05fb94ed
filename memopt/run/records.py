"""The schema of a trial record as memopt reads it back from disk (the journal).

A record on disk may be damaged (a hand edit, a disk error, another tool): every field
memopt computes with is checked, strictly (no strings for numbers, no NaN or infinity,
no negative byte counts), before a ``TrialResult`` is built from it. A bad record is
reported as a ``DamagedRecord`` warning naming the field, and skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from memopt.errors import DamagedRecord

__all__ = ["checked_trial_record"]

# Numbers strictly (no "12" for 12, no 1.5 for a count); a tuple for a list, as a record
# built in memory holds, is fine.
_Count = Annotated[int, Strict(), Field(ge=0)]
_Seconds = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]


class _Rank(TypedDict, total=False):
    rank: _Count
    pid: Annotated[int, Strict()] | None
    steps: _Count
    memory_kind: str | None
    static_bytes: _Count | None
    peak_bytes: _Count | None
    peak_over_run_bytes: _Count | None
    cuda_reserved_bytes: _Count | None
    cuda_outside_bytes: _Count | None
    cuda_alloc_retries: _Count | None
    cuda_ooms: _Count | None


class _PoolSegment(TypedDict):
    """A segment of the CUDA caching allocator's pool (``PoolLayout.to_json``): its blocks' sizes and uses."""

    small: Annotated[bool, Strict()]
    blocks: list[tuple[Annotated[int, Strict(), Field(gt=0, multiple_of=512)], Literal["resident", "loop", "free"]]]


class _TrialRecord(TypedDict, total=False):
    key: str
    recipe: str
    options: dict[str, Any]
    batch_size: Annotated[int, Strict(), Field(gt=0)]
    config: list[str]
    config_value: str | None
    outcome: str
    status: str
    run_dir: str
    steps: _Count
    device: str | None
    error: str | None
    ort_version: str | None
    torch_version: str | None
    ort_package: str | None
    memory_kind: str | None
    static_bytes: _Count | None
    peak_bytes: _Count | None
    peak_over_run_bytes: _Count | None
    cuda_reserved_bytes: _Count | None
    cuda_outside_bytes: _Count | None
    cuda_alloc_retries: _Count | None
    cuda_ooms: _Count | None
    exit_peak_bytes: _Count | None
    cuda_total_memory: _Count | None
    cuda_device_name: str | None
    cuda_pool: list[_PoolSegment]
    step_times_s: list[_Seconds]
    median_step_s: _Seconds | None
    throughput: _Seconds | None
    plans_on: list[str]
    plans_off: list[str]
    plans_seen: _Count | None
    recomputed_nodes: _Count | None
    budget_bytes: _Count | None
    predicted_peak_bytes: _Count | None
    config_warnings: list[str]
    wall_s: _Seconds
    finished_at: Annotated[float, Strict(), Field(allow_inf_nan=False)]
    reused: Annotated[bool, Strict()]
    ranks: list[_Rank]


_TRIAL_RECORD = TypeAdapter(_TrialRecord)


def checked_trial_record(record: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``record``'s fields, checked against the trial schema; None (with a ``DamagedRecord``
    warning naming ``where`` and the first bad field) when one does not hold."""
    try:
        return dict(_TRIAL_RECORD.validate_python(dict(record)))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the record"
        warnings.warn(
            DamagedRecord(
                f"{where}: skipped a damaged trial record ({field}: {first['msg']}, got {first['input']!r:.60})"
            ),
            stacklevel=2,
        )
        return None
