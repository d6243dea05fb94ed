"""``tune --frontier``'s result: a table per budget and the peers' on stdout (``--json``: one
document), and a plot of memory against step time (matplotlib, a PNG beside the journal).

The terminal UI does not show the frontier: ``--frontier`` runs without it.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from memopt.backends.torch.frontier import Frontier, inversions
from memopt.cli import console
from memopt.cli.tables import print_table
from memopt.run.files import replace_atomically

MIB = 2**20
# A plan's first layer index: ``blocks.3.mlp: gelu`` → ``3``.
_INDEX = re.compile(r"\.(\d+)(?=[.:])")

__all__ = ["compact", "default_plot_path", "print_frontier", "write_plot"]


def default_plot_path(journal: Path, label: str, batch: int) -> Path:
    """Beside the journal, named by the target, batch and time, so no earlier plot is replaced."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return journal.parent / f"frontier-{label}-b{batch}-{stamp}.png"


def print_frontier(frontier: Frontier, plot: Path | None, as_json: bool) -> None:
    if as_json:
        print(json.dumps(frontier.summary(plot), indent=2))
        return
    every = frontier.every_layer.step_s
    table = Table(title=f"memopt's frontier: {escape(frontier.target)} at batch {frontier.target_batch}")
    for header in ("budget MiB", "limit MiB", "peak MiB", "under limit", "step s", "vs every layer"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("memopt's policy, or the floor", min_width=40)
    for point in frontier.points:
        answer = point.answer
        budget, limit = _mib(point.budget_bytes), _mib(point.limit_bytes)
        if answer is None:
            table.add_row(budget, limit, "-", "-", "-", "-", escape(f"below the floor: {point.floor_line}"))
            continue
        step = f"{answer.step_s:.3f}" if answer.step_s is not None else "-"
        ratio = f"{answer.step_s / every:.2f}" if answer.step_s and every else "-"
        under = f"{point.under:.1%}" if point.under is not None else "-"
        table.add_row(budget, limit, _mib(answer.peak_bytes), under, step, ratio, escape(compact(answer.plans)))
    print_table(table)
    none = frontier.none
    peers = Table(title="measured once, at the same batch")
    for header in ("set-up", "peak MiB", "peak vs none", "step s", "step vs none"):
        peers.add_column(header, justify="left" if header == "set-up" else "right", no_wrap=True)
    peers.add_column("how", min_width=20)
    for peer in frontier.peers:
        peak_ratio = f"{peer.peak_bytes / none.peak_bytes:.2f}" if peer.peak_bytes and none.peak_bytes else "-"
        step_ratio = f"{peer.step_s / none.step_s:.2f}" if peer.step_s and none.step_s else "-"
        step = f"{peer.step_s:.3f}" if peer.step_s is not None else "-"
        peak = _mib(peer.peak_bytes) if peer.peak_bytes is not None else "-"
        peers.add_row(escape(peer.name), peak, peak_ratio, step, step_ratio, escape(peer.note))
    print_table(peers)
    lines = [f"# inversions: {inversions(frontier.points)} (lowering the budget never raised the answer's peak)"]
    if frontier.compile_note:
        lines.append(f"# {frontier.compile_note}")
    if plot is not None:
        lines.append(f"# plot: {plot}")
    lines.append(f"# journal: {frontier.journal}")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def write_plot(frontier: Frontier, path: Path) -> Path:
    """Memory against step time: memopt's answers as a line from the highest budget down, the peers
    as points, each budget's limit a dotted line. Never replaces a file."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no display
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 5))
    answered = [(p.answer.peak_bytes, p.answer.step_s) for p in frontier.points if p.answer and p.answer.step_s]
    axes.plot(
        [peak / MIB for peak, _ in answered],
        [step for _, step in answered],
        marker="o",
        label="memopt's verified policy, per budget",
    )
    for point in frontier.points:
        axes.axvline(point.limit_bytes / MIB, color="grey", linestyle=":", linewidth=0.8)
    for marker, peer in zip("sD^v<>", frontier.peers):
        if peer.peak_bytes is not None and peer.step_s is not None:
            axes.scatter([peer.peak_bytes / MIB], [peer.step_s], marker=marker, s=60, label=peer.name, zorder=3)
    axes.set_xlabel("peak memory, MiB (dotted: each budget's limit)")
    axes.set_ylabel("median step time, s")
    axes.set_title(f"{frontier.target} at batch {frontier.target_batch}")
    axes.legend(fontsize="small")
    figure.tight_layout()
    data = io.BytesIO()
    figure.savefig(data, format="png", dpi=110)
    pyplot.close(figure)
    return replace_atomically(path, data.getvalue(), overwrite=False)


def compact(plans: Sequence[str]) -> str:
    """Plans that differ only in their first layer index as one: ``blocks.{0-2,5}.mlp.fc: addmm``."""
    indices: dict[str, list[int]] = {}
    for plan in plans:
        found = _INDEX.search(plan)
        shape = plan if found is None else f"{plan[: found.start(1)]}{{}}{plan[found.end(1) :]}"
        indices.setdefault(shape, [])
        if found is not None:
            indices[shape].append(int(found.group(1)))
    return "; ".join(
        shape.replace("{}", _ranges(numbers), 1) if numbers else shape for shape, numbers in indices.items()
    ) or ("no recompute")


def _ranges(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return str(numbers[0])
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return "{" + ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) + "}"


def _mib(value: float) -> str:
    return f"{value / MIB:,.1f}"
