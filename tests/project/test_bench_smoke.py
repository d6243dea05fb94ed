"""Smoke runs of the benchmark scripts at tiny size: they run and print their tables.

The benchmarks themselves (BENCHMARKS.md, `make bench`) are not tests; this only keeps the
scripts working. They are the `bench` marker's: `make test-bench` and `make test-all` run them,
`make test` and CI leave them out (12 minutes of a 2-core machine's time that guard no user-facing
behaviour).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

BENCH = Path(__file__).parents[2] / "bench"


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.ort
def test_scan_benchmark(tmp_path: Path) -> None:
    out = _run(
        str(BENCH / "bench_scan.py"),
        "--layers",
        "2",
        "--repeats",
        "1",
        "--ort-repeats",
        "1",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path),
    )
    assert "| 2 | 183 |" in out and "10/10 |" in out and (tmp_path / "scan_speed.png").is_file()


@pytest.mark.subprocess
def test_parse_benchmark() -> None:
    out = _run(str(BENCH / "bench_parse.py"), "--sizes", "1", "--repeats", "1")
    assert "| all samples |" in out and "| one run, long | 1 | 2 |" in out


@pytest.mark.subprocess
def test_fuzz_parse_benchmark() -> None:
    out = _run(str(BENCH / "bench_fuzz_parse.py"), "--mutants", "30", "--cli", "1")
    assert "| in-process (CliRunner; table, --json, --csv in turn) | 30 | 30 | 0 |" in out
    assert "| `python -m memopt parse`, nastiest 1 × 3 modes | 1 | 3 | 0 |" in out


@pytest.mark.subprocess
def test_parity_benchmark() -> None:
    assert "All: " in _run(str(BENCH / "bench_parity.py"))


@pytest.mark.ort
def test_command_benchmark(tmp_path: Path) -> None:
    out = _run(
        str(BENCH / "bench_command.py"), "--batch", "1", "--steps", "1", "--repeats", "1", "--runs-dir", str(tmp_path)
    )
    assert "| recipe (child process) |" in out and "| command: torchrun, 2 ranks |" in out


@pytest.mark.ort
def test_exhaustive_benchmark(tmp_path: Path) -> None:
    """Also runs bench_memory_model's tune step (memopt tune --no-tui) it builds on."""
    out = _run(
        str(BENCH / "bench_exhaustive.py"),
        *("--case", "gpt:tiny:32:4", "--fraction", "0.99", "--top", "1", "--steps", "2", "--rounds", "2"),
        *("--runs-dir", str(tmp_path)),
    )
    assert "| plans | peak MiB | fits | median step s |" in out and "tuner:" in out


@pytest.mark.ort
def test_recompute_cost_benchmark(tmp_path: Path) -> None:
    out = _run(
        str(BENCH / "bench_recompute_cost.py"),
        *("--cases", "gpt:tiny:32:4:n_layer=1", "--rounds", "2", "--each-plan", "--runs-dir", str(tmp_path)),
    )
    assert "| case | batch | config | estimated s | step increase s | ± s | error % | kernel increase s |" in out
    assert "recomputed nodes' kernel time: median" in out
    assert "configs measured no step-time increase" in out


@pytest.mark.ort
def test_planning_benchmark(tmp_path: Path) -> None:
    out = _run(
        str(BENCH / "bench_planning.py"),
        *("--cases", "gpt:n_layer=1", "--batch", "4", "--seq", "32", "--steps", "2", "--runs-dir", str(tmp_path)),
    )
    assert "| gpt n_layer=1 | this |" in out


@pytest.mark.ort
def test_tui_toggle_benchmark(tmp_path: Path) -> None:
    out = _run(
        str(BENCH / "bench_tui_toggle.py"),
        *("--target", "gpt", "-o", "n_layer=1", "--batch", "4", "--seq", "32", "--toggles", "2"),
        *("--runs-dir", str(tmp_path)),
    )
    assert "| off again (seen before) | 1 |" in out


