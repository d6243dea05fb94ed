"""Memory panel: predicted peak of the current selection vs the budget, and the chart of trials."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from memopt.tune.events import TrialRecord

from ..render import gauge, trials_chart

__all__ = ["MemoryPanel"]


class MemoryPanel(Vertical):
    def compose(self) -> ComposeResult:
        yield Static("prediction appears once the model is calibrated", id="gauge")
        yield Static("", id="cost")
        yield Static("", id="chart")
        yield Static("step time per trial", id="spark-label")
        yield Sparkline([], id="steps")

    def show_prediction(
        self, predicted: float, baseline: float, budget: float, limit: float, cost_s: float, plans: int
    ) -> None:
        width = max(self.size.width - 4, 10)
        self.query_one("#gauge", Static).update(gauge(predicted, baseline, budget, limit, width))
        self.query_one("#cost", Static).update(f"{plans} plan(s) on · est. recompute cost {cost_s:.3f} s/step")

    def show_trials(self, records: Sequence[TrialRecord], budget: float) -> None:
        width = max(self.size.width - 4, 20)
        self.query_one("#chart", Static).update(trials_chart(records, budget, width))
        steps = [r.step_s for r in records if r.step_s]
        self.query_one("#steps", Sparkline).data = steps
