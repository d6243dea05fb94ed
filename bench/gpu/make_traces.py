"""The allocation traces ``check_allocator.py`` replays on a GPU, made here on CPU and written
to ``traces.json.gz`` beside this file (the device image has no onnx-based simulation to make
them with, and the traces must be the same on every run):

    .venv/bin/python bench/gpu/make_traces.py

- the sample graphs' CUDA steps, as memopt's simulation plays them (a warm-up step and two
  more through the caching allocator), at several sizes;
- random churn with sizes at the allocator's edges (511/512/513 B; 1, 10 and 20 MiB ± 1);
- churn under ``max_split_size_mb`` and under ``roundup_power2_divisions``;
- churn that grows until a capacity (``set_per_process_memory_fraction`` on the device) runs out;
- churn under a capacity at which the allocator frees its cache (with ``max_split_size_mb``, its
  oversize blocks first) to find room, and never runs out.

A trace is a list of events: ``[id, bytes]`` allocates, ``[id]`` frees that allocation.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.predict.calibration import require_batch_dim
from memopt.backends.ort.predict.liveness import simulate
from memopt.backends.ort.scan import scan_graph
from memopt.cuda_caching import AllocatorSettings, CudaCachingAllocator, CudaOutOfMemoryError, CudaSetup, PoolLayout

HERE = Path(__file__).parent
TRACES = HERE / "traces.json.gz"
GRAPHS = HERE.parent.parent / "sample_logs" / "graphs" / "1.19.2"
MiB = 1 << 20
# (graph, batch, the other dims): small and mid-size steps, and the llama whose reserved
# peak is far above its allocated one at 64 x 512.
STEPS = [
    ("gpt.onnx", 8, 64),
    ("gpt.onnx", 64, 256),
    ("bert.onnx", 32, 128),
    ("hf-gpt2.onnx", 16, 256),
    ("hf-llama.onnx", 8, 512),
    ("hf-llama.onnx", 64, 512),
]
EDGE_SIZES = [
    511,
    512,
    513,
    MiB - 1,
    MiB,
    MiB + 1,
    10 * MiB - 1,
    10 * MiB,
    10 * MiB + 1,
    20 * MiB - 1,
    20 * MiB,
    20 * MiB + 1,
]


class _Recorder(CudaCachingAllocator):
    """The simulation's allocator, writing down each request it serves (0-byte ones allocate nothing)."""

    def __init__(self, settings: AllocatorSettings, pool: PoolLayout) -> None:
        super().__init__(settings, pool=pool)
        self.events: list[list[int]] = []
        self._ids: dict[object, int] = {}  # live buffer -> its number in the trace
        self._made = 0

    def allocate(self, buffer: object, size: float) -> None:
        super().allocate(buffer, size)
        if math.ceil(size) > 0:
            self._ids[buffer], self._made = self._made, self._made + 1
            self.events.append([self._ids[buffer], math.ceil(size)])

    def free(self, buffer: object) -> None:
        super().free(buffer)
        if buffer in self._ids:
            self.events.append([self._ids.pop(buffer)])


@dataclass(frozen=True)
class _RecordingSetup(CudaSetup):
    made: list[_Recorder] = field(default_factory=list, compare=False)

    def allocator(self) -> CudaCachingAllocator:
        recorder = _Recorder(self.settings, self.pool or PoolLayout())
        self.made.append(recorder)
        return recorder


def step_trace(graph_file: str, batch: int, other: int) -> dict[str, Any]:
    graph = load_graph(GRAPHS / graph_file)
    report = scan_graph(graph, "1.19.2")
    symbols = require_batch_dim(report, graph_file)
    dims = {s: batch if s in symbols else other for s in report.symbols}
    setup = _RecordingSetup()
    simulate(graph, dims, device="cuda", cuda=setup)
    (recorder,) = setup.made
    name = f"{graph_file.removesuffix('.onnx')} {batch}x{other}"
    return {
        "name": name,
        "kind": "sample graph step",
        "alloc_conf": "",
        "capacity_bytes": None,
        "events": recorder.events,
    }


