"""The TUI's domain state, free of widgets: selection, sorting, rows and lines to show.

Widgets render what this module computes; nothing here imports Textual.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memopt.core.plan import PlanName, plan_names
from memopt.core.trial import TrialResult
from memopt.tune.events import PlanRow, TrialRecord
from memopt.tune.session import TuningSession
from memopt.units import format_bytes, format_mib

__all__ = ["SORT_KEYS", "Selection", "exit_lines", "plan_cells", "short_plans", "sort_rows", "trial_cells"]

# (label shown in the table title, the key sort_rows sorts by)
SORT_KEYS: tuple[tuple[str, str], ...] = (
    ("saving", "saving"),
    ("cost", "cost"),
    ("frequency", "freq"),
    ("pattern", "name"),
)


@dataclass
class Selection:
    """The plans switched on in the table, in table order."""

    keys: list[PlanName] = field(default_factory=list)

    def toggle(self, key: PlanName) -> bool:
        """Switch ``key``; returns whether it is now on."""
        if key in self.keys:
            self.keys.remove(key)
            return False
        self.keys.append(key)
        return True

    def set(self, keys: Iterable[str]) -> None:
        self.keys = list(dict.fromkeys(plan_names(keys)))

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    @property
    def plans(self) -> tuple[PlanName, ...]:
        return tuple(self.keys)


def sort_rows(rows: Sequence[PlanRow], by: str) -> list[PlanRow]:
    if by == "cost":
        return sorted(rows, key=lambda r: (-r.cost_s, r.key))
    if by == "freq":
        return sorted(rows, key=lambda r: (-r.frequency, r.key))
    if by == "name":
        return sorted(rows, key=lambda r: r.key)
    return sorted(rows, key=lambda r: (-r.saving_bytes, r.key))


def short_plans(plans: Iterable[str]) -> str:
    return ", ".join(p.short for p in plan_names(plans)) or "no config"


def plan_cells(row: PlanRow, on: bool) -> tuple[str, ...]:
    """State, saving at the target batch, cost, pattern, frequency, type, where: what a choice
    rests on first, so a narrow panel cuts the names, never the figures."""
    state = ("on" if on else "off") + (f" ×{row.frequency}" if on and row.counts_honoured else (" (all)" if on else ""))
    return (
        state,
        format_bytes(row.saving_bytes),
        f"{row.cost_s:.3f} s",  # per step, in the unit the trials' step times are
        row.subgraph,
        str(row.frequency),
        row.kind,
        ", ".join(row.modules) or "-",
    )


def trial_cells(record: TrialRecord) -> tuple[str, ...]:
    """#, purpose, batch, config, outcome, peak, predicted (error), step time."""
    result = record.result
    predicted = "-"
    if record.predicted_bytes is not None:
        predicted = format_bytes(record.predicted_bytes)
        if record.prediction_error is not None:
            predicted += f" ({record.prediction_error * 100:+.1f}%)"
    outcome = record.outcome.label + (" (journal)" if result.reused else "")
    if record.left_off:  # its back end ignored these entries: they saved nothing
        outcome += f"; left {short_plans(record.left_off)} OFF"
    return (
        str(record.number),
        str(record.purpose),
        str(record.batch_size),
        short_plans(record.plans),
        outcome,
        _peak_cell(result),
        predicted,
        f"{result.median_step_s:.2f} s" if result.median_step_s else "-",
    )


def _peak_cell(result: TrialResult) -> str:
    """The trial's peak; for a job of several ranks, the highest rank's and how many there were.
    On CUDA what runs out, in its parts: reserved + outside the allocator, and allocated."""
    if not result.shown_peak_bytes:
        return "-"
    ranks = f" (max of {len(result.ranks)} ranks)" if len(result.ranks) > 1 else ""
    memory = result.memory
    if memory.on_cuda and result.memory.cuda_reserved_bytes is not None:
        edge = ", at the edge" if memory.at_the_edge else ""
        return (
            f"{format_bytes(memory.device_peak)} = {format_bytes(result.memory.cuda_reserved_bytes)} reserved"
            f" + {format_bytes(result.memory.cuda_outside_bytes or 0)} outside (alloc {format_bytes(result.memory.peak_bytes)}{edge})"
            + ranks
        )
    return format_bytes(result.shown_peak_bytes) + ranks


def exit_lines(tuner: TuningSession, selection: Sequence[PlanName]) -> list[str]:
    """What ``memopt tune`` prints on stdout after the screen closes; writes the config file
    the export line names (call it off the UI thread)."""
    lines: list[str] = []
    if tuner.is_ready:
        best = tuner.best()
        if best is not None:
            lines.append(
                f"# memopt tune: verified at batch {best.batch_size} (trial {best.number}, peak "
                f"{format_mib(best.peak_bytes)}, {best.step_s or 0:.2f} s/step): {short_plans(best.plans)}"
            )
            tuner.write_export_file(best.plans)
            lines += tuner.export_lines(best.plans)
        elif selection:
            lines.append("# memopt tune: no verified config; your selection, NOT verified:")
            tuner.write_export_file(selection)
            lines += tuner.export_lines(selection)
        else:
            lines.append("# memopt tune: no verified config")
    lines.append(f"# journal: {tuner.journal.path}")
    return lines
