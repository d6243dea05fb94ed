"""``MemoryModel.max_batch`` against its contract, on made-up peaks (pure search logic): the
answer fits and, below the ceiling, the batch above it does not; 0 only where batch 1 is over.

The peaks come from a fake simulator whose arena figure is not monotone in the batch, as the
real one is not (a batch can fit where a smaller one does not)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import SimpleNamespace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memopt.backends.ort import PlanKey
from memopt.backends.ort.predict.memory_model import MemoryModel


class FakeSimulator:
    """Live bytes ``per_sample · batch``; the arena's figure above them by a fixed part and a
    share that differs from batch to batch."""

    def __init__(self, per_sample: float, fixed: float, shares: list[float]) -> None:
        self.per_sample, self.fixed, self.shares = per_sample, fixed, shares

    def live(self, batch: int) -> float:
        return self.per_sample * batch

    def resident(self, batch: int) -> float:
        return self.live(batch) * (1.0 + self.shares[batch % len(self.shares)]) + self.fixed

    def live_bytes(self, dims: Mapping[str, int], plans: tuple[PlanKey, ...] = ()) -> float:
        return self.live(dims["batch"])

    def resident_bounds(
        self, dims: Mapping[str, int], plans: tuple[PlanKey, ...] = (), counts: object = None
    ) -> Iterator[float]:
        yield self.live(dims["batch"])
        yield self.resident(dims["batch"])

    def timeline(self, dims: Mapping[str, int], plans: tuple[PlanKey, ...] = (), counts: object = None) -> object:
        return SimpleNamespace(held_bytes=self.resident(dims["batch"]))


@settings(max_examples=400, deadline=None)
@given(
    per_sample=st.floats(0.5, 5.0),
    fixed=st.sampled_from([0.0, 1.0, 10.0, 100.0, 1000.0]),
    shares=st.lists(st.floats(0.0, 0.6), min_size=1, max_size=7),
    scale=st.sampled_from([1.0, 1.3, 0.0, -1.0]),
    static=st.sampled_from([0.0, 500.0]),
    room=st.floats(0.0, 3000.0),
    ceiling=st.sampled_from([None, 1, 3, 8, 9, 20, 100]),
)
# A large fixed part: the share measured near the top is too low for small batches, the walk
# down from the estimate outruns every batch that fits (1 to 10 here) and must come back.
@example(per_sample=1.0, fixed=90.0, shares=[0.0], scale=1.0, static=0.0, room=100.0, ceiling=None)
def test_the_answer_fits_and_the_batch_above_it_does_not(
    per_sample: float,
    fixed: float,
    shares: list[float],
    scale: float,
    static: float,
    room: float,
    ceiling: int | None,
) -> None:
    simulator = FakeSimulator(per_sample, fixed, shares)
    model = MemoryModel(
        ("batch",), {}, (), static_bytes=static, per_sample_bytes=0.0, simulator=simulator, activation_scale=scale
    )  # type: ignore[arg-type]
    limit = static + room
    answer = model.max_batch(limit, (), ceiling)
    highest = 1 << 20 if ceiling is None else ceiling  # a search with no ceiling stops there
    if answer == 0:
        assert not model.fits(1, (), limit)
    else:
        assert model.fits(answer, (), limit) and (answer == highest or not model.fits(answer + 1, (), limit))
    assert all(model.floor(batch) <= model.peak(batch) for batch in range(1, min(answer, 64) + 2))
