"""Header: model, ORT/torch versions, device, budget, target batch."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from memopt.tune.events import Ready
from memopt.tune.settings import TuneSettings
from memopt.units import format_bytes

__all__ = ["InfoHeader"]


class InfoHeader(Static):
    def show_settings(self, settings: TuneSettings) -> None:
        options = ", ".join(f"{k}={v}" for k, v in settings.run.options.items())
        budget = settings.budget.text if settings.budget else "device memory − 10%"
        text = Text.assemble(
            ("memopt tune  ", "bold"),
            (str(settings.run.target), "bold cyan"),
            (f" ({options})" if options else "", "cyan"),
            f"   target batch {settings.target_batch}   budget {budget}   ",
            ("starting…", "italic"),
        )
        self.update(text)

    def show_ready(self, ready: Ready) -> None:
        options = ", ".join(f"{k}={v}" for k, v in ready.options.items())
        text = Text.assemble(
            ("memopt tune  ", "bold"),
            (str(ready.target), "bold cyan"),
            (f" ({options})" if options else "", "cyan"),
            "\n",
            ready.runtime,
            " · ",
            (ready.device, "bold"),
            " · target batch ",
            (str(ready.target_batch), "bold"),
            " · budget ",
            (format_bytes(ready.budget_bytes), "bold yellow"),
        )
        self.update(text)
