"""bench/gpu/check_allocator.py, the GPU check, on CPU: its replay runs against a FAKE
``torch.cuda`` backed by memopt's own simulation (tests/support/fake_cuda.py), and the script
imports on a device image's packages (no onnx, onnxruntime, pydantic, textual, scipy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.fake_cuda import FakeCuda

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import check_allocator  # noqa: E402  (bench/gpu is no package)

from memopt.cuda_caching import AllocatorSettings  # noqa: E402

MiB = 1 << 20


def _device_checks(seed: int = 0) -> list[check_allocator.TraceCheck]:
    """Every trace replayed on a FAKE device per settings group, as the script's children do, and checked."""
    checks = []
    for alloc_conf, members in check_allocator.groups(check_allocator.load_traces()).items():
        replays = check_allocator.replay_group(FakeCuda(alloc_conf, seed=seed), members)
        checks += [check_allocator.check(trace, played) for trace, played in zip(members, replays)]
    return checks


def test_the_traces_cover_sample_steps_edge_sizes_settings_and_a_cap() -> None:
    traces = check_allocator.load_traces()
    kinds = {t["kind"] for t in traces}
    assert kinds == {"sample graph step", "random churn", "capped churn"}
    assert {t["alloc_conf"] for t in traces} == {"", "max_split_size_mb:64", "roundup_power2_divisions:4"}
    sizes = {e[1] for t in traces for e in t["events"] if len(e) == 2}
    assert {511, 512, 513, MiB - 1, MiB + 1, 10 * MiB - 1, 10 * MiB + 1, 20 * MiB - 1, 20 * MiB + 1} <= sizes
    # A trace frees only what it allocated, and only once.
    for trace in traces:
        live: set[int] = set()
        for event in trace["events"]:
            if len(event) == 2:
                assert event[0] not in live
                live.add(event[0])
            else:
                live.remove(event[0])


def test_on_a_fake_device_the_simulation_at_its_addresses_is_exact_and_the_cap_fires_where_simulated() -> None:
    checks = _device_checks()
    assert all(c.exact for c in checks), [c for c in checks if not c.exact]
    capped = next(c for c in checks if c.name == "capped churn (1 GiB)")
    assert capped.device_oom_event is not None and capped.device_oom_event == capped.events - 1
    # Under the other caps the allocator frees its cache (max_split_size_mb's oversize blocks
    # first) and goes on: the retries counted alike, nothing runs out.
    retried = [c for c in checks if c.name.startswith("capped churn, retried")]
    assert {c.alloc_conf for c in retried} == {"", "max_split_size_mb:64"}
    assert all(c.device_retries == c.exact_retries > 0 and c.device_oom_event is None for c in retried)
    # The traces of the sample graphs' steps are played whole, none running out.
    assert all(c.device_oom_event is None for c in checks if c.kind == "sample graph step")


def test_the_fake_devices_own_addresses_move_allocated_too_and_the_check_measures_it() -> None:
    # The fake places segments in no order: as shipped, the simulation takes another of two
    # equal free blocks, so other blocks merge, and a block later left with 1 MiB or less is
    # handed out whole: allocated departs as well as reserved. That is measured, not failed;
    # at the device's addresses every figure stays exact.
    checks = _device_checks(seed=1)
    assert all(c.exact for c in checks)
    churn = [c for c in checks if c.kind == "random churn"]
    assert all(c.shipped_allocated_off > 0 and c.shipped_allocated_most_off > 0 for c in churn)
    steps = [c for c in checks if c.kind == "sample graph step"]
    assert all(c.shipped_peak_reserved == c.device_peak_reserved for c in steps)


def test_a_simulation_that_misses_an_event_is_caught() -> None:
    # The device is run with max_split_size_mb:64 but the trace claims PyTorch's defaults: the
    # simulation at the device's addresses departs from it, and the check says where.
    (trace,) = [t for t in check_allocator.load_traces() if t["name"] == "max_split_size_mb:64 churn"]
    played = check_allocator.replay(FakeCuda("max_split_size_mb:64"), trace["events"], None)
    wrong = check_allocator.check({**trace, "alloc_conf": ""}, played)
    assert not wrong.exact and wrong.exact_first_off is not None


def test_a_segment_made_after_releasing_one_as_large_is_placed_where_the_device_put_it() -> None:
    # max_split_size_mb:20 under a 30 MiB cap: a's 20 MiB segment, once wholly free, is
    # oversize and serves b no more; its new segment passes the cap, so the cached one is
    # released first. What is reserved does not change, yet b's block lies in a new segment,
    # at the device's address: the simulation at the device's addresses puts it there too.
    trace = {"name": "release and remake", "kind": "capped churn", "alloc_conf": "max_split_size_mb:20"}
    events = [[0, 5 * MiB], [0], [1, 5 * MiB], [2, 5 * MiB]]
    played = check_allocator.replay(FakeCuda("max_split_size_mb:20", seed=3), events, 30 * MiB)
    assert played.reserved == [20 * MiB] * 4 and played.pointers[2] != played.pointers[0]
    checked = check_allocator.check({**trace, "events": events}, played)
    assert checked.exact and checked.exact_placed_off == 0


def test_the_report_is_a_json_and_a_markdown_table(tmp_path: Path) -> None:
    checks = _device_checks()
    device = {"name": "FAKE (memopt's simulation)", "torch": "-", "cuda": "-", "seconds": 0.0}
    passed = check_allocator.report(checks, device, tmp_path)
    data: dict[str, Any] = json.loads((tmp_path / "allocator_check.json").read_text())
    assert data["passed"] is passed is True and len(data["traces"]) == len(checks)
    table = (tmp_path / "allocator_check.md").read_text()
    assert "| hf-llama 64x512 | defaults |" in table


