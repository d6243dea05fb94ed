"""Trials panel: a progress line while a trial runs, the table of trials, the search's one-line notes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, ProgressBar, RichLog, Static

from memopt.tune.events import TrialRecord

from ..state import trial_cells

__all__ = ["TrialsPanel"]

COLUMNS = ("#", "purpose", "batch", "config", "outcome", "peak", "predicted (err)", "step")


class TrialsPanel(Vertical):
    def compose(self) -> ComposeResult:
        with Horizontal(id="activity-row"):
            yield Static("idle", id="activity")
            yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="progress")
        yield DataTable(id="trials-table", cursor_type="row", zebra_stripes=True)
        yield RichLog(id="notes", wrap=True, markup=False, highlight=False, max_lines=500)

    def on_mount(self) -> None:
        table = self.query_one("#trials-table", DataTable)
        for column in COLUMNS:
            table.add_column(column, key=column)
        self.query_one("#progress", ProgressBar).display = False

    def busy(self, message: str) -> None:
        self.query_one("#activity", Static).update(Text(message, style="bold"))
        self.query_one("#progress", ProgressBar).display = True

    def idle(self, message: str = "idle") -> None:
        self.query_one("#activity", Static).update(Text(message))
        self.query_one("#progress", ProgressBar).display = False

    def add_trial(self, record: TrialRecord) -> None:
        cells = (Text(cell) for cell in trial_cells(record))  # never read as markup
        self.query_one("#trials-table", DataTable).add_row(*cells, key=str(record.number))

    def note(self, line: str, style: str = "") -> None:
        self.query_one("#notes", RichLog).write(Text(line, style=style))
