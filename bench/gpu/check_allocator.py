"""memopt's simulation of PyTorch's CUDA caching allocator against the real one, on a GPU.

    python3 bench/gpu/check_allocator.py --out "$OUT"

Each trace of ``traces.json.gz`` (made on CPU beforehand by ``make_traces.py``: the sample
graphs' CUDA steps as memopt simulates them, random churn at the allocator's edge sizes, churn
under ``max_split_size_mb`` and ``roundup_power2_divisions``, churn capped by
``set_per_process_memory_fraction``) is replayed through the real caching allocator with
``torch.cuda.caching_allocator_alloc``/``caching_allocator_delete`` (the path ORT's external
allocator takes), reading ``memory_allocated``/``memory_reserved`` after every event. The
traces of one ``PYTORCH_CUDA_ALLOC_CONF`` run in a process of their own, started with it set
(PyTorch reads it once). Then the simulation plays each trace twice:

- at the device's segment addresses (each new segment placed where the device's was, the
  pointer the device returned for the request that made it): it must be exact, allocated and
  reserved after every event, every block where the device placed it, and the out-of-memory
  error at the same event;
- as shipped (its own increasing addresses): measured, not required. Where cudaMalloc puts a
  segment decides which of two equal free blocks a request takes, hence which blocks lie side
  by side and merge when freed, hence the sizes of the free blocks later requests find; and a
  large-pool block left with 1 MiB or less is handed out whole and counted allocated whole.
  So allocated, not only reserved, depends on the device's addresses
  (``tests/gpu/test_cuda_allocator.py`` works a case out by hand), and no simulation that
  does not know them can be exact at every event. The table says how far off it is: at the
  worst event and at the peaks memopt predicts.

Writes ``allocator_check.json`` and ``allocator_check.md`` (a table for BENCHMARKS.md) under
``--out``; exits 1 where the check at the device's addresses failed. The parent process imports no torch; a replaying
child imports torch and nothing else outside the standard library, so the script runs on a
device image without onnx, onnxruntime, pydantic or textual. Its own imports of memopt are
``memopt.cuda_caching``, ``memopt.errors`` and ``memopt.units`` alone.

Part (b) of the GPU check, plain-PyTorch training steps predicted against
``max_memory_allocated``/``max_memory_reserved``, is ``check_plain_torch.py`` beside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # memopt, from the working tree

from memopt.cuda_caching import (
    ALLOC_CONF_VARIABLES,
    AllocatorSettings,
    CudaCachingAllocator,
    CudaOutOfMemoryError,
    SimulationMisuse,
)
from memopt.units import format_bytes

TRACES = Path(__file__).parent / "traces.json.gz"
CHILD_TIMEOUT_S = 240  # one settings group's replays; all of them take seconds on an H100

Event = list[int]  # [id, bytes]: allocate; [id]: free


class CudaApi(Protocol):
    """What the replay uses of ``torch.cuda`` (the self-test hands it a fake backed by memopt's simulator)."""

    OutOfMemoryError: type[BaseException]

    def caching_allocator_alloc(self, size: int) -> int: ...
    def caching_allocator_delete(self, pointer: int) -> None: ...
    def memory_allocated(self) -> int: ...
    def memory_reserved(self) -> int: ...
    def memory_stats(self) -> Mapping[str, Any]: ...
    def mem_get_info(self) -> tuple[int, int]: ...
    def empty_cache(self) -> None: ...
    def set_per_process_memory_fraction(self, fraction: float) -> None: ...


@dataclass
class Replay:
    """One trace played: allocated and reserved after each event played (the one that ran out
    of memory included), the pointer each allocation got (0 for a free), the event that ran
    out of memory, and the allocator's retries and out-of-memory errors over the trace.
    ``capacity_bytes``: the cap the device allowed (``set_per_process_memory_fraction``)."""

    allocated: list[int]
    reserved: list[int]
    pointers: list[int]
    oom_event: int | None
    alloc_retries: int
    ooms: int
    capacity_bytes: int | None = None


def replay(cuda: CudaApi, events: Sequence[Event], capacity_bytes: int | None) -> Replay:
    """``events`` through the device's caching allocator, from an empty cache."""
    cuda.empty_cache()
    if cuda.memory_allocated() or cuda.memory_reserved():
        raise RuntimeError(f"the allocator holds memory before the replay: {cuda.memory_reserved()} bytes reserved")
    capacity = None
    if capacity_bytes is not None:
        total = cuda.mem_get_info()[1]
        fraction = capacity_bytes / total
        cuda.set_per_process_memory_fraction(fraction)
        capacity = int(fraction * total)  # as PyTorch works out allowed_memory_maximum
    before = cuda.memory_stats()
    live: dict[int, int] = {}
    result = Replay([], [], [], None, 0, 0, capacity)
    try:
        for index, event in enumerate(events):
            if len(event) == 2:
                try:
                    live[event[0]] = pointer = cuda.caching_allocator_alloc(event[1])
                except cuda.OutOfMemoryError:
                    result.oom_event = index
                    pointer = 0
            else:
                cuda.caching_allocator_delete(live.pop(event[0]))
                pointer = 0
            result.pointers.append(pointer)
            result.allocated.append(cuda.memory_allocated())
            result.reserved.append(cuda.memory_reserved())
            if result.oom_event is not None:
                break
        after = cuda.memory_stats()
        result.alloc_retries = int(after.get("num_alloc_retries", 0)) - int(before.get("num_alloc_retries", 0))
        result.ooms = int(after.get("num_ooms", 0)) - int(before.get("num_ooms", 0))
    finally:
        for pointer in live.values():
            cuda.caching_allocator_delete(pointer)
        cuda.empty_cache()
        if capacity_bytes is not None:
            cuda.set_per_process_memory_fraction(1.0)
    return result


class _DevicePlacement(Iterator[int]):
    """The address of the segment the simulation reserves next: where the device placed the
    block of the request being played. A new segment's first block is the one handed out, so
    where the device made one for that request this is its address, whatever it released
    first (a retry after freeing its cache); where it made none, the simulation has departed
    from it, and a segment placed there overlaps one it holds (``SimulationMisuse``)."""

    def __init__(self) -> None:
        self.current: int | None = None

    def __next__(self) -> int:
        if self.current is None:
            raise StopIteration
        return self.current


def simulated(
    events: Sequence[Event], settings: AllocatorSettings, capacity: int | None, device: Replay | None
) -> Replay:
    """``events`` through memopt's simulation; at the segment addresses of ``device``'s replay
    where given, else at its own."""
    placement = _DevicePlacement()
    allocator = CudaCachingAllocator(settings, capacity, segment_addresses=placement if device else ())
    result = Replay([], [], [], None, 0, 0, capacity)
    for index, event in enumerate(events):
        placement.current = None
        if device is not None and index < len(device.pointers) and device.pointers[index]:
            placement.current = device.pointers[index]
        pointer = 0
        try:
            if len(event) == 2:
                allocator.allocate(event[0], event[1])
                pointer = allocator.address(event[0])
            else:
                allocator.free(event[0])
        except CudaOutOfMemoryError:
            result.oom_event = index
        except SimulationMisuse:  # departed from the device so far that their segments overlap
            break
        result.pointers.append(pointer)
        result.allocated.append(allocator.allocated_bytes)
        result.reserved.append(allocator.reserved_bytes)
        if result.oom_event is not None:
            break
    result.alloc_retries, result.ooms = allocator.alloc_retries, allocator.ooms
    return result


@dataclass
class TraceCheck:
    """One trace: the device's figures against the simulation's, at the device's addresses and as shipped."""

    name: str
    kind: str
    alloc_conf: str
    events: int  # played on the device
    device_peak_reserved: int
    device_oom_event: int | None
    device_retries: int
    # At the device's addresses: events whose figures differ (must be none), the first of them;
    # and the allocations placed elsewhere than the device placed them (must be none too).
    exact_allocated_off: int
    exact_reserved_off: int
    exact_first_off: int | None
    exact_placed_off: int
    exact_oom_event: int | None
    exact_retries: int
    # As shipped, measured: the events whose figures differ, by how much at most, and the peaks.
    shipped_allocated_off: int
    shipped_allocated_most_off: int  # bytes, the largest difference over the events
    shipped_reserved_most_off: int
    shipped_reserved_beyond_a_segment: int  # events where it is more than the largest segment so far
    device_peak_allocated: int
    shipped_peak_allocated: int
    shipped_peak_reserved: int
    shipped_oom_event: int | None

    @property
    def exact(self) -> bool:
        return (
            self.exact_allocated_off == 0
            and self.exact_reserved_off == 0
            and self.exact_placed_off == 0
            and self.exact_oom_event == self.device_oom_event
            and self.exact_retries == self.device_retries
        )


def check(trace: Mapping[str, Any], device: Replay) -> TraceCheck:
    """``trace`` as the device played it against the simulation, both ways."""
    settings = AllocatorSettings.from_environment({ALLOC_CONF_VARIABLES[0]: trace["alloc_conf"]})
    events = trace["events"]
    exact = simulated(events, settings, device.capacity_bytes, device)
    shipped = simulated(events, settings, device.capacity_bytes, None)

    def off(mine: list[int], theirs: list[int]) -> list[int]:
        """The events where the figures differ (an event one side did not play counts)."""
        longest = max(len(mine), len(theirs))
        return [i for i in range(longest) if i >= len(mine) or i >= len(theirs) or mine[i] != theirs[i]]

    def most_off(mine: list[int], theirs: list[int]) -> int:
        return max((abs(a - b) for a, b in zip(mine, theirs)), default=0)

    allocated_off, reserved_off = off(exact.allocated, device.allocated), off(exact.reserved, device.reserved)
    segment, beyond = 0, 0
    for index, reserved in enumerate(device.reserved):
        segment = max(segment, reserved - (device.reserved[index - 1] if index else 0))
        beyond += index >= len(shipped.reserved) or abs(shipped.reserved[index] - reserved) > segment
    return TraceCheck(
        trace["name"],
        trace["kind"],
        trace["alloc_conf"],
        len(device.allocated),
        max(device.reserved, default=0),
        device.oom_event,
        device.alloc_retries,
        len(allocated_off),
        len(reserved_off),
        min(allocated_off + reserved_off, default=None),
        len(off(exact.pointers, device.pointers)),
        exact.oom_event,
        exact.alloc_retries,
        len(off(shipped.allocated, device.allocated)),
        most_off(shipped.allocated, device.allocated),
        most_off(shipped.reserved, device.reserved),
        beyond,
        max(device.allocated, default=0),
        max(shipped.allocated, default=0),
        max(shipped.reserved, default=0),
        shipped.oom_event,
    )


def groups(traces: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The traces by their ``PYTORCH_CUDA_ALLOC_CONF``, capped ones last (the cap is set per process)."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for trace in sorted(traces, key=lambda t: t["capacity_bytes"] is not None):
        found.setdefault(trace["alloc_conf"], []).append(trace)
    return found


def replay_group(cuda: CudaApi, traces: Sequence[Mapping[str, Any]]) -> list[Replay]:
    return [replay(cuda, trace["events"], trace["capacity_bytes"]) for trace in traces]


def load_traces(path: Path = TRACES) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as file:
        traces: list[dict[str, Any]] = json.load(file)["traces"]
    return traces


def report(checks: Sequence[TraceCheck], device: Mapping[str, Any], out: Path) -> bool:
    """``allocator_check.json`` and ``allocator_check.md`` under ``out``; whether every check held."""
    out.mkdir(parents=True, exist_ok=True)
    passed = all(c.exact for c in checks)
    (out / "allocator_check.json").write_text(
        json.dumps(
            {
                "device": dict(device),
                "passed": passed,
                "traces": [{**asdict(c), "exact": c.exact} for c in checks],
            },
            indent=1,
        )
    )
    mib = 1 << 20
    lines = [
        f"Device: {device.get('name', '?')}, torch {device.get('torch', '?')}, CUDA {device.get('cuda', '?')};"
        f" `python3 bench/gpu/check_allocator.py --out $OUT`, {device.get('seconds', 0):.0f} s.",
        "",
        "| trace | settings | events | device peak allocated / reserved | at the device's addresses"
        " | as shipped: allocated, most off | as shipped: reserved, most off | as shipped: peaks off | OOM at (device / sim) |",
        "| --- | --- | ---: | ---: | --- | --- | --- | ---: | --- |",
    ]
    for c in checks:
        exact = (
            "exact"
            if c.exact
            else f"off at {c.exact_allocated_off}/{c.exact_reserved_off} events from {c.exact_first_off},"
            f" {c.exact_placed_off} blocks placed elsewhere"
        )
        shipped_allocated = (
            "exact"
            if c.shipped_allocated_off == 0
            else f"{format_bytes(c.shipped_allocated_most_off)} ({c.shipped_allocated_off} events)"
        )
        beyond = (
            ""
            if c.shipped_reserved_beyond_a_segment == 0
            else f" ({c.shipped_reserved_beyond_a_segment} events beyond a segment)"
        )
        peaks = (
            f"{(c.shipped_peak_allocated - c.device_peak_allocated) / mib:+,.1f}"
            f" / {(c.shipped_peak_reserved - c.device_peak_reserved) / mib:+,.1f} MiB"
        )
        oom = (
            "-"
            if c.device_oom_event is None and c.exact_oom_event is None
            else f"{c.device_oom_event} / {c.exact_oom_event}"
        )
        lines.append(
            f"| {c.name} | {c.alloc_conf or 'defaults'} | {c.events}"
            f" | {c.device_peak_allocated / mib:,.1f} / {c.device_peak_reserved / mib:,.1f} MiB | {exact}"
            f" | {shipped_allocated} | {format_bytes(c.shipped_reserved_most_off)}{beyond} | {peaks} | {oom} |"
        )
    lines += [
        "",
        f"At the device's addresses, every trace exact: {'yes' if passed else 'NO'}.",
    ]
    (out / "allocator_check.md").write_text("\n".join(lines) + "\n")
    return passed


def _replay_on_device(alloc_conf: str, result_path: Path) -> None:
    """A child's part: the traces of ``alloc_conf`` replayed on the GPU (this process was started with it set)."""
    import torch  # only here: the parent needs none

    if not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device")
    traces = groups(load_traces())[alloc_conf]
    replays = replay_group(torch.cuda, traces)  # type: ignore[arg-type]
    device = {
        "name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "total_memory": torch.cuda.mem_get_info()[1],
    }
    result_path.write_text(json.dumps({"device": device, "replays": [asdict(r) for r in replays]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"))
    parser.add_argument("--replay", metavar="ALLOC_CONF", help=argparse.SUPPRESS)  # a child's part
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay is not None:
        _replay_on_device(args.replay, args.result)
        return
    started = time.monotonic()
    traces = load_traces()
    checks: list[TraceCheck] = []
    device: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for number, (alloc_conf, members) in enumerate(groups(traces).items()):
            result = Path(scratch) / f"group{number}.json"
            env = {**os.environ, ALLOC_CONF_VARIABLES[0]: alloc_conf}
            env.pop(ALLOC_CONF_VARIABLES[1], None)
            command = [sys.executable, __file__, "--replay", alloc_conf, "--result", str(result)]
            print(f"replaying {len(members)} trace(s) with {ALLOC_CONF_VARIABLES[0]}={alloc_conf!r}", flush=True)
            subprocess.run(command, env=env, check=True, timeout=CHILD_TIMEOUT_S)
            done = json.loads(result.read_text())
            device = done["device"]
            for trace, played in zip(members, done["replays"]):
                checks.append(check(trace, Replay(**played)))
                print(f"  {checks[-1].name}: exact at the device's addresses {checks[-1].exact}", flush=True)
    device["seconds"] = time.monotonic() - started
    passed = report(checks, device, args.out)
    print((args.out / "allocator_check.md").read_text())
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
