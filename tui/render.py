"""Rich renderables for the memory panel: the budget gauge and the chart of trials (no Textual)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from memopt.tune.events import Purpose, TrialRecord
from memopt.units import format_bytes

__all__ = ["gauge", "trials_chart"]


def _bar(value: float, scale: float, width: int, budget: float, style: str) -> Text:
    """A bar of ``value`` on ``scale`` with the budget line drawn as ``│``."""
    width = max(width, 4)
    filled = min(width, round(width * value / scale)) if scale > 0 else 0
    mark = min(width - 1, round(width * budget / scale)) if scale > 0 else width - 1
    text = Text()
    for column in range(width):
        if column == mark:
            text.append("│", style="bold yellow")
        elif column < filled:
            text.append("█", style=style)
        else:
            text.append("·", style="grey39")
    return text


def gauge(predicted: float, baseline: float, budget: float, limit: float, width: int) -> Text:
    """Predicted peak of the current selection against the budget (│), with the no-config peak."""
    scale = max(predicted, baseline, budget) * 1.05
    fits = predicted <= limit
    verdict, style = (
        ("fits", "bold green")
        if fits
        else (("tight: inside the safety margin", "bold yellow") if predicted <= budget else ("OVER", "bold red"))
    )
    text = Text()
    text.append("predicted ", style="bold")
    text.append(format_bytes(predicted), style=style)
    text.append(f" of budget {format_bytes(budget)} ", style="")
    text.append(verdict, style=style)
    text.append(f"  (no config {format_bytes(baseline)})\n", style="grey62")
    text.append_text(_bar(predicted, scale, width, budget, style.removeprefix("bold ")))
    return text


def trials_chart(records: Sequence[TrialRecord], budget: float, width: int) -> Table | Text:
    """One bar per trial: measured peak against the budget line, with step time (on CUDA the
    peak is what runs out: reserved + outside the allocator)."""
    shown = [r for r in records if r.peak_bytes][-8:]
    if not shown:
        return Text("no trials yet: measured peaks and step times appear here", style="grey62")
    peaks = [r.result.predicted_figure_bytes or 0 for r in shown]
    scale = max(max(peaks), budget) * 1.05
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column()
    table.add_column(justify="right")
    table.add_column(justify="right", style="cyan")
    bar_width = max(width - 26, 6)
    for record, peak in zip(shown, peaks):
        fits = peak <= budget
        style = "green" if fits else "red"
        if record.purpose is Purpose.CALIBRATION:
            style = "grey50"
        label = f"#{record.number}" + ("c" if record.purpose is Purpose.CALIBRATION else "")
        table.add_row(
            label,
            _bar(peak, scale, bar_width, budget, style),
            format_bytes(peak),
            f"{record.step_s:.2f}s" if record.step_s else "-",
        )
    return table
