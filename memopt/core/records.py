"""The schemas of the records memopt reads back from its journal: trials and calibrations.

A record on disk may be damaged (a hand edit, a disk error, another tool): every field
memopt computes with is checked, strictly (no strings for numbers, no NaN or infinity,
no negative byte counts) and bounded to what a machine can hold (bytes and counts up to
``MOST_BYTES``, seconds up to ``MOST_SECONDS``), before a ``TrialResult`` is built from it:
a figure past those bounds is a damaged one, never a measurement to compute with. A bad
record is reported as a ``DamagedRecord`` warning naming the field, and skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from memopt.errors import DamagedRecord

__all__ = ["MOST_BYTES", "MOST_SECONDS", "checked_calibration_record", "checked_trial_record", "report_damaged"]

# More memory than any machine has (an exbibyte), and more seconds than any run lasts (about
# 31 years): a figure past them was not measured. Counts (steps, nodes, plans, batch sizes)
# are bounded by the bytes they would take.
MOST_BYTES = 2**60
MOST_SECONDS = 1e9
_MOST_PID = 2**22  # the kernel's largest pid_max

# Numbers strictly (no "12" for 12, no 1.5 for a count); a tuple for a list, as a record
# built in memory holds, is fine.
_Count = Annotated[int, Strict(), Field(ge=0, le=MOST_BYTES)]
_Bytes = _Count
_Seconds = Annotated[float, Strict(), Field(ge=0, le=MOST_SECONDS, allow_inf_nan=False)]
# A clock reading (time.time()): seconds since 1970, up to about the year 5000.
_Timestamp = Annotated[float, Strict(), Field(ge=0, le=1e11, allow_inf_nan=False)]
_Rate = Annotated[float, Strict(), Field(ge=0, le=MOST_BYTES, allow_inf_nan=False)]


class _Memory(TypedDict, total=False):
    """A run's memory figures, as a trial and each of its ranks record them."""

    memory_kind: str | None
    static_bytes: _Bytes | None
    peak_bytes: _Bytes | None
    peak_over_run_bytes: _Bytes | None
    cuda_reserved_bytes: _Bytes | None
    cuda_outside_bytes: _Bytes | None
    cuda_alloc_retries: _Count | None
    cuda_ooms: _Count | None


class _Rank(_Memory, total=False):
    rank: _Count
    pid: Annotated[int, Strict(), Field(ge=0, le=_MOST_PID)] | None
    steps: _Count


class _PoolSegment(TypedDict):
    """A segment of the CUDA caching allocator's pool (``PoolLayout.to_json``): its blocks' sizes and uses."""

    small: Annotated[bool, Strict()]
    blocks: list[
        tuple[
            Annotated[int, Strict(), Field(gt=0, le=MOST_BYTES, multiple_of=512)], Literal["resident", "loop", "free"]
        ]
    ]


class _TrialRecord(_Memory, total=False):
    key: str
    recipe: str
    options: dict[str, Any]
    batch_size: Annotated[int, Strict(), Field(gt=0, le=MOST_BYTES)]
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
    exit_peak_bytes: _Bytes | None
    cuda_total_memory: _Bytes | None
    cuda_device_name: str | None
    cuda_pool: list[_PoolSegment]
    step_times_s: list[_Seconds]
    median_step_s: _Seconds | None
    throughput: _Rate | None
    plans_on: list[str]
    plans_off: list[str]
    plans_seen: _Count | None
    recomputed_nodes: _Count | None
    budget_bytes: _Bytes | None
    predicted_peak_bytes: _Bytes | None
    config_warnings: list[str]
    wall_s: _Seconds
    finished_at: _Timestamp
    reused: Annotated[bool, Strict()]
    ranks: list[_Rank]


class _CalibrationRecord(TypedDict, total=False):
    key: str
    kind: str
    journal_lines: _Count
    identity: str


_TRIAL_RECORD = TypeAdapter(_TrialRecord)
_CALIBRATION_RECORD = TypeAdapter(_CalibrationRecord)


def checked_trial_record(record: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``record``'s fields, checked against the trial schema; None (with a ``DamagedRecord``
    warning naming ``where`` and the first bad field) when one does not hold."""
    return _checked(_TRIAL_RECORD, record, where, "trial")


def checked_calibration_record(record: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``record``'s fields, checked against the calibration schema (how much of the journal
    a calibration read); None, with a ``DamagedRecord`` warning, when one does not hold."""
    return _checked(_CALIBRATION_RECORD, record, where, "calibration")


def _checked(schema: TypeAdapter[Any], record: Mapping[str, Any], where: str, kind: str) -> dict[str, Any] | None:
    try:
        return dict(schema.validate_python(dict(record)))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the record"
        report_damaged(
            f"{where}: skipped a damaged {kind} record ({field}: {first['msg']}, got {_shown(first['input'])})"
        )
        return None


# What ``report_damaged`` has said in this process.
_said: set[str] = set()


def report_damaged(message: str) -> None:
    """Say ``message`` (a damaged record, and what was done with it) as a ``DamagedRecord``
    warning, once per process however often the record is read: a journal is read by every
    resumed trial and every calibration. (Python's own registry of warnings said is emptied
    whenever a library changes the warning filters, as torch and ORT do on import.)"""
    if message not in _said:
        _said.add(message)
        warnings.warn(DamagedRecord(message), stacklevel=2)


def _shown(value: Any) -> str:
    """A damaged value as a message quotes it: its start, and how long it is when that is cut."""
    if isinstance(value, int) and abs(value) >= 2**128:  # Python refuses to print an integer past 4300 digits
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}…"