def test_the_simulation_plays_a_trace_as_the_allocator_counts_it() -> None:
    # 511 and 513 bytes round to 512 and 1024 in a 2 MiB small segment; 20 MiB + 1 rounds to
    # 20 MiB + 512 and gets a 22 MiB segment, split (2 MiB - 512 left is more than 1 MiB).
    events = [[0, 511], [1, 513], [0], [2, 20 * MiB + 1], [1], [2]]
    played = check_allocator.simulated(events, AllocatorSettings(), None, None)
    assert played.allocated == [512, 1536, 1024, 1024 + 20 * MiB + 512, 20 * MiB + 512, 0]
    assert played.reserved == [2 * MiB, 2 * MiB, 2 * MiB, 24 * MiB, 24 * MiB, 24 * MiB]


BLOCKED = ("onnx", "onnxruntime", "pydantic", "textual", "scipy", "psutil", "numba", "torch")


@pytest.mark.subprocess
def test_the_script_runs_without_the_packages_the_device_image_lacks(tmp_path: Path) -> None:
    # The parent process of the check: it imports none of them (torch only in its children).
    script = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is not on the device image")
sys.meta_path.insert(0, Refuse())
sys.path.insert(0, {str(ROOT / "bench" / "gpu")!r})
import check_allocator
traces = check_allocator.load_traces()
checks = [check_allocator.check(t, check_allocator.simulated(t["events"], check_allocator.AllocatorSettings.from_environment({{"PYTORCH_CUDA_ALLOC_CONF": t["alloc_conf"]}}), t["capacity_bytes"], None)) for t in traces]
print(check_allocator.report(checks, {{"name": "the simulation itself"}}, __import__("pathlib").Path({str(tmp_path)!r})))
print(sorted(m for m in sys.modules if m.split(".")[0] == "memopt"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    passed, modules = done.stdout.splitlines()
    assert passed == "True"
    assert modules == "['memopt', 'memopt.cuda_caching', 'memopt.errors', 'memopt.units']"


# What the device image lacks, made absent in a process (and its children) as a missing
# package is: ``import`` raises ModuleNotFoundError and ``importlib.util.find_spec`` says None.
ABSENT_ON_DEVICE = ("onnx", "onnxruntime", "pydantic", "pydantic_core", "textual", "scipy", "psutil")


def _as_on_the_device(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run with the packages the device image lacks made absent (imported, they fail)."""
    absent = tmp_path / "absent"
    absent.mkdir()
    (absent / "sitecustomize.py").write_text(
        f"import sys\nfor name in {ABSENT_ON_DEVICE!r}:\n    sys.modules[name] = None\n"
    )
    return subprocess.run(
        command, env={**os.environ, "PYTHONPATH": str(absent)}, capture_output=True, text=True, timeout=900
    )


@pytest.mark.torch
def test_the_plain_torch_check_runs_on_the_cpu_without_the_packages_the_device_image_lacks(tmp_path: Path) -> None:
    """bench/gpu/check_plain_torch.py end to end on this CPU (its one figure there is RSS: no
    CUDA figure is exercised), its parent and memopt's child processes without those packages."""
    script = ROOT / "bench" / "gpu" / "check_plain_torch.py"
    command = [sys.executable, str(script), "--device", "cpu", "--target-batch", "8", "--steps", "2"]
    done = _as_on_the_device([*command, "--out", str(tmp_path / "out")], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "plain_torch_check.json").read_text())
    assert [(run["batch"], run["status"]) for run in result["runs"]] == [(2, "ok"), (4, "ok")] + [(8, "ok")] * 4
    policies = [row["policy"] for row in result["rows"]]
    assert policies[:3] == ["no recompute", "blocks.*: *", "every op plan"] and len(policies) == 4
    assert {row["figure"] for row in result["rows"]} == {"rss"}
    assert (
        "| policy | figure | predicted (MiB) | measured (MiB) | error |"
        in (tmp_path / "out" / "plain_torch_check.md").read_text()
    )


@pytest.mark.torch
def test_the_offload_and_loss_check_runs_on_the_cpu_without_the_packages_the_device_image_lacks(tmp_path: Path) -> None:
    """bench/gpu/check_offload_and_loss.py on this CPU at a small size: offload moves nothing here
    and keeps gradients bitwise; the chunked loss keeps them within its tolerance and lowers the
    step's live bytes by about the logits. It checks the script and its imports, not CUDA."""
    script = ROOT / "bench" / "gpu" / "check_offload_and_loss.py"
    sizes = ["--width", "128", "--layers", "3", "--batch", "256", "--tokens", "512", "--repeats", "1"]
    done = _as_on_the_device([sys.executable, str(script), "--device", "cpu", *sizes, "--out", str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {
        (r["check"], r["variant"]): r for r in json.loads((tmp_path / "offload_loss_check.json").read_text())["rows"]
    }
    plain, offloaded = rows[("offload", "no policy")], rows[("offload", "blocks.*: offload")]
    assert offloaded["gradients"] == rows[("offload", "blocks.*: *")]["gradients"] == "bitwise"
    assert offloaded["peak_bytes"] == plain["peak_bytes"] and offloaded["predicted_saving_bytes"] == 0
    full, chunked = rows[("loss", "cross_entropy over the logits")], rows[("loss", "chunked_cross_entropy")]
    assert chunked["gradients"] == "within rtol 1e-5 / atol 1e-6"
    logits = 512 * 32_000 * 4
    assert full["peak_bytes"] - chunked["peak_bytes"] > logits
    assert "| check | variant | peak (MiB) |" in (tmp_path / "offload_loss_check.md").read_text()
