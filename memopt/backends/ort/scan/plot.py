"""Pictures of a scan: what each plan saves, and stashed activations against batch size."""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from memopt.backends.ort.graph.sizes import batch_symbols
from memopt.backends.ort.scan import ScanReport

__all__ = ["plot_scan", "PLOTTED_PLANS"]

PLOTTED_PLANS = 6  # plans drawn one by one in the batch sweep; the rest only in "all plans"
_MIB = 2**20


def plot_scan(report: ScanReport, dims: Mapping[str, int], image_format: str) -> bytes:
    """A PNG or SVG image (``image_format`` ``"png"`` or ``"svg"``): savings per plan at
    ``dims``, and the batch sweep around them. The caller writes it where it belongs."""
    batch = batch_symbols(report.inputs)
    figure, (bars, sweep) = plt.subplots(1, 2, figsize=(14, max(4.0, 0.4 * len(report.patterns) + 1.5)))
    ranked = sorted(report.patterns, key=lambda p: p.exact.evaluate(dims))
    bars.barh(
        [p.key for p in ranked],
        [p.exact.evaluate(dims) / _MIB for p in ranked],
        color="tab:blue",
        label="exact (every stashed output)",
    )
    bars.scatter(
        [p.ort.evaluate(dims) / _MIB for p in ranked],
        [p.key for p in ranked],
        color="tab:orange",
        zorder=3,
        label="as ORT prints it",
    )
    bars.set_xlabel("activation memory saved (MiB)")
    bars.set_title("Saving per plan at " + ", ".join(f"{k}={v}" for k, v in sorted(dims.items())))
    bars.legend(loc="lower right")
    bars.tick_params(axis="y", labelsize=8)

    current = dims[batch[0]] if batch else 1
    sizes = list(range(1, max(2 * current, 8) + 1))
    at = [{**dims, **{symbol: size for symbol in batch}} for size in sizes]
    baseline = [report.stashed.evaluate(d) / _MIB for d in at]
    sweep.plot(sizes, baseline, color="black", linewidth=2, label="no recompute")
    for pattern in sorted(report.patterns, key=lambda p: -p.exact.evaluate(dims))[:PLOTTED_PLANS]:
        sweep.plot(
            sizes,
            [b - pattern.exact.evaluate(d) / _MIB for b, d in zip(baseline, at)],
            linewidth=1,
            label=f"{pattern.key} alone",
        )
    sweep.plot(
        sizes,
        [b - _best_per_node(report, d) / _MIB for b, d in zip(baseline, at)],
        color="tab:green",
        linewidth=2,
        linestyle="--",
        label="all plans",
    )
    sweep.axvline(current, color="grey", linestyle=":")
    sweep.set_xlabel(f"batch size ({', '.join(batch) or 'no batch dim'})")
    sweep.set_ylabel("stashed activations (MiB)")
    sweep.set_title("Stashed activations vs batch size")
    sweep.legend(fontsize=7)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format=image_format)
    plt.close(figure)
    return image.getvalue()


def _best_per_node(report: ScanReport, dims: Mapping[str, int]) -> float:
    """The saving of every plan at once: one plan per node, the larger when a node has two."""
    best: dict[str, float] = {}
    for pattern in report.patterns:
        for occurrence in pattern.occurrences:
            value = occurrence.exact.evaluate(dims)
            best[occurrence.entry] = max(best.get(occurrence.entry, 0.0), value)
    return sum(best.values())
