"""Which values the graph's symbolic dims take: from --batch/--seq, --dims, and a probe's log."""

from __future__ import annotations

from collections.abc import Mapping

from memopt.backends.ort.graph.training_graph import TensorInfo
from memopt.errors import MemoptError

__all__ = ["DimsError", "resolve_dims", "batch_symbols", "sequence_symbols"]

_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})  # ONNX integer and bool element types


class DimsError(MemoptError):
    """A size the user gave does not fit the graph."""


def batch_symbols(inputs: Mapping[str, TensorInfo]) -> tuple[str, ...]:
    """The symbolic first dim of every model input."""
    return tuple(dict.fromkeys(info.dims[0] for info in inputs.values() if info.dims and isinstance(info.dims[0], str)))


def is_target_side(name: str) -> bool:
    """Inputs of the target sequence: ``labels`` and a decoder's own inputs (``decoder_input_ids``…)."""
    return name in ("labels", "label") or name.startswith("decoder_")


def sequence_symbols(inputs: Mapping[str, TensorInfo], target_side: bool = False) -> tuple[str, ...]:
    """The symbolic second dim of token-sequence inputs: integer or bool inputs of two or more
    dims (ids, masks, token labels); ``target_side`` picks ``labels``/``decoder_*`` ones, else the rest."""
    return tuple(
        dict.fromkeys(
            info.dims[1]
            for name, info in inputs.items()
            if info.elem_type in _INTEGER_TYPES
            and info.dims
            and len(info.dims) >= 2
            and isinstance(info.dims[1], str)
            and is_target_side(name) == target_side
        )
    )


def resolve_dims(
    inputs: Mapping[str, TensorInfo],
    known: frozenset[str],
    *,
    batch: int | None = None,
    seq: int | None = None,
    target_seq: int | None = None,
    explicit: Mapping[str, int] | None = None,
    defaults: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Values for the graph's dims: ``explicit`` over ``batch``/``seq`` over ``defaults``.

    ``seq`` sets the second dim of token-sequence inputs, ``target_seq`` (default ``seq``)
    that of the target side (``labels``, ``decoder_*``): a seq2seq model's labels have their own length.
    """
    explicit = dict(explicit or {})
    unknown = sorted(set(explicit) - known)
    if unknown:
        raise DimsError(
            f"unknown dim name(s) {', '.join(unknown)}; this graph's dims are: {', '.join(sorted(known)) or 'none'}"
        )
    values = {name: value for name, value in (defaults or {}).items() if name in known}
    source, target = sequence_symbols(inputs), sequence_symbols(inputs, target_side=True)
    sizes = (
        ("--batch", batch, batch_symbols(inputs)),
        ("--seq", seq, source + target if target_seq is None else source),
        ("--target-seq", target_seq, target),
    )
    for flag, value, symbols in sizes:
        if value is None:
            continue
        if value <= 0:
            raise DimsError(f"{flag} must be a positive integer, not {value}")
        if not symbols:
            raise DimsError(
                f"{flag}: this graph has no such dynamic dim; name dims with --dims (known: {', '.join(sorted(known))})"
            )
        values.update({symbol: value for symbol in symbols})
    values.update(explicit)
    return values
