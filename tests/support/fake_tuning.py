"""A FAKE trial runner for the tuner's tests: scripted peaks instead of ORTModule steps.

Named as a fake because it replaces what the real runner measures; everything else the
tuner does (the scan of a real ORT 1.19.2 training graph from sample_logs, calibration,
the memory model, the planner, the policy, the journal) runs for real.

Its peak is the model the tuner assumes, so the tuner's predictions can be checked: a
fixed part plus the graph's simulated activation peak with the plans switched on (times
``allocator_scale``, what a real allocator adds beyond the simulation); a peak above
``oom_above`` is an out-of-memory failure.

The simulation of the sample graph is what these tests spend their time on, and every
session asks for the same steps again (the memory model of each new tuner starts with an
empty memo): ``simulate_once`` plays each (dims, recompute, order) of that graph once per
pytest process. The simulation is a pure function of them, so no result changes.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memopt.backends.ort.calibrate import ScannedGraph, prepare_target
from memopt.backends.ort.graph.training_graph import TrainingGraph, load_graph
from memopt.backends.ort.predict import liveness
from memopt.backends.ort.predict.liveness import Recompute, Timeline
from memopt.backends.ort.rules import AnalysisOrder
from memopt.backends.ort.target import ProbedGraph
from memopt.backends.ort.trials import StackVersions, TrialSpec, requested_off
from memopt.backends.ort.tune.tuner import Tuner
from memopt.core import RunStatus, parse_runnable
from memopt.core.memory import Memory
from memopt.core.trial import Outcome, TrialResult
from memopt.run import RunSettings
from memopt.tune import OrtTuneSettings, TuneSettings

SAMPLE_GRAPH = Path(__file__).resolve().parent.parent.parent / "sample_logs" / "graphs" / "1.19.2" / "gpt.onnx"
VERSIONS = StackVersions("1.19.2", "onnxruntime-training-cpu", "2.4.1", cuda=False)
DIMS = {"input_ids_dim1": 512}  # the sequence length; the batch dim varies
MiB = 2**20


@functools.cache
def sample_graph() -> TrainingGraph:
    """The tiny GPT's training graph, loaded once: the scan and the simulation only read it."""
    return load_graph(SAMPLE_GRAPH)


_simulate = liveness.simulate
_played: dict[tuple[object, ...], Timeline] = {}


def simulate_once(
    graph: TrainingGraph,
    dims: Mapping[str, int],
    recompute: Iterable[Recompute] = (),
    order: AnalysisOrder = AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST,
) -> Timeline:
    """``liveness.simulate``, each step of the sample graph played once (other graphs every time)."""
    recompute = tuple(recompute)
    if graph is not sample_graph():
        return _simulate(graph, dims, recompute, order)
    key = (tuple(sorted(dims.items())), recompute, order)
    if key not in _played:
        _played[key] = _simulate(graph, dims, recompute, order)
    return _played[key]


def prepared_gpt() -> ScannedGraph:
    """The tiny GPT's real training graph (captured with ORT 1.19.2), scanned; no probe run."""
    target = ProbedGraph(sample_graph(), "sample gpt", SAMPLE_GRAPH, DIMS, "1.19.2")
    return prepare_target(
        RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}), versions=VERSIONS, loaded=target
    )


@dataclass
class FakeRunner:
    """Scripted trials. ``pause_on`` blocks the trial with that number until cancelled."""

    prepared: ScannedGraph
    static_bytes: float = 400 * MiB
    allocator_scale: float = 1.0
    ignored: frozenset[str] = frozenset()  # plans ORT would leave OFF
    oom_above: float | None = None
    pause_on: int | None = None
    calls: list[TrialSpec] = field(default_factory=list)
    on_call: Callable[[int], None] | None = None
    jitter_bytes: tuple[float, ...] = ()  # added to the peak of call 1, 2, … in turn: run-to-run noise

    def plans_on(self, spec: TrialSpec) -> tuple[str, ...]:
        configured = {e.cell for e in spec.config}
        keys = [p.key for p in self.prepared.report.patterns]
        return tuple(k for k in keys if configured and set(k.cells) <= configured and k not in self.ignored)

    def peak(self, batch: int, plans: tuple[str, ...]) -> float:
        dims = {**DIMS, "input_ids_dim0": batch}
        recompute = [
            Recompute(o.entry, o.nodes) for p in self.prepared.report.patterns if p.key in plans for o in p.occurrences
        ]
        return (
            self.static_bytes
            + self.allocator_scale * simulate_once(self.prepared.loaded.graph, dims, recompute).resident_bytes
        )

    def __call__(
        self, spec: TrialSpec, *, budget_bytes: int | None, predicted_peak_bytes: int | None, cancel: threading.Event
    ) -> TrialResult:
        self.calls.append(spec)
        number = len(self.calls)
        if self.on_call is not None:
            self.on_call(number)
        on = self.plans_on(spec)
        peak = int(
            self.peak(spec.batch_size, on)
            + (self.jitter_bytes[(number - 1) % len(self.jitter_bytes)] if self.jitter_bytes else 0)
        )
        status = "ok"
        if number == self.pause_on:
            cancel.wait(10)
            status = "cancelled" if cancel.is_set() else "ok"
        elif self.oom_above is not None and peak > self.oom_above:
            status = "out_of_memory"
        outcome = {"ok": Outcome.OK, "cancelled": Outcome.CANCELLED, "out_of_memory": Outcome.OUT_OF_MEMORY}[status]
        if outcome is Outcome.OK and budget_bytes is not None and peak > budget_bytes:
            outcome = Outcome.OVER_BUDGET
        ran = status == "ok"
        step_s = 0.1 + 0.01 * spec.batch_size + 0.005 * len(on)
        return TrialResult(
            key="",
            target=spec.settings.target,
            options=dict(spec.settings.options),
            batch_size=spec.batch_size,
            config=tuple(str(e) for e in spec.config),
            config_value=None,
            outcome=outcome,
            status=RunStatus(status),
            run_dir=str(spec.settings.runs_dir / "fake"),  # a real run's folder is in the runs folder
            steps=spec.settings.steps,
            device="cpu",
            ort_version=VERSIONS.ort_version,
            torch_version=VERSIONS.torch_version,
            ort_package=VERSIONS.ort_package,
            memory=Memory(memory_kind="rss", peak_bytes=peak if ran else None),
            step_times_s=(1.0, step_s, step_s) if ran else (),
            median_step_s=step_s if ran else None,
            plans_on=on if ran else (),
            plans_off=requested_off(spec.config, on) if ran else (),
            plans_seen=10 if ran else None,
            budget_bytes=budget_bytes,
            predicted_peak_bytes=predicted_peak_bytes,
            finished_at=time.time(),
        )


def fake_tuner(runs_dir: Path, runner: FakeRunner, budget_bytes: int, **settings: object) -> Tuner:
    """A tuner over the fake runner at target batch 16, calibrated by one run at batch 8."""
    from memopt.run import Budget

    defaults: dict[str, object] = {
        "run": RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}, runs_dir=runs_dir, device="cpu"),
        "target_batch": 16,
        "ort": OrtTuneSettings(calibration_batches=(8,)),
        "budget": Budget(f"{budget_bytes}B", bytes=budget_bytes),
        "margin": 0.0,
    }
    return Tuner(
        TuneSettings(**{**defaults, **settings}),  # type: ignore[arg-type]
        runner=runner,
        versions=VERSIONS,
        prepare=lambda cancel: runner.prepared,
    )
