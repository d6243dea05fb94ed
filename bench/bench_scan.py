"""Scan speed and parity: memopt's scan against ORT's own analysis, on graphs of growing size.

    .venv/bin/python bench/bench_scan.py [--layers 2 12 24 48 96] [--repeats 5] [--out bench/results]

For each depth it probes the built-in GPT (tiny width, ``-o n_layer=L``: the node count of
an L-layer GPT, widths kept small so the export is cheap; the scan's work depends on nodes,
not on widths), then times on the same graph:
  - memopt: reading the ONNX file, and the scan (analysis, savings, grouping);
  - ORT: building ORTModule's training session from the pre-session graph (graph
    optimizations included: what ORT must do before it can print its plans), and its
    memory-optimizer analysis alone (``get_serialized_ortmodule_memory_stat``).
It checks memopt's plans against ORT's for every graph and prints markdown tables, a
linear fit of scan time against node count, and writes scan_speed.png.
Parity against every release's real logs is in tests/backends/ort/scan/test_scan_releases.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from memopt.backends.ort.graph.ort_reference import ort_reference
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.scan import scan_graph
from memopt.graph.expr import parse_expression
from memopt.graph.polynomial import Polynomial


def probe_graph(layers: int, runs: Path) -> Path:
    """The run folder of a no-config probe of an ``layers``-deep tiny GPT (reused when present)."""
    folder = runs / f"L{layers}"
    existing = sorted(folder.glob("probe-*/onnx/memopt_execution_model_training.onnx"))
    if existing:
        return existing[-1].parent.parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "memopt",
            "probe",
            "gpt",
            "--size",
            "tiny",
            "-o",
            f"n_layer={layers}",
            "--batch",
            "2",
            "--steps",
            "1",
            "--runs-dir",
            str(folder),
        ],
        check=True,
        capture_output=True,
    )
    return sorted(folder.glob("probe-*/onnx/memopt_execution_model_training.onnx"))[-1].parent.parent


def timed(function, repeats: int) -> tuple[float, float, float, object]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times), max(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 12, 24, 48, 96])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ort-repeats", type=int, default=3)
    parser.add_argument("--runs", type=Path, default=Path("runs/bench_scan"))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rows = []
    for layers in args.layers:
        run = probe_graph(layers, args.runs)
        execution = run / "onnx" / "memopt_execution_model_training.onnx"
        pre_session = run / "onnx" / "memopt_optimized_training.onnx"
        load_s, load_min, load_max, graph = timed(lambda path=execution: load_graph(path), args.repeats)
        scan_s, scan_min, scan_max, report = timed(lambda g=graph: scan_graph(g, "1.19.2"), args.repeats)
        references = [ort_reference(pre_session, run / "ort_analysed.onnx") for _ in range(args.ort_repeats)]
        session_s = statistics.median(r.session_s for r in references)
        analysis_s = statistics.median(r.analysis_s for r in references)
        ort = references[0].plans
        ours = {p.key: p for p in report.patterns}
        agree = sum(
            key in ours
            and ours[key].frequency == frequency
            and ours[key].ort_matches(Polynomial.from_expression(parse_expression(saving)))
            for key, (saving, frequency) in ort.items()
        )
        rows.append(
            {
                "layers": layers,
                "nodes": len(graph.nodes),
                "load_s": load_s,
                "scan_s": scan_s,
                "scan_range": (scan_min, scan_max),
                "load_range": (load_min, load_max),
                "ort_session_s": session_s,
                "ort_analysis_s": analysis_s,
                "agree": agree,
                "ort_plans": len(ort),
                "extra": len(set(ours) - set(ort)),
            }
        )
        print(
            f"L={layers}: {len(graph.nodes)} nodes, scan {scan_s:.4f}s, ORT session {session_s:.3f}s", file=sys.stderr
        )

    nodes = np.array([r["nodes"] for r in rows], dtype=float)
    scan = np.array([r["scan_s"] for r in rows])
    slope, intercept = np.polyfit(nodes, scan, 1)
    predicted = slope * nodes + intercept
    r_squared = 1 - ((scan - predicted) ** 2).sum() / ((scan - scan.mean()) ** 2).sum()
    loglog = np.polyfit(np.log(nodes), np.log(scan), 1)[0]

    print(
        "| layers | nodes | memopt read ONNX (s) | memopt scan (s), median [min–max] | ORT session build (s) "
        "| ORT analysis alone (s) | scan ÷ ORT session | plans agreeing with ORT |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        low, high = r["scan_range"]
        extra = f" (+{r['extra']} extra)" if r["extra"] else ""
        print(
            f"| {r['layers']} | {r['nodes']} | {r['load_s']:.3f} | {r['scan_s']:.4f} [{low:.4f}–{high:.4f}] "
            f"| {r['ort_session_s']:.3f} | {r['ort_analysis_s']:.4f} | {r['scan_s'] / r['ort_session_s']:.2f} "
            f"| {r['agree']}/{r['ort_plans']}{extra} |"
        )
    print(
        f"\nLinear fit: scan_s = {slope * 1000:.4f} ms/node × nodes + {intercept * 1000:.2f} ms (R² = {r_squared:.4f}); "
        f"log-log slope {loglog:.2f} (1.0 = linear)."
    )

    figure, axis = plt.subplots(figsize=(7, 4.5))
    axis.plot(nodes, scan, "o-", label="memopt scan")
    axis.plot(nodes, [r["load_s"] for r in rows], "s--", label="memopt read ONNX")
    axis.plot(nodes, [r["ort_session_s"] for r in rows], "^-", label="ORT session build (before its plans)")
    axis.plot(nodes, predicted, ":", color="grey", label=f"linear fit ({slope * 1e6:.1f} µs/node)")
    axis.set_xlabel("training-graph nodes")
    axis.set_ylabel("seconds (median)")
    axis.set_title("Scan time vs graph size (tiny-width GPT, 2..96 layers)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(args.out / "scan_speed.png")


if __name__ == "__main__":
    main()
