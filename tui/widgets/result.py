"""Result bar: the best verified config and how to take it away."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from memopt.tune.events import TrialRecord
from memopt.units import format_bytes

from ..state import short_plans

__all__ = ["ResultBar"]


class ResultBar(Static):
    def show_best(self, best: TrialRecord | None, export: list[str]) -> None:
        if best is None:
            self.update(
                Text("no verified config yet · a: auto-search · r: run a trial of your selection", style="grey62")
            )
            return
        text = Text.assemble(
            ("verified ", "bold green"),
            f"trial {best.number}: {short_plans(best.plans)} · peak ",
            (format_bytes(best.peak_bytes), "bold"),
            f" · {best.step_s or 0:.2f} s/step",
            "\n",
            (export[0] if export else "", "bold"),
        )
        self.update(text)
