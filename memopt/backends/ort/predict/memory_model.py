"""Peak memory for (batch size, enabled plans), from the training graph and real measurements.

With the training graph (the normal case):

    peak(b, S) = fixed + scale · activations(b, S)

``activations`` is what the device's allocator holds for a step, simulated
(``memopt.backends.ort.predict.liveness``: ORT's execution order, each tensor live from its producer to
its last consumer, the config's recompute applied as ORT rewrites the graph, the
allocations played through ORT's BFC arena on CPU; on CUDA through PyTorch's caching
allocator, its reserved segments, what runs out on the card). ``fixed`` (runtime, weights,
gradients' holders, optimizer state; on CUDA also what lives outside the allocator, the
CUDA context and library workspaces, ``outside_bytes`` of it) is what trials measure beyond
the simulation;
``scale`` is what the simulation still misses (kernel workspaces, PyTorch's side of the
loss), 1.0 until trials with different simulated figures fit it by least squares. A plan's
saving is what it takes off the simulated figure, not the bytes it stashes.

Without a graph (a saved model whose graph file is gone), the linear form:

    peak(b, S) = static + per_sample · b − Σ_{p∈S} effectiveness_p · saving_p(b)

``static`` and ``per_sample`` are fitted (least squares) on no-config trials at two or
more batch sizes; ``saving_p(b)`` is the scan's exact saving polynomial of plan p with the
batch symbols set to b and the other dims (sequence length) fixed at the probe's values.
``effectiveness`` says how much of a plan's saving actually lowers the peak (freed
activations may not sit at the peak; recomputed tensors live for a while): 1.0 until
trials with plans on are observed, then refitted by ridge regression towards one global
factor after every trial (``with_observation``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Annotated, Any

import numpy as np
from pydantic import Field, PlainValidator, Strict, TypeAdapter, ValidationError
from typing_extensions import Required, TypedDict

from memopt.backends.ort.config import PlanKey, plan_keys
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.predict.liveness import ActivationSimulator, Recompute, Timeline
from memopt.backends.ort.rules import AnalysisOrder
from memopt.cuda_caching import CudaSetup
from memopt.errors import MemoptError
from memopt.graph.polynomial import Polynomial

__all__ = [
    "MemoryModel",
    "ModelError",
    "Observation",
    "PlanSavings",
    "Prediction",
    "fit_memory_model",
    "polynomial_to_json",
]

_EFFECTIVENESS_RANGE = (0.0, 2.0)
# The allocator's overhead on simulated activations, as fitted: never below the simulation, at most 2x.
_SCALE_RANGE = (1.0, 2.0)
# Simulated peaks must differ this much (relative) before a scale is fitted rather than assumed 1.0.
_SCALE_SPREAD = 0.3
# A fitted slope this far under the range's floor is no noise of the runs (a few MiB over the
# hundreds the calibration's batches apart): the simulated arena grew faster with the batch than
# the measured one, which no allocator overhead explains.
_SLOPE_TOLERANCE = 0.02


class ModelError(MemoptError):
    """The measurements cannot support a model."""


@dataclass(frozen=True)
class PlanSavings:
    """A Plan-table row and the bytes it frees; ``occurrences`` in topological order."""

    key: PlanKey  # e.g. "FusedMatMul+Add+:1:-1"
    entries: tuple[str, ...]  # "<subgraph>:<type>" parts
    frequency: int
    saving: Polynomial  # all occurrences, exact
    occurrences: tuple[Polynomial, ...] = ()
    recomputes: tuple[Recompute, ...] = ()  # each occurrence's subgraph, same order

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PlanKey(self.key))  # a key read back from text is a PlanKey again


@dataclass(frozen=True)
class Observation:
    """A measured peak. ``plans``: keys enabled; ``counts``: occurrences per key where partial.
    On CUDA the peak is what runs out: reserved plus ``outside_bytes``, the memory outside the
    allocator at the peak."""

    batch_size: int
    plans: tuple[PlanKey, ...]
    peak_bytes: int
    counts: Mapping[PlanKey, int] = field(default_factory=dict)
    outside_bytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "plans", plan_keys(self.plans))  # keys read back from text are PlanKeys again
        object.__setattr__(self, "counts", {PlanKey(key): count for key, count in self.counts.items()})


@dataclass(frozen=True)
class Prediction:
    batch_size: int
    plans: tuple[PlanKey, ...]
    peak_bytes: float
    baseline_bytes: float  # no config
    savings: Mapping[PlanKey, float]  # effective bytes per enabled plan


@dataclass(frozen=True)
class MemoryModel:
    batch_symbols: tuple[str, ...]
    fixed_dims: Mapping[str, int]
    plans: tuple[PlanSavings, ...]
    static_bytes: float
    per_sample_bytes: float
    effectiveness: Mapping[PlanKey, float] = field(default_factory=dict)
    global_effectiveness: float = 1.0
    observations: tuple[Observation, ...] = ()
    simulator: ActivationSimulator | None = field(default=None, compare=False, repr=False)
    activation_scale: float = 1.0  # with a simulator: measured activation bytes per simulated byte
    outside_bytes: float = 0.0  # CUDA: of the fixed part, what lives outside the caching allocator
    # CPU: the fit reads the simulated arena with no config after its first steps
    # (``Timeline.early_held_bytes``) rather than settled: see ``_fit_simulated``.
    early_arena: bool = False

    @property
    def simulated(self) -> bool:
        return self.simulator is not None

    def timeline(
        self, batch_size: int, plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Timeline:
        """The simulated step (activation peak and where it is); needs the graph."""
        if self.simulator is None:
            raise ModelError("this memory model has no training graph to simulate")
        return self.simulator.timeline(self.dims(batch_size), plans, counts)

    def activations(
        self, batch_size: int, plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> float:
        """Predicted activation bytes at the peak (the prediction less the fixed part)."""
        if self.simulator is None:
            return self.predict(batch_size, plans, counts).peak_bytes - self.static_bytes
        plans = tuple(plans)
        return self.activation_scale * self._held(self.timeline(batch_size, plans, counts), plans)

    def _held(self, timeline: Timeline, plans: tuple[PlanKey, ...]) -> float:
        """The reading of the simulated allocator a step with ``plans`` is predicted from (``_reading``)."""
        return _reading(timeline, plans, self.early_arena)

    def describe(self) -> str:
        """One line: what the model adds up."""
        mib = 2**20
        if self.simulator is not None:
            scale = (
                f" × {self.activation_scale:.2f} (allocator overhead learnt)" if self.activation_scale != 1.0 else ""
            )
            if self.simulator.device == "cuda":
                return (
                    f"fixed {self.static_bytes / mib:,.1f} MiB (outside the allocator {self.outside_bytes / mib:,.1f} MiB)"
                    f" + simulated reserved peak{scale}"
                )
            early = " (the arena read after its first steps)" if self.early_arena else ""
            return f"fixed {self.static_bytes / mib:,.1f} MiB + simulated activation peak{early}{scale}"
        return (
            f"static {self.static_bytes / mib:,.1f} MiB + {self.per_sample_bytes / mib:,.1f} MiB/sample"
            f" − plan savings × {self.global_effectiveness:.2f}"
        )

    def plan(self, key: PlanKey) -> PlanSavings:
        for plan in self.plans:
            if plan.key == key:
                return plan
        raise ModelError(f"no plan {key!r} in this model (known: {', '.join(p.key for p in self.plans)})")

    def dims(self, batch_size: int) -> dict[str, int]:
        return {**self.fixed_dims, **{symbol: batch_size for symbol in self.batch_symbols}}

    def raw_saving(self, key: PlanKey, batch_size: int, count: int | None = None) -> float:
        """What ``key`` alone takes off the peak at ``batch_size`` (first ``count`` occurrences
        when given): simulated with the graph, else the scan's stashed bytes."""
        plan = self.plan(key)
        if self.simulator is not None:
            counts = {} if count is None else {key: count}
            return self._held(self.timeline(batch_size), ()) - self._held(
                self.timeline(batch_size, (key,), counts), (key,)
            )
        dims = self.dims(batch_size)
        if count is None or count < 0 or count >= plan.frequency or not plan.occurrences:
            return _evaluate(plan.saving, dims)
        return sum(_evaluate(p, dims) for p in plan.occurrences[:count])

    def factor(self, key: PlanKey) -> float:
        if self.simulator is not None:
            return self.activation_scale
        return self.effectiveness.get(key, self.global_effectiveness)

    def baseline(self, batch_size: int) -> float:
        if self.simulator is not None:
            return self.static_bytes + self.activations(batch_size)
        return self.static_bytes + self.per_sample_bytes * batch_size

    def predict(
        self, batch_size: int, plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Prediction:
        plans = tuple(dict.fromkeys(plans))
        counts = counts or {}
        savings = {key: self.factor(key) * self.raw_saving(key, batch_size, counts.get(key)) for key in plans}
        baseline = self.baseline(batch_size)
        if self.simulator is not None:
            return Prediction(batch_size, plans, self.peak(batch_size, plans, counts), baseline, savings)
        return Prediction(batch_size, plans, baseline - sum(savings.values()), baseline, savings)

    def peak(
        self, batch_size: int, plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> float:
        """``predict(…).peak_bytes`` alone: with the graph, one simulation, not one more per plan
        for its saving."""
        if self.simulator is not None:
            return self.static_bytes + self.activations(batch_size, plans, counts)
        return self.predict(batch_size, plans, counts).peak_bytes

    def on_card(
        self, batch_size: int, plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> tuple[float, float, float]:
        """On CUDA the predicted peak in its parts: (simulated allocated, predicted reserved,
        outside the allocator); the last two add up to ``peak``."""
        peak = self.peak(batch_size, plans, counts)
        return self.timeline(batch_size, plans, counts).resident_bytes, peak - self.outside_bytes, self.outside_bytes

    def peak_bounds(self, batch_size: int, plans: Iterable[PlanKey] = ()) -> Iterator[float]:
        """Figures ``peak`` is never under, each for more work, the last ``peak`` itself: with the
        graph, the step's live bytes, then the arena's pages step by step
        (``ActivationSimulator.resident_bounds``). ``any(b > limit for b in …)`` says whether the
        peak is over ``limit`` and stops the simulation as soon as it is."""
        if self.simulator is None or self.activation_scale < 0:  # a scale below 0 turns bounds around
            yield self.peak(batch_size, plans)
            return
        plans = tuple(plans)
        if self.early_arena and not plans:  # the later steps' figures bound the settled reading, not this one
            yield self.floor(batch_size, plans)
            yield self.peak(batch_size, plans)
            return
        for resident in self.simulator.resident_bounds(self.dims(batch_size), plans):
            yield self.static_bytes + self.activation_scale * resident

    def fits(self, batch_size: int, plans: Iterable[PlanKey], limit_bytes: float) -> bool:
        """Whether ``peak`` is within ``limit_bytes``, simulated only as far as it takes to say."""
        return not any(bound > limit_bytes for bound in self.peak_bounds(batch_size, plans))

    def max_batch(self, limit_bytes: float, plans: Iterable[PlanKey] = (), ceiling: int | None = None) -> int:
        """The largest batch up to ``ceiling`` (None: any) found to fit within ``limit_bytes``
        (0: none): it fits and, below ``ceiling``, the batch above it does not.

        The step's live bytes grow with the batch and the predicted peak is never under them,
        so no batch past the largest whose live bytes fit (the top) can fit: the top is found
        on the live bytes alone, without playing the allocator. The allocator's placement makes
        the peak grow with the batch only roughly (a batch can fit where a smaller one does
        not), so the batches below the top are tried one by one, the largest that fits the
        answer. Where ``_SCANNED`` of them are over, the allocator's share of the lowest one's
        peak (its peak over its live bytes) says where the peak crosses the limit, and the
        search goes on from there, up or down, to a batch that fits with the one above it over."""
        plans = tuple(plans)
        fits = functools.partial(self.fits, plans=plans, limit_bytes=limit_bytes)
        top = _largest(
            lambda batch: self.floor(batch, plans) <= limit_bytes, _NO_CEILING if ceiling is None else ceiling
        )
        for batch in range(top, max(top - _SCANNED, 0), -1):
            if fits(batch):
                return batch
        over = top - _SCANNED + 1
        if over <= 1:
            return 0
        share = (self.peak(over, plans) - self.static_bytes) / max(self.floor(over, plans) - self.static_bytes, 1.0)
        guess = _largest(
            lambda batch: self.static_bytes + share * (self.floor(batch, plans) - self.static_bytes) <= limit_bytes,
            over - 1,
        )
        start = max(guess, 1)
        if fits(start):
            fitting, over = _walk(start, 1, over, lambda batch: batch == over or not fits(batch))
        else:
            # Batch 0 stands for "fits": the halving below then tries every batch the steps skipped.
            over, fitting = _walk(start, -1, 0, lambda batch: batch == 0 or fits(batch))
        return _edge(fits, fitting, over)

    def floor(self, batch_size: int, plans: Iterable[PlanKey] = ()) -> float:
        """A figure the peak is never under, without playing the allocator: with the graph, the
        step's live bytes (the first of ``peak_bounds`` for a config not simulated yet), which
        grow with the batch; without it, the peak itself."""
        if self.simulator is None or self.activation_scale < 0:
            return self.peak(batch_size, plans)
        return self.static_bytes + self.activation_scale * self.simulator.live_bytes(self.dims(batch_size), plans)

    def largest_buffer(self, batch_size: int) -> float:
        """The step's largest buffer in the device's allocator at ``batch_size``, as the peak
        would count it (``ActivationSimulator.largest_buffer``); 0 without the graph."""
        if self.simulator is None:
            return 0.0
        return self.activation_scale * self.simulator.largest_buffer(self.dims(batch_size))

    def with_observation(self, observation: Observation) -> MemoryModel:
        """This model refitted with one more measurement."""
        baseline_batches = {o.batch_size for o in self.observations if not o.plans}
        return fit_memory_model(
            [*self.observations, observation],
            self.plans,
            self.batch_symbols,
            self.fixed_dims,
            single_batch=len(baseline_batches) == 1,  # fitted at one batch: a command's own
            simulator=self.simulator,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_symbols": list(self.batch_symbols),
            "fixed_dims": dict(self.fixed_dims),
            "static_bytes": self.static_bytes,
            "per_sample_bytes": self.per_sample_bytes,
            "effectiveness": dict(self.effectiveness),
            "global_effectiveness": self.global_effectiveness,
            "activation_scale": self.activation_scale,
            "outside_bytes": self.outside_bytes,
            "early_arena": self.early_arena,
            "graph": self.simulator.source if self.simulator is not None else None,
            "config_order": self.simulator.order.value if self.simulator is not None else None,
            "device": self.simulator.device if self.simulator is not None else None,
            "cuda_setup": self.simulator.cuda.to_json() if self.simulator is not None else None,
            "plans": [
                {
                    "key": p.key,
                    "entries": list(p.entries),
                    "frequency": p.frequency,
                    "saving": polynomial_to_json(p.saving),
                    "occurrences": [polynomial_to_json(o) for o in p.occurrences],
                    "recomputes": [[r.entry, list(r.nodes)] for r in p.recomputes],
                }
                for p in self.plans
            ],
            "observations": [
                {
                    "batch_size": o.batch_size,
                    "plans": list(o.plans),
                    "peak_bytes": o.peak_bytes,
                    "counts": dict(o.counts),
                    "outside_bytes": o.outside_bytes,
                }
                for o in self.observations
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryModel:
        """The model ``to_json`` wrote; ``ModelError`` where a field is not a number of its kind
        within what a machine can hold (``_SavedModel``)."""
        try:
            saved = _SAVED_MODEL.validate_python(data)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "the model"
            raise ModelError(f"{field}: {first['msg']}") from None
        plans = tuple(
            PlanSavings(
                PlanKey(p["key"]),
                tuple(p["entries"]),
                p["frequency"],
                p["saving"],
                tuple(p.get("occurrences", ())),
                tuple(Recompute(entry, tuple(nodes)) for entry, nodes in p.get("recomputes", ())),
            )
            for p in saved["plans"]
        )
        observations = tuple(
            Observation(
                o["batch_size"],
                plan_keys(o["plans"]),
                o["peak_bytes"],
                {PlanKey(key): count for key, count in o.get("counts", {}).items()},
                o.get("outside_bytes", 0),
            )
            for o in saved.get("observations", ())
        )
        return cls(
            tuple(saved["batch_symbols"]),
            dict(saved["fixed_dims"]),
            plans,
            saved["static_bytes"],
            saved["per_sample_bytes"],
            {PlanKey(key): value for key, value in saved.get("effectiveness", {}).items()},
            saved.get("global_effectiveness", 1.0),
            observations,
            _reload_simulator(
                saved.get("graph"), plans, saved.get("config_order"), saved.get("device"), saved.get("cuda_setup")
            ),
            saved.get("activation_scale", 1.0),
            saved.get("outside_bytes", 0.0),
            saved.get("early_arena", False),
        )


# The saved model's schema: every number of its kind (strict: no "12" for 12, no NaN or
# infinity) and within what a machine can hold, so that a damaged file is refused as it is
# read, not met later as an overflow. Bytes up to an exbibyte, dims and batch sizes up to
# 2**40, a saving's terms of degree 8 at most (ORT's savings are products of a few dims),
# fitted factors within the ranges the fits clip them to.
_MOST_BYTES = 2**60
_MOST_DIM = 2**40
_MOST_DEGREE = 8
_Bytes = Annotated[float, Strict(), Field(ge=-_MOST_BYTES, le=_MOST_BYTES, allow_inf_nan=False)]
_Dim = Annotated[int, Strict(), Field(ge=0, le=_MOST_DIM)]
_Effectiveness = Annotated[
    float, Strict(), Field(ge=_EFFECTIVENESS_RANGE[0], le=_EFFECTIVENESS_RANGE[1], allow_inf_nan=False)
]


def _coefficient(value: Any) -> Fraction:
    """A saving's coefficient as ``polynomial_to_json`` writes it (a fraction's text), or a
    plain number, within ``_MOST_BYTES``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{type(value).__name__} is not a number")
    try:
        number = Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError):  # OverflowError: an infinite float
        raise ValueError(f"{value!r:.40} is not a finite number") from None
    if abs(number) > _MOST_BYTES or number.denominator > _MOST_BYTES:
        raise ValueError(f"{value!r:.40} is beyond {_MOST_BYTES} bytes")
    return number


_Power = Annotated[int, Strict(), Field(ge=0, le=_MOST_DEGREE)]
_TERMS = TypeAdapter(list[tuple[list[tuple[str, _Power]], Annotated[Fraction, PlainValidator(_coefficient)]]])


def _polynomial(value: Any) -> Polynomial:
    """A saving as ``polynomial_to_json`` writes it, each term of degree ``_MOST_DEGREE`` at most."""
    terms = _TERMS.validate_python(value)
    if any(sum(power for _, power in monomial) > _MOST_DEGREE for monomial, _ in terms):
        raise ValueError(f"a term of degree above {_MOST_DEGREE}")
    return Polynomial({tuple(monomial): coefficient for monomial, coefficient in terms})


_SavedPolynomial = Annotated[Polynomial, PlainValidator(_polynomial)]


class _SavedPlan(TypedDict, total=False):
    key: Required[str]
    entries: Required[list[str]]
    frequency: Required[_Dim]
    saving: Required[_SavedPolynomial]
    occurrences: list[_SavedPolynomial]
    recomputes: list[tuple[str, list[str]]]


class _SavedObservation(TypedDict, total=False):
    batch_size: Required[Annotated[int, Strict(), Field(ge=1, le=_MOST_DIM)]]
    plans: Required[list[str]]
    peak_bytes: Required[Annotated[int, Strict(), Field(ge=0, le=_MOST_BYTES)]]
    counts: dict[str, _Dim]
    outside_bytes: Annotated[int, Strict(), Field(ge=0, le=_MOST_BYTES)]


class _SavedModel(TypedDict, total=False):
    batch_symbols: Required[list[str]]
    fixed_dims: Required[dict[str, _Dim]]
    static_bytes: Required[_Bytes]
    per_sample_bytes: Required[_Bytes]
    effectiveness: dict[str, _Effectiveness]
    global_effectiveness: _Effectiveness
    activation_scale: Annotated[float, Strict(), Field(ge=_SCALE_RANGE[0], le=_SCALE_RANGE[1], allow_inf_nan=False)]
    graph: str | None
    config_order: str | None
    device: str | None
    plans: Required[list[_SavedPlan]]
    observations: list[_SavedObservation]
    outside_bytes: Annotated[float, Strict(), Field(ge=0, le=_MOST_BYTES, allow_inf_nan=False)]
    early_arena: Annotated[bool, Strict()]
    cuda_setup: Any  # checked as the simulator is rebuilt from it (``CudaSetup.from_json``)


_SAVED_MODEL = TypeAdapter(_SavedModel)


def _reload_simulator(
    source: Any, plans: tuple[PlanSavings, ...], order: Any, device: Any, cuda: Any
) -> ActivationSimulator | None:
    """The simulator of a saved model, if its graph file is still there (and it names a known
    order); ``ModelError`` where its CUDA setup is damaged (a model saved before there was one
    simulates PyTorch's defaults on an empty pool)."""
    if not isinstance(source, str) or not any(p.recomputes for p in plans):
        return None
    try:
        config_order = AnalysisOrder(order)
        graph = load_graph(source)
    except (MemoptError, ValueError):
        return None
    try:
        setup = CudaSetup() if cuda is None else CudaSetup.from_json(cuda)
    except (ValueError, KeyError, TypeError) as err:
        raise ModelError(f"its CUDA allocator setup is damaged ({err})") from None
    return ActivationSimulator(
        graph, {p.key: p.recomputes for p in plans}, source, config_order, "cuda" if device == "cuda" else "cpu", setup
    )


def fit_memory_model(
    observations: Iterable[Observation],
    plans: Iterable[PlanSavings],
    batch_symbols: Iterable[str],
    fixed_dims: Mapping[str, int],
    prior_effectiveness: float = 1.0,
    single_batch: bool = False,
    *,
    simulator: ActivationSimulator | None = None,
) -> MemoryModel:
    """Fit the fixed part (and the allocator's scale) against the simulation when there is a
    ``simulator``; else static/per-sample bytes on the no-config observations, then plan
    effectiveness on the rest.

    ``single_batch``: every trial runs at one batch size (a command that sets its own), so the
    no-config peak there is all the linear model needs; it predicts that batch only."""
    observations = tuple(observations)
    if simulator is not None:
        return _fit_simulated(observations, tuple(plans), tuple(batch_symbols), dict(fixed_dims), simulator)
    baseline = [o for o in observations if not o.plans]
    batches = {o.batch_size for o in baseline}
    if len(batches) < (1 if single_batch else 2):
        raise ModelError(
            f"the memory model needs no-config measurements at two or more batch sizes (has {sorted(batches) or 'none'})"
        )
    x = np.array([o.batch_size for o in baseline], dtype=float)
    y = np.array([o.peak_bytes for o in baseline], dtype=float)
    slope, intercept = np.polyfit(x, y, 1) if len(batches) > 1 else (0.0, float(y.mean()))
    if slope < 0:  # noise larger than the activations: memory does not grow with the batch here
        slope, intercept = 0.0, float(y.mean())
    model = MemoryModel(
        tuple(batch_symbols),
        dict(fixed_dims),
        tuple(plans),
        float(intercept),
        float(slope),
        {},
        prior_effectiveness,
        observations,
    )
    with_plans = [o for o in observations if o.plans]
    if not with_plans:
        return model
    return _fit_effectiveness(model, with_plans, prior_effectiveness)


def _fit_simulated(
    observations: tuple[Observation, ...],
    plans: tuple[PlanSavings, ...],
    batch_symbols: tuple[str, ...],
    fixed_dims: dict[str, int],
    simulator: ActivationSimulator,
) -> MemoryModel:
    if not observations:
        raise ModelError("the memory model needs one measured trial to calibrate its fixed part")
    model = MemoryModel(batch_symbols, fixed_dims, plans, 0.0, 0.0, observations=observations, simulator=simulator)
    timelines = [model.timeline(o.batch_size, o.plans, o.counts) for o in observations]
    y = np.array([o.peak_bytes for o in observations], dtype=float)
    # The simulated arena places buffers step after step until it settles; the real one has been
    # measured to settle as late (GPT-2 graphs, CPU: by the fourth or fifth step) or early (a
    # Hugging Face Llama with its cross-entropy in the graph: by the end of the second step, where
    # the simulation goes on to put one logits-sized buffer on new pages). A settled reading that
    # grows faster with the batch than the runs did (a slope under 1) is such an over-count: a fit
    # on it puts the over-count into the fixed part and under-predicts every config that drifts
    # less. The early reading of the no-config runs is taken then, where it does not grow faster
    # than the runs (configs keep the settled reading: ``_reading``).
    early_arena = False
    x = np.array([timeline.held_bytes for timeline in timelines])
    scale, slope = _scale_of(x, y)
    if slope is not None and slope < _SCALE_RANGE[0] - _SLOPE_TOLERANCE:
        early = np.array([_reading(t, o.plans, early=True) for t, o in zip(timelines, observations)])
        early_scale, early_slope = _scale_of(early, y)
        if early_slope is not None and early_slope >= _SCALE_RANGE[0] - _SLOPE_TOLERANCE:
            early_arena, x, scale = True, early, early_scale
    fixed = float(np.median(y - scale * x))
    outside = float(np.median([o.outside_bytes for o in observations]))
    return replace(model, static_bytes=fixed, activation_scale=scale, outside_bytes=outside, early_arena=early_arena)


def _reading(timeline: Timeline, plans: tuple[PlanKey, ...], early: bool) -> float:
    """The simulated allocator's figure a step with ``plans`` is read at: settled, but with no config
    after the first steps where ``early`` (``MemoryModel.early_arena``). A config's real arena has
    been measured to go on growing as the simulated one does (a Hugging Face Llama's first config:
    456.7 MiB of arena pages, the settled simulation 440.9, after two steps 378.3; a BERT's one
    plan, settled +4.9%, after two steps −10.5%), where the no-config run's stopped early."""
    return timeline.early_held_bytes if early and not plans else timeline.held_bytes


def _scale_of(x: np.ndarray, y: np.ndarray) -> tuple[float, float | None]:
    """The allocator's scale fitted on simulated ``x`` against measured ``y``, and the slope it
    was clipped from (None where the simulated figures lie too close to fit one: scale 1)."""
    if len(x) < 2 or x.max() - x.min() < _SCALE_SPREAD * x.max():
        return 1.0, None
    slope = float(np.polyfit(x, y, 1)[0])
    return float(np.clip(slope, *_SCALE_RANGE)), slope


def _fit_effectiveness(model: MemoryModel, observed: list[Observation], prior: float) -> MemoryModel:
    keys = sorted({key for o in observed for key in o.plans})
    known = {p.key for p in model.plans}
    keys = [key for key in keys if key in known]
    if not keys:
        return model
    a = np.array(
        [[model.raw_saving(k, o.batch_size, o.counts.get(k)) if k in o.plans else 0.0 for k in keys] for o in observed]
    )
    d = np.array([model.baseline(o.batch_size) - o.peak_bytes for o in observed])
    total = a.sum(axis=1)
    if not np.any(total > 0):
        return model
    overall = float(np.clip(total @ d / (total @ total), *_EFFECTIVENESS_RANGE))
    # Ridge towards the measured overall factor: one trial with three plans cannot tell them apart.
    gram = a.T @ a
    strength = 0.5 * float(np.mean(np.diag(gram)[np.diag(gram) > 0]))
    solution = np.linalg.solve(gram + strength * np.eye(len(keys)), a.T @ d + strength * overall * np.ones(len(keys)))
    factors = {k: float(np.clip(v, *_EFFECTIVENESS_RANGE)) for k, v in zip(keys, solution)}
    # Plans never measured keep most of the scan's word: a plan that saved nothing (its
    # saving was off the peak's path) says little about the others, so their factor is the
    # measured ones' mean pulled towards the prior (one ineffective plan: halfway).
    unmeasured = (sum(factors.values()) + prior) / (len(factors) + 1)
    return replace(model, effectiveness=factors, global_effectiveness=float(np.clip(unmeasured, *_EFFECTIVENESS_RANGE)))


def _evaluate(polynomial: Polynomial, dims: Mapping[str, int]) -> float:
    # A dim the model cannot name (ORT's "unknown" shapes) counts as 1: it is not batch-dependent.
    return polynomial.evaluate({**{s: 1 for s in polynomial.symbols}, **dims})


def polynomial_to_json(polynomial: Polynomial) -> list[list[Any]]:
    return [
        [[list(factor) for factor in monomial], str(coefficient)] for monomial, coefficient in polynomial.terms.items()
    ]


# ``max_batch``: the batches tried one by one below the top of the live bytes, and from its
# estimate after that, before the steps grow (the allocator's overhead is usually a few batches).
_SCANNED = 8
_NO_CEILING = 1 << 20  # where no ceiling is given: far past any batch that could fit


def _largest(holds: Callable[[int], bool], ceiling: int) -> int:
    """The largest ``n`` in 1…``ceiling`` where ``holds(n)``, for a ``holds`` true up to some
    ``n`` and false past it (0: not even 1): doubling, then halving."""
    if not holds(1):
        return 0
    low, high = 1, 2
    while high <= ceiling and holds(high):
        low, high = high, high * 2
    return _edge(holds, low, min(high, ceiling + 1))


def _edge(holds: Callable[[int], bool], low: int, high: int) -> int:
    """Halving between ``low`` (where ``holds``, or 0) and ``high`` (where it does not, or the
    end of the range): an ``n`` where it holds and not at ``n + 1``."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if holds(middle) else (low, middle)
    return low


def _walk(start: int, direction: int, bound: int, stop: Callable[[int], bool]) -> tuple[int, int]:
    """From ``start`` (where ``stop`` does not hold) towards ``bound`` (where it does): the last
    batch tried where it does not hold and the first where it does. One batch at a time for
    ``_SCANNED`` batches, then 2, 4, 8… at a time, never past ``bound``."""
    last, step = start, 1
    while True:
        batch = min(last + step, bound) if direction > 0 else max(last - step, bound)
        if stop(batch):
            return last, batch
        last = batch
        if abs(batch - start) >= _SCANNED:
            step *= 2
