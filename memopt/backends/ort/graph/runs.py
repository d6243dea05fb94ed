"""Per item, a run of numbers, kept as two flat arrays: the form the compiled passes over a
graph read (each node's producers, each step's inputs and outputs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

__all__ = ["Runs"]


class Runs(NamedTuple):
    """Item ``i``'s numbers are ``ids[start[i]:start[i + 1]]``."""

    start: np.ndarray
    ids: np.ndarray

    @classmethod
    def of(cls, runs: Sequence[Sequence[int]]) -> Runs:
        start = np.zeros(len(runs) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, runs), np.int64, len(runs)), out=start[1:])
        return cls(start, np.fromiter(chain.from_iterable(runs), np.int64, int(start[-1])))

    def gather(self, rows: np.ndarray) -> Runs:
        """The runs of the items ``rows``, in that order, their numbers copied."""
        counts = (self.start[1:] - self.start[:-1])[rows]
        start = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        flat = np.repeat(self.start[:-1][rows] - start[:-1], counts) + np.arange(start[-1])
        return Runs(start, self.ids[flat])

    def with_rows(self, replaced: Mapping[int, Sequence[int]], appended: Sequence[Sequence[int]]) -> Runs:
        """These runs with the items ``replaced`` given new ones and ``appended`` after the last."""
        extra = Runs.of([*replaced.values(), *appended])
        items = len(self.start) - 1
        pooled = Runs(
            np.concatenate([self.start, len(self.ids) + extra.start[1:]]), np.concatenate([self.ids, extra.ids])
        )
        rows = np.arange(items + len(extra.start) - 1)
        rows[list(replaced)] = np.arange(items, items + len(replaced))
        return pooled.gather(np.concatenate([rows[:items], rows[items + len(replaced) :]]))
