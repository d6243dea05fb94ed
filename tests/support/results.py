"""Hand-made trial results for pure-logic tests: what a trial that ran would have measured."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from memopt.core import RunStatus, parse_runnable
from memopt.core.memory import Memory
from memopt.core.trial import Outcome, TrialResult

__all__ = ["MiB", "measured", "trial_result", "with_memory"]

MiB = 2**20


def measured(
    key: str, batch: int, steps_mib: float, run_mib: float, *ranks: tuple[float, float], **fields: Any
) -> TrialResult:
    """A trial of the gpt recipe that ran: its steps' peak and the whole run's (MiB); ``ranks``:
    each rank's pair; ``fields``: any other ``TrialResult`` field."""
    return trial_result(
        **{
            "key": key,
            "target": parse_runnable("gpt"),
            "options": {},
            "batch_size": batch,
            "config": (),
            "config_value": None,
            "outcome": Outcome.OK,
            "status": RunStatus.OK,
            "run_dir": "runs/trial",
            "steps": 2,
            "device": "cpu",
            "memory_kind": "rss",
            "peak_bytes": int(steps_mib * MiB),
            "peak_over_run_bytes": int(run_mib * MiB),
            "step_times_s": (2.0, 0.5, 0.5),
            "median_step_s": 0.5,
            "throughput": batch / 0.5,
            "ranks": tuple(
                {"rank": n, "memory_kind": "rss", "peak_bytes": int(s * MiB), "peak_over_run_bytes": int(r * MiB)}
                for n, (s, r) in enumerate(ranks)
            ),
            **fields,
        }
    )


_MEMORY_FIELDS = frozenset(f.name for f in fields(Memory))


def trial_result(**values: Any) -> TrialResult:
    """A ``TrialResult`` from its fields as a journal record names them: the memory figures
    (``peak_bytes``, ``memory_kind``, ...) flat beside the rest, gathered into its ``Memory``."""
    figures = {name: values.pop(name) for name in list(values) if name in _MEMORY_FIELDS}
    return TrialResult(**values, memory=Memory(**figures))


def with_memory(trial: TrialResult, **figures: Any) -> TrialResult:
    """``trial`` with some of its memory figures changed."""
    return replace(trial, memory=replace(trial.memory, **figures))
