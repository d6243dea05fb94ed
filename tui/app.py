"""``memopt tune``'s screen: a Textual app over a tuning session (``memopt.tune.session.TuningSession``:
ORT's ``Tuner`` or the torch back end's ``TorchTuner``).

Blocking work (probe, scan, calibration, trials) runs in thread workers; the tuner's events
come back as ``TunerEvent`` messages, so the screen stays live and shows progress. Keys:
space toggles a plan (the prediction updates at once), a auto-search, r run a trial of the
selection, x cancel the running trial, s sort, c copy, w save, q quit (kills a running
trial, keeps the journal; ``exit_lines`` are printed by the CLI after the screen closes).
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Static

from memopt.core.plan import PlanName
from memopt.errors import MemoptError, one_line
from memopt.tune.events import (
    Note,
    Purpose,
    Ready,
    SearchFinished,
    StageFinished,
    StageStarted,
    TrialFinished,
    TrialStarted,
    TuneEvent,
    TuneResult,
)
from memopt.tune.session import TuningSession
from memopt.tune.settings import TuneCancelled
from memopt.units import format_bytes

from .state import SORT_KEYS, Selection, exit_lines, short_plans, sort_rows
from .widgets import (
    InfoHeader,
    MemoryPanel,
    PlansTable,
    ResultBar,
    TrialsPanel,
)

__all__ = ["MIN_SIZE", "TuneApp", "TunerEvent"]

MIN_SIZE = (80, 24)


class TunerEvent(Message):
    """A tuner event, posted from the worker thread."""

    def __init__(self, event: TuneEvent) -> None:
        super().__init__()
        self.event = event


class TuneApp(App[None]):
    CSS_PATH = "tune.tcss"
    TITLE = "memopt tune"
    BINDINGS = [
        Binding("a", "auto", "Auto-search"),
        Binding("r", "run_trial", "Run trial"),
        Binding("x", "cancel_trial", "Cancel trial"),
        Binding("s", "sort", "Sort"),
        Binding("c", "copy", "Copy export"),
        Binding("w", "save", "Save config"),
        Binding("q", "quit_tuner", "Quit"),
    ]

    def __init__(self, tuner: TuningSession, *, auto: bool = True) -> None:
        super().__init__()
        self.tuner = tuner
        self.auto = auto
        self.selection = Selection()
        self.sort_index = 0
        self.exit_lines: list[str] = []
        self.error: str | None = None
        self.busy_since: float | None = None
        self.busy_label = ""
        self.searching = False
        self.finished: TuneResult | None = None  # the last search's result
        tuner.subscribe(self._from_worker)

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(
            f"The terminal is too small for memopt tune: make it at least {MIN_SIZE[0]}×{MIN_SIZE[1]}, "
            "or press q to quit.",
            id="too-small",
        )
        with Vertical(id="main"):
            yield InfoHeader(id="header")
            with Horizontal(id="top"):
                yield PlansTable(id="plans")
                yield MemoryPanel(id="memory")
            yield TrialsPanel(id="trials")
            yield ResultBar(id="result")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(InfoHeader).show_settings(self.tuner.settings)
        self.query_one("#plans").border_title = "Plans (space: toggle · s: sort)"
        self.query_one("#memory").border_title = "Memory"
        self.query_one("#trials").border_title = "Trials"
        self.query_one(ResultBar).show_best(None, [])
        self._check_size()
        self.set_interval(0.5, self._tick)
        if self.tuner.is_ready:
            assert self.tuner.ready is not None
            for record in self.tuner.records:  # a session set up before this screen: show its trials
                self.query_one(TrialsPanel).add_trial(record)
            self._show_ready(self.tuner.ready)
            self._show_best()
            if self.auto:
                self.action_auto()
        else:
            self._setup_worker()

    def on_resize(self) -> None:
        self._check_size()

    def _check_size(self) -> None:
        width, height = self.size
        self.screen.set_class(width < MIN_SIZE[0] or height < MIN_SIZE[1], "-too-small")

    # -- workers ----------------------------------------------------------------------------

    def _from_worker(self, event: TuneEvent) -> None:
        self.post_message(TunerEvent(event))

    @work(thread=True, exclusive=True, group="tuner")
    def _setup_worker(self) -> None:
        try:
            self.tuner.setup()
            if self.auto:
                self.tuner.auto_search()
        except TuneCancelled:
            pass
        except MemoptError as err:
            self.call_from_thread(self._failed, str(err))
        except Exception as err:
            self.call_from_thread(self._failed, one_line(err))

    @work(thread=True, exclusive=True, group="tuner")
    def _search_worker(self) -> None:
        try:
            self.tuner.auto_search()
        except Exception as err:
            self.call_from_thread(self._failed, one_line(err))
        finally:  # also when the search raised: the screen must accept new work
            self.call_from_thread(self._search_ended)

    def _search_ended(self) -> None:
        self.searching = False
        if self.busy_since is not None:  # the search neither finished nor failed visibly
            self._set_idle()

    @work(thread=True, exclusive=True, group="tuner")
    def _trial_worker(self, plans: tuple[PlanName, ...]) -> None:
        try:
            self.tuner.run_trial(plans, Purpose.MANUAL, "your selection")
        except TuneCancelled:
            pass
        except MemoptError as err:
            self.call_from_thread(self._failed, str(err))
        except Exception as err:
            self.call_from_thread(self._failed, one_line(err))
        finally:
            self.call_from_thread(self._set_idle)

    def _failed(self, message: str) -> None:
        self.searching = False
        self.error = message if not self.tuner.is_ready else None
        panel = self.query_one(TrialsPanel)
        panel.note(f"error: {message}", "bold red")
        panel.idle(f"error: {message}")
        self.busy_since = None

    def _set_idle(self) -> None:
        if not self.searching:
            self.busy_since = None
            self.query_one(TrialsPanel).idle("idle · a: auto-search · r: run a trial of your selection")

    @property
    def working(self) -> bool:
        return any(w.is_running for w in self.workers if w.group == "tuner")

    # -- tuner events -------------------------------------------------------------------------

    @on(TunerEvent)
    def _on_tuner_event(self, message: TunerEvent) -> None:
        event, panel = message.event, self.query_one(TrialsPanel)
        if isinstance(event, StageStarted):
            self._busy(event.message)
            panel.note(event.message)
        elif isinstance(event, StageFinished):
            panel.note(f"{event.stage}: {event.message} ({event.seconds:.1f} s)", "grey62")
        elif isinstance(event, Ready):
            self._show_ready(event)
        elif isinstance(event, TrialStarted):
            if event.purpose is Purpose.SEARCH:
                self.searching = True
                self.selection.set(event.plans)
                self._refresh_model()
            predicted = (
                f", predicted {format_bytes(event.predicted_bytes)}" if event.predicted_bytes is not None else ""
            )
            self._busy(
                f"trial {event.number} ({event.purpose}) at batch {event.batch_size}: "
                f"{short_plans(event.plans)}{predicted}"
            )
        elif isinstance(event, TrialFinished):
            panel.add_trial(event.record)
            style = (
                "green"
                if event.record.fits
                else ("grey62" if event.record.purpose is Purpose.CALIBRATION else "yellow")
            )
            panel.note(event.explanation, style)
            self._refresh_model()
            self._show_best()
        elif isinstance(event, Note):
            panel.note(event.message, "cyan")
        elif isinstance(event, SearchFinished):
            self.searching = False
            self.finished = event.result
            if event.result.best is not None:
                self.selection.set(event.result.best.plans)
            self._refresh_model()
            self._show_best()
            style = "bold green" if event.result.verified else "bold red"
            panel.note(f"search {event.result.status}: {event.result.message}", style)
            self.busy_since = None
            panel.idle(f"search {event.result.status.value.replace('_', ' ')} · q: quit and print the export line")

    def _busy(self, label: str) -> None:
        self.busy_since = time.monotonic()
        self.busy_label = label
        self.query_one(TrialsPanel).busy(label)

    def _tick(self) -> None:
        self._check_size()  # a terminal resized while busy, or a driver that sends no Resize to the app
        if self.busy_since is not None:
            self.query_one(TrialsPanel).busy(
                f"{self.busy_label} … {time.monotonic() - self.busy_since:.0f} s (x: cancel)"
            )

    def _show_ready(self, ready: Ready) -> None:
        self.query_one(InfoHeader).show_ready(ready)
        self._refresh_model()
        self.query_one(PlansTable).focus()
        if not self.auto:
            self._set_idle()

    def _refresh_model(self) -> None:
        if not self.tuner.is_ready:
            return
        rows = sort_rows(self.tuner.rows(), SORT_KEYS[self.sort_index][1])
        self.query_one(PlansTable).show(rows, self.selection)
        self._refresh_prediction()
        self.query_one(MemoryPanel).show_trials(self.tuner.records, self.tuner.budget_bytes)

    def _refresh_prediction(self) -> None:
        prediction = self.tuner.predict(self.selection.plans)
        self.query_one(MemoryPanel).show_prediction(
            prediction.peak_bytes,
            prediction.baseline_bytes,
            self.tuner.budget_bytes,
            self.tuner.limit_bytes,
            self.tuner.cost_of(self.selection.plans),
            len(self.selection.plans),
        )

    def _show_best(self) -> None:
        best = self.tuner.best()
        export = self.tuner.export_lines(best.plans) if best is not None else []
        self.query_one(ResultBar).show_best(best, export)

    # -- keys ------------------------------------------------------------------------------

    @on(PlansTable.Toggled)
    def _toggle(self, message: PlansTable.Toggled) -> None:
        self.selection.toggle(message.key)
        self._refresh_model()

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORT_KEYS)
        self.query_one("#plans").border_title = f"Plans by {SORT_KEYS[self.sort_index][0]} (space: toggle · s: sort)"
        self._refresh_model()

    def action_auto(self) -> None:
        if self.working:
            self.notify("busy: wait for the running work, or press x to cancel it", severity="warning")
            return
        self.tuner.reset_cancel()
        self.searching = True
        self._search_worker()

    def action_run_trial(self) -> None:
        if not self.tuner.is_ready:
            self.notify("still starting: wait for the calibration", severity="warning")
            return
        if self.working:
            self.notify("a trial is running: wait, or press x to cancel it", severity="warning")
            return
        self.tuner.reset_cancel()
        self._trial_worker(self.selection.plans)

    def action_cancel_trial(self) -> None:
        if self.working:
            self.tuner.cancel()
            self.query_one(TrialsPanel).note("cancelling: killing the running trial's child process", "yellow")

    def action_copy(self) -> None:
        lines = self._export_for_selection()
        if not lines:
            self.notify("nothing to copy: no plan selected and no verified config", severity="warning")
            return
        self.copy_to_clipboard("\n".join(lines))  # OSC 52: the terminal's clipboard, where it allows it
        self.query_one(TrialsPanel).note(
            "copied (OSC 52); if your terminal ignores it, copy this line: " + lines[0], "bold"
        )
        self.notify("export line sent to the clipboard (OSC 52); it is also in the trials log")

    def action_save(self) -> None:
        best = self.tuner.best()
        self._save_worker(best.plans if best is not None else self.selection.plans, best is not None)

    @work(thread=True, group="export")
    def _save_worker(self, plans: tuple[PlanName, ...], verified: bool) -> None:
        try:
            path = self.tuner.save_config(plans)
        except MemoptError as err:
            self.call_from_thread(self.notify, str(err), severity="error")
            return
        self.call_from_thread(self._saved, plans, verified, path)

    def _saved(self, plans: tuple[PlanName, ...], verified: bool, path: Path) -> None:
        self.query_one(TrialsPanel).note(
            f"saved {'verified' if verified else 'NOT verified'} config {short_plans(plans)} to {path}", "bold"
        )
        self.notify(f"saved to {path.name}")

    def _export_for_selection(self) -> list[str]:
        if not self.tuner.is_ready:
            return []
        best = self.tuner.best()
        if best is not None:
            return self.tuner.export_lines(best.plans)
        return self.tuner.export_lines(self.selection.plans) if self.selection.plans else []

    def action_quit_tuner(self) -> None:
        if self.working:
            self.tuner.cancel()  # kills the running trial's child; the journal keeps finished trials
        self._quit_worker(self.selection.plans)

    @work(thread=True, exclusive=True, group="export")
    def _quit_worker(self, selection: tuple[PlanName, ...]) -> None:
        try:
            lines = exit_lines(self.tuner, selection)
        except MemoptError as err:
            lines = [f"# memopt tune: cannot write the config: {err}", f"# journal: {self.tuner.journal.path}"]
        self.call_from_thread(self._exit_with, lines)

    def _exit_with(self, lines: list[str]) -> None:
        self.exit_lines = lines
        self.exit()