def churn(seed: int, count: int, sizes: list[int], live_at_most: int, grow: bool = False) -> list[list[int]]:
    """Random allocations and frees; with ``grow``, frees only one in three, so the live set grows."""
    rng = random.Random(seed)
    live: list[int] = []
    events: list[list[int]] = []
    for number in range(count):
        free = live and (len(live) >= live_at_most or rng.random() < (0.2 if grow else 0.5))
        if free:
            events.append([live.pop(rng.randrange(len(live)))])
        else:
            size = rng.choice(sizes) if rng.random() < 0.7 else rng.randint(1, 24 * MiB)
            events.append([number, size])
            live.append(number)
    return events


def oom_at(events: list[list[int]], settings: AllocatorSettings, capacity: int) -> int | None:
    allocator = CudaCachingAllocator(settings, capacity)
    for index, event in enumerate(events):
        try:
            allocator.allocate(event[0], event[1]) if len(event) == 2 else allocator.free(event[0])
        except CudaOutOfMemoryError:
            return index
    return None


def retried_under_a_cap(events: list[list[int]], settings: AllocatorSettings) -> int:
    """The largest cap, in 2 MiB steps under what ``events`` reserve uncapped, at which the
    allocator has to free its cache to find room (and, with ``max_split_size``, its oversize
    blocks first) but never runs out."""
    uncapped = CudaCachingAllocator(settings)
    for event in events:
        uncapped.allocate(event[0], event[1]) if len(event) == 2 else uncapped.free(event[0])
    for capacity in range(uncapped.peak_reserved_bytes - 2 * MiB, 0, -2 * MiB):
        allocator = CudaCachingAllocator(settings, capacity)
        try:
            for event in events:
                allocator.allocate(event[0], event[1]) if len(event) == 2 else allocator.free(event[0])
        except CudaOutOfMemoryError:
            continue
        if allocator.alloc_retries:
            return capacity
    raise SystemExit("no cap makes these events retry without running out: change them")


def churn_traces() -> list[dict[str, Any]]:
    big = [30 * MiB, 64 * MiB - 1, 64 * MiB, 64 * MiB + 1, 100 * MiB, 150 * MiB, 200 * MiB, *EDGE_SIZES]
    traces = [
        {
            "name": f"edge churn {seed}",
            "kind": "random churn",
            "alloc_conf": "",
            "capacity_bytes": None,
            "events": churn(seed, 6000, EDGE_SIZES, 64),
        }
        for seed in (1, 2)
    ]
    traces.append(
        {
            "name": "max_split_size_mb:64 churn",
            "kind": "random churn",
            "alloc_conf": "max_split_size_mb:64",
            "capacity_bytes": None,
            "events": churn(3, 4000, big, 24),
        }
    )
    traces.append(
        {
            "name": "roundup_power2_divisions:4 churn",
            "kind": "random churn",
            "alloc_conf": "roundup_power2_divisions:4",
            "capacity_bytes": None,
            "events": churn(4, 4000, EDGE_SIZES + [3 * MiB + 1, 5 * MiB + 7, 40 * MiB + 3], 48),
        }
    )
    capacity = 1024 * MiB
    events = churn(5, 4000, EDGE_SIZES + [30 * MiB, 50 * MiB], 10_000, grow=True)
    oom = oom_at(events, AllocatorSettings(), capacity)
    if oom is None:
        raise SystemExit("the capped churn never runs out: make it grow more")
    traces.append(
        {
            "name": "capped churn (1 GiB)",
            "kind": "capped churn",
            "alloc_conf": "",
            "capacity_bytes": capacity,
            "events": events[: oom + 1],
        }
    )
    for alloc_conf, seed in (("", 6), ("max_split_size_mb:64", 7)):
        events = churn(seed, 3000, EDGE_SIZES + [30 * MiB, 64 * MiB + 1, 100 * MiB], 12)
        settings = AllocatorSettings.from_environment({"PYTORCH_CUDA_ALLOC_CONF": alloc_conf})
        capacity = retried_under_a_cap(events, settings)
        traces.append(
            {
                "name": f"capped churn, retried ({capacity // MiB} MiB)",
                "kind": "capped churn",
                "alloc_conf": alloc_conf,
                "capacity_bytes": capacity,
                "events": events,
            }
        )
    return traces


def main() -> None:
    traces = [step_trace(*step) for step in STEPS] + churn_traces()
    with gzip.open(TRACES, "wt") as out:
        json.dump({"traces": traces}, out, separators=(",", ":"))
    for trace in traces:
        print(f"{trace['name']}: {len(trace['events'])} events", file=sys.stderr)
    print(f"{TRACES}: {TRACES.stat().st_size / MiB:.2f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
