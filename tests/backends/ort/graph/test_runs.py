"""``memopt.backends.ort.graph.runs.Runs``: per item a run of numbers as two flat arrays."""

from __future__ import annotations

import numpy as np

from memopt.backends.ort.graph.runs import Runs


def listed(runs: Runs) -> list[list[int]]:
    return [runs.ids[start:end].tolist() for start, end in zip(runs.start, runs.start[1:])]


def test_runs_round_trip_empty_runs_included() -> None:
    assert listed(Runs.of([[1, 2], [], [3], [4, 5, 6]])) == [[1, 2], [], [3], [4, 5, 6]]
    assert listed(Runs.of([])) == []


def test_gather_picks_runs_in_any_order_and_copies_them() -> None:
    runs = Runs.of([[1, 2], [], [3], [4, 5, 6]])
    gathered = runs.gather(np.array([3, 0, 0, 1]))
    assert listed(gathered) == [[4, 5, 6], [1, 2], [1, 2], []]
    gathered.ids[:] = -1
    assert listed(runs) == [[1, 2], [], [3], [4, 5, 6]]


def test_with_rows_replaces_and_appends() -> None:
    runs = Runs.of([[1, 2], [], [3], [4, 5, 6]])
    assert listed(runs.with_rows({1: [9, 9], 3: []}, [[7], [8, 8]])) == [[1, 2], [9, 9], [3], [], [7], [8, 8]]
    assert listed(runs.with_rows({}, [])) == listed(runs)