@pytest.mark.subprocess
def test_predictions_snapshot(tmp_path: Path) -> None:
    graph = str(Path(__file__).parents[2] / "sample_logs" / "graphs" / "1.19.2" / "mlp.onnx")
    _run(str(BENCH / "predictions_snapshot.py"), graph, "--write", str(tmp_path / "mlp.json"))
    assert "1 graphs, 0 differences" in _run(
        str(BENCH / "predictions_snapshot.py"), graph, "--compare", str(tmp_path / "mlp.json")
    )


@pytest.mark.ort
def test_arena_pages_benchmark() -> None:
    out = _run(
        str(BENCH / "arena_pages.py"), "hf:llama", "-o", "size=tiny", "--batch", "2", "--seq", "16", "--steps", "2"
    )
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(lines) == 6 and all(" arena resident " in line and " outside it " in line for line in lines)
    assert " of     0.0 " not in lines[-1]  # ORT's log named the arena's regions


@pytest.mark.ort
def test_torchrun_leftovers_benchmark(tmp_path: Path) -> None:
    out = _run(str(BENCH / "bench_torchrun_leftovers.py"), "--trials", "1", "--runs-dir", str(tmp_path / "runs"))
    assert "| 1 | 0 | 0 |" in out


@pytest.mark.torch
def test_side_by_side_benchmark(tmp_path: Path) -> None:
    """All four set-ups at the smallest size: no recompute, HF checkpointing, compile's budget, memopt's tune."""
    out = _run(
        str(BENCH / "bench_side_by_side.py"),
        *("--cases", "gpt2:tiny:32:2", "--steps", "2", "--tune-steps", "1", "--runs-dir", str(tmp_path)),
    )
    for setup in ("no recompute", "HF gradient checkpointing, every layer", "torch.compile, activation_memory_budget"):
        assert f"| hf:gpt2 tiny, 2 × 32 | {setup} | " in out
    assert "| hf:gpt2 tiny, 2 × 32 | memopt tune's policy | " in out and "(tune: " in out
    assert "| hf:gpt2 tiny, 2 × 32 | budget | " in out


@pytest.mark.torch
def test_side_by_side_says_when_tune_gives_no_export_line(tmp_path: Path) -> None:
    """A budget no policy reaches (5% of the peak): memopt's row says so, where it once ended in a traceback."""
    out = _run(
        str(BENCH / "bench_side_by_side.py"),
        *("--cases", "gpt2:tiny:32:2", "--of-peak", "0.05", "--setups", "none,memopt"),
        *("--steps", "2", "--tune-steps", "1", "--runs-dir", str(tmp_path)),
    )
    assert "| hf:gpt2 tiny, 2 × 32 | memopt tune's policy | - | - |" in out and "no export line" in out
    assert "| hf:gpt2 tiny, 2 × 32 | budget | " in out and "0.05 × P0" in out


@pytest.mark.subprocess
def test_config_spreads_benchmark(tmp_path: Path) -> None:
    # A tune's journal as it writes one (the fields the script reads): three no-config runs and
    # two of one config at the target batch 8, one run at batch 4 that is no repeat of them.
    runs = [
        (4, [], 600),
        (8, [], 1000),
        (8, [], 1004),
        (8, [], 1010),
        (8, ["Gelu+:1:-1"], 900),
        (8, ["Gelu+:1:-1"], 915),
    ]
    lines = [
        json.dumps({"key": f"k{n}", "status": "ok", "batch_size": b, "config": c, "whole_run_peak_bytes": mib * 2**20})
        for n, (b, c, mib) in enumerate(runs)
    ]
    (tmp_path / "journal.jsonl").write_text("\n".join(lines) + "\n")
    out = _run(str(BENCH / "config_spreads.py"), str(tmp_path))
    assert " 1.49%    15.0 MiB  2 runs   1 plans" in out  # 15 MiB over the highest no-config run, 1,010
    assert "configs: 1 repeated, median 1.49%, at most 1.5% in 1, highest 1.49%" in out
    assert "no config: 1 repeated, median 0.99%" in out
