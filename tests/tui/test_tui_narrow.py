"""The tune screen at the smallest size it is used at, 100×30, over the FAKE trial runner
(tests/support/fake_tuning.py: scripted peaks on a real ORT 1.19.2 training graph): the
plans table keeps every plan's saving and cost in view, the names give way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.fake_tuning import FakeRunner, fake_tuner, prepared_gpt
from support.screens import assert_snapshot, drawn_screen

from memopt.tui.app import TuneApp
from memopt.tui.state import plan_cells

pytestmark = pytest.mark.usefixtures("simulate_sample_once")


def test_plans_keep_their_saving_and_cost_at_100_columns(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    tuner = fake_tuner(tmp_path, runner, int(runner.peak(16, ())))
    tuner.setup()

    async def scenario() -> tuple[str, str]:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=(100, 30)) as pilot:
            svg, text = await drawn_screen(app, pilot)
            await pilot.press("q")
        return svg, text

    svg, text = asyncio.run(scenario())
    lines = text.splitlines()
    rows = tuner.rows()
    assert len(rows) >= 8
    for row in rows:
        state, saving, cost, *_ = plan_cells(row, False)
        assert any(f"{state} " in line and f" {saving} " in line and f" {cost}" in line for line in lines), (
            row.key,
            text,
        )
    assert_snapshot("tune_plans_100x30", svg, text)
