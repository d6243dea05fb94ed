"""The checks of the records memopt reads back from its journal: trials (whose schema
``memopt.core.trial`` derives from its dataclasses, with ``record_type``) and calibrations.

A record on disk may be damaged (a hand edit, a disk error, another tool): every field
memopt computes with is checked, strictly (no strings for numbers, no NaN or infinity,
no negative byte counts) and bounded to what a machine can hold (bytes and counts up to
``MOST_BYTES``, seconds up to ``MOST_SECONDS``), before a ``TrialResult`` is built from it:
a figure past those bounds is a damaged one, never a measurement to compute with. A bad
record is reported as a ``DamagedRecord`` warning naming the field, and skipped.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Collection, Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import Field, Strict, TypeAdapter, ValidationError
from typing_extensions import Required, TypedDict

from memopt.errors import DamagedRecord

__all__ = [
    "LEAST_PEAK_BYTES",
    "MOST_BYTES",
    "MOST_SECONDS",
    "Count",
    "Pid",
    "PoolSegment",
    "Positive",
    "Rate",
    "Seconds",
    "Timestamp",
    "checked_calibration_record",
    "checked_record",
    "record_type",
    "report_damaged",
]

# More memory than any machine has (an exbibyte), and more seconds than any run lasts (about
# 31 years): a figure past them was not measured. Counts (steps, nodes, plans, batch sizes)
# are bounded by the bytes they would take.
MOST_BYTES = 2**60
MOST_SECONDS = 1e9
# The least peak a run that ran can have: on CPU the interpreter alone holds tens of MiB of RSS;
# on CUDA what runs out counts the caching allocator's segments (2 MiB at the least) and the
# CUDA context outside it (hundreds of MiB). A smaller figure was not measured.
LEAST_PEAK_BYTES = 2**20
_MOST_PID = 2**22  # the kernel's largest pid_max

# Numbers strictly (no "12" for 12, no 1.5 for a count); a tuple for a list, as a record
# built in memory holds, is fine.
Count = Annotated[int, Strict(), Field(ge=0, le=MOST_BYTES)]
Seconds = Annotated[float, Strict(), Field(ge=0, le=MOST_SECONDS, allow_inf_nan=False)]
# A clock reading (time.time()): seconds since 1970, up to about the year 5000.
Timestamp = Annotated[float, Strict(), Field(ge=0, le=1e11, allow_inf_nan=False)]
Rate = Annotated[float, Strict(), Field(ge=0, le=MOST_BYTES, allow_inf_nan=False)]
Positive = Annotated[int, Strict(), Field(gt=0, le=MOST_BYTES)]
Pid = Annotated[int, Strict(), Field(ge=0, le=_MOST_PID)]
_Flag = Annotated[bool, Strict()]


class PoolSegment(TypedDict):
    """A segment of the CUDA caching allocator's pool (``PoolLayout.to_json``): its blocks' sizes and uses."""

    small: _Flag
    blocks: list[
        tuple[
            Annotated[int, Strict(), Field(gt=0, le=MOST_BYTES, multiple_of=512)], Literal["resident", "loop", "free"]
        ]
    ]


def record_type(name: str, fields: Mapping[str, Any], required: Collection[str] = ()) -> Any:
    """The type of a record holding ``fields`` (name: type), each optional but the ``required``
    ones (an older record may lack a newer field), keys it does not name ignored. A bare ``int``, ``float`` or ``bool``,
    anywhere in a type, is checked strictly: an ``int`` as a count (``Count``), a ``float`` as
    seconds (``Seconds``); a type already ``Annotated`` keeps its own bounds."""
    kinds = {field: _strictly(kind) for field, kind in fields.items()}
    return _typed_dict(
        name, {field: Required[kind] if field in required else kind for field, kind in kinds.items()}, total=False
    )


# TypedDict's functional form, called with fields known only at run time.
_typed_dict: Any = TypedDict


def _strictly(kind: Any) -> Any:
    if kind is bool:
        return _Flag
    if kind is int:
        return Count
    if kind is float:
        return Seconds
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, UnionType):
        return functools.reduce(operator.or_, (_strictly(arg) for arg in args))
    if origin is tuple:
        return tuple[tuple(_strictly(arg) if arg is not Ellipsis else arg for arg in args)]  # type: ignore[misc]
    return kind


class _CalibrationRecord(TypedDict, total=False):
    key: str
    kind: str
    journal_lines: Count
    identity: str


_CALIBRATION_RECORD = TypeAdapter(_CalibrationRecord)


def checked_calibration_record(record: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``record``'s fields, checked against the calibration schema (how much of the journal
    a calibration read); None, with a ``DamagedRecord`` warning, when one does not hold."""
    return checked_record(_CALIBRATION_RECORD, record, where, "calibration")


def checked_record(
    schema: TypeAdapter[Any], record: Mapping[str, Any], where: str, kind: str, names: Mapping[str, str] = {}
) -> dict[str, Any] | None:
    """``record``'s fields, checked against ``schema``; None (with a ``DamagedRecord`` warning
    naming ``where``, the ``kind`` of record and its first bad field; ``names``: a field's
    dotted name in ``record`` where the record on disk spelt it otherwise) when one does not hold."""
    try:
        return dict(schema.validate_python(dict(record)))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        field = next(
            (older + field[len(today) :] for today, older in names.items() if f"{field}.".startswith(f"{today}.")),
            field,
        )
        field = field or "the record"
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
