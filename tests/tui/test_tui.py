"""The memopt tune screen, driven with Textual's pilot over real CPU trials (tests/support/real_tuning.py)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
from support import real_tuning
from support.screens import assert_snapshot, drawn_screen, screen_text, wait_for

from memopt.backends.ort.config import ENV_VAR
from memopt.backends.ort.tune.tuner import Tuner
from memopt.tui.app import TuneApp
from memopt.tui.widgets import PlansTable

pytestmark = pytest.mark.ort  # real ORTModule runs or ORT sessions

SIZE = (130, 40)


@pytest.mark.long
def test_startup_then_auto_search_fits_a_budget_the_no_config_run_exceeds() -> None:
    tuner = real_tuning.tuner(fresh=True)

    async def scenario() -> TuneApp:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=SIZE) as pilot:
            # start-up shows progress, not a frozen screen
            await wait_for(pilot, lambda: app.busy_since is not None, 30, "start-up progress")
            assert "Exporting" in app.busy_label or "Calibrating" in app.busy_label or "trial" in app.busy_label
            await wait_for(pilot, lambda: tuner.is_ready, 240, "probe, scan and calibration")
            no_config, budget = await asyncio.to_thread(real_tuning.measured)
            tuner.set_budget(budget)
            await pilot.pause(0.2)
            assert budget < no_config  # the no-recompute run exceeds this budget
            await pilot.press("a")
            await wait_for(pilot, lambda: app.finished is not None, 480, "the auto-search and its repeats")
            result = app.finished
            assert result.status == "verified", result.message
            best = result.best
            assert best.fits and best.plans and best.peak_bytes <= budget
            search = [r for r in result.trials if r.purpose == "search"]
            assert 1 <= len({r.plans for r in search}) <= tuner.settings.max_trials  # repeats not counted
            table = app.query_one("#trials-table")
            assert table.row_count == len(result.trials)  # calibration and search trials, one row each
            assert "verified" in screen_text(app)
            await pilot.press("q")
        return app

    app = asyncio.run(scenario())
    lines = app.exit_lines
    exports = [line for line in lines if line.startswith(f"export {ENV_VAR}=")]
    assert len(exports) == 1, lines
    config_file = Path(exports[0].split("=", 1)[1])
    assert config_file.is_file() and config_file.suffix == ".json"
    assert lines[-1] == f"# journal: {tuner.journal.path}" and tuner.journal.path.is_file()


def _ready_tuner(*, fresh: bool = False) -> Tuner:
    """A session of the test's own (``real_tuning.tuner``), set up, at the measured budget."""
    tuner = real_tuning.tuner(fresh=fresh)
    tuner.setup()
    tuner.set_budget(real_tuning.measured()[1])
    return tuner


def test_space_toggles_a_plan_and_the_prediction_updates_at_once() -> None:
    tuner = _ready_tuner()

    async def scenario() -> None:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            table = app.query_one(PlansTable)
            gauge = app.query_one("#gauge")
            before = str(gauge.content)
            first = table.current_key
            assert first is not None and app.selection.plans == ()
            await pilot.press("space")
            assert app.selection.plans == (first,)
            after = str(gauge.content)
            assert after != before
            expected = tuner.predict([first]).peak_bytes
            assert f"{expected / 2**20:.1f} MiB" in after
            assert str(table.get_row(first)[0]).startswith("on")
            await pilot.press("down", "space")
            assert len(app.selection.plans) == 2
            await pilot.press("up", "space")  # off again
            assert first not in app.selection.plans
            await pilot.press("s")  # sort by cost: the selection survives
            assert len(app.selection.plans) == 1
            await pilot.press("q")

    asyncio.run(scenario())


def test_main_screen_snapshot() -> None:
    tuner = copy.copy(_ready_tuner(fresh=True))  # its calibration rows as run, not "(journal)"
    tuner._listeners = []
    tuner.records = [r for r in tuner.records if r.purpose == "calibration"]

    async def scenario() -> tuple[str, str]:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=SIZE) as pilot:
            svg, text = await drawn_screen(app, pilot)
            await pilot.press("q")
        return svg, text

    svg, text = asyncio.run(scenario())
    assert_snapshot("tune_main", svg, text)


def test_too_small_terminal_shows_a_readable_message() -> None:
    tuner = _ready_tuner()

    async def scenario() -> None:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=(60, 16)) as pilot:
            await pilot.pause(0.2)
            assert app.screen.has_class("-too-small")
            assert "too small" in screen_text(app)
            assert not app.query_one("#main").display or not app.query_one("#main").region.area
            await pilot.resize_terminal(*SIZE)
            await pilot.pause(0.8)
            assert not app.screen.has_class("-too-small")
            await pilot.press("q")

    asyncio.run(scenario())
