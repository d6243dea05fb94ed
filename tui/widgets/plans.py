"""Plans table: one row per ORT plan; space toggles, s cycles the sort column."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from memopt.core.plan import PlanName
from memopt.tune.events import PlanRow

from ..state import Selection, plan_cells

__all__ = ["PlansTable"]

COLUMNS = ("state", "saving", "cost", "pattern", "freq", "type", "where")


class PlansTable(DataTable[Text]):
    BINDINGS = [Binding("space", "toggle_plan", "Toggle plan", show=True)]

    class Toggled(Message):
        def __init__(self, key: PlanName) -> None:
            super().__init__()
            self.key = key

    def on_mount(self) -> None:
        self._names: dict[str, PlanName] = {}  # a row's key as the table keeps it -> the row's plan
        self.cursor_type = "row"
        self.zebra_stripes = True
        for column in COLUMNS:
            self.add_column(column, key=column)

    def show(self, rows: Sequence[PlanRow], selection: Selection) -> None:
        """Refill, keeping the cursor on the same plan."""
        current = self.current_key
        self.clear()
        self._names = {str(row.key): row.key for row in rows}
        for row in rows:
            # Text cells: a module or plan name is never read as markup.
            self.add_row(*(Text(cell) for cell in plan_cells(row, row.key in selection)), key=row.key)
        if current is not None and current in {r.key for r in rows}:
            self.move_cursor(row=self.get_row_index(current))

    @property
    def current_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:
            return None

    def action_toggle_plan(self) -> None:
        key = self.current_key
        if key is not None:
            # the table keeps a row's key as text: the row's own name (its back end's type) goes back
            self.post_message(self.Toggled(self._names[key]))
