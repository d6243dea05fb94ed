"""Which reading of the simulated arena the memory model fits on: settled, or after its first steps.

The simulator here is a FAKE (a table of timelines by batch and config): the choice is pure logic
over the figures a real play gives, and the real plays behind it are measured in BENCHMARKS.md
("HF Llama under ORT: the prediction's miss")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import cast

import pytest

from memopt.backends.ort.config import PlanKey
from memopt.backends.ort.predict.liveness import ActivationSimulator, Timeline
from memopt.backends.ort.predict.memory_model import (
    MemoryModel,
    ModelError,
    Observation,
    PlanSavings,
    fit_memory_model,
)
from memopt.graph.polynomial import Polynomial

MiB = 2**20
PLAN = PlanKey("Mul+:1:-1")


class _FakeSimulator:
    """Timelines from a table: (batch, with the plan) -> (live, early, settled) MiB."""

    device = "cpu"

    def __init__(self, table: Mapping[tuple[int, bool], tuple[float, float, float]]) -> None:
        self.table = table

    def timeline(
        self, dims: Mapping[str, int], plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Timeline:
        live, early, settled = self.table[(dims["b"], PLAN in tuple(plans))]
        return Timeline(
            live * MiB, "n", "Op", "backward", None, False, 1, settled * MiB, early_resident_bytes=early * MiB
        )

    def live_bytes(self, dims: Mapping[str, int], plans: Iterable[PlanKey] = ()) -> float:
        return self.timeline(dims, plans).peak_bytes

    def resident_bounds(
        self, dims: Mapping[str, int], plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Iterator[float]:
        timeline = self.timeline(dims, plans, counts)
        yield timeline.peak_bytes
        yield timeline.resident_bytes


def _fit(table: Mapping[tuple[int, bool], tuple[float, float, float]], peaks: Mapping[int, float]) -> MemoryModel:
    simulator = cast(ActivationSimulator, _FakeSimulator(table))
    observations = [Observation(batch, (), round(peak * MiB)) for batch, peak in peaks.items()]
    plans = (PlanSavings(PLAN, ("Mul",), 1, Polynomial()),)
    return fit_memory_model(observations, plans, ("b",), {}, simulator=simulator)


# The shape measured on a Hugging Face Llama (ORT, CPU): the simulated arena adds one
# logits-sized buffer of pages in its third step, growing with the batch; the real one never does.
LLAMA_LIKE = {
    (4, False): (311.0, 366.2, 394.7),
    (8, False): (622.2, 718.4, 781.4),
    # with recompute the simulated arena grows past the first two steps too, as the real one was
    # measured to (the no-config run's stopped there)
    (8, True): (374.2, 480.0, 546.0),
}


def test_a_settled_reading_that_outgrows_the_runs_gives_way_to_the_early_one() -> None:
    # The runs grew as the early reading did (fixed 995.7 MiB), slower than the settled one.
    model = _fit(LLAMA_LIKE, {4: 995.7 + 366.2, 8: 995.7 + 718.4})
    assert model.early_arena
    assert abs(model.static_bytes / MiB - 995.7) < 0.5
    # A config is predicted from the same fixed part, on its settled reading: on its early one
    # it came out 66 MiB lower (a Llama's first config: the real arena at the settled figure).
    assert abs(model.peak(8, (PLAN,)) / MiB - (995.7 + 546.0)) < 0.5
    assert abs(model.raw_saving(PLAN, 8) / MiB - (718.4 - 546.0)) < 0.5
    assert "the arena read after its first steps" in model.describe()
    # a config's run refits the model on its settled reading too: measured where predicted, no change
    refitted = model.with_observation(Observation(8, (PLAN,), round((995.7 + 546.0) * MiB)))
    assert refitted.early_arena and abs(refitted.static_bytes - model.static_bytes) < 0.5 * MiB


def test_runs_that_grow_as_the_settled_reading_keep_it() -> None:
    # GPT-2 graphs: the real arena drifts late as the simulated one does; the early reading would
    # need a scale above the runs' and over-predict every config.
    gpt_like = {
        (64, False): (200.0, 205.5, 264.2),
        (128, False): (400.0, 411.9, 529.3),
        (128, True): (300.0, 315.0, 329.6),
    }
    model = _fit(gpt_like, {64: 584.4 + 1.09 * 264.2, 128: 584.4 + 1.09 * 529.3})
    assert not model.early_arena
    assert abs(model.peak(128, (PLAN,)) / MiB - (584.4 + 1.09 * 329.6)) < 1.0


def test_no_early_reading_is_taken_where_it_outgrows_the_runs_too() -> None:
    # Both readings grow faster than the runs: no reading explains them, so the settled one stays.
    table = {(4, False): (300.0, 380.0, 400.0), (8, False): (600.0, 760.0, 800.0)}
    model = _fit(table, {4: 1000.0 + 300.0, 8: 1000.0 + 600.0})
    assert not model.early_arena


def test_the_early_reading_bounds_a_limit_question_with_its_own_figure() -> None:
    model = _fit(LLAMA_LIKE, {4: 995.7 + 366.2, 8: 995.7 + 718.4})
    peak = model.peak(8, (PLAN,))
    assert list(model.peak_bounds(8, (PLAN,)))[-1] == peak
    assert model.fits(8, (PLAN,), peak) and not model.fits(8, (PLAN,), peak - 1)
    assert model.floor(8, (PLAN,)) <= peak


def test_the_reading_is_saved_with_the_model_and_checked_as_it_is_read() -> None:
    saved = fit_memory_model([Observation(4, (), 100), Observation(8, (), 200)], (), ("b",), {}).to_json()
    assert saved["early_arena"] is False
    assert MemoryModel.from_json({**saved, "early_arena": True}).early_arena
    with pytest.raises(ModelError, match="early_arena"):
        MemoryModel.from_json({**saved, "early_arena": "yes"})
