"""``tune --no-tui`` and the screen's auto-search drive one session of the same back end
(``Backend.tuning_session``): on the torch back end, the same trials, in the same order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.cli import memopt
from support.screens import wait_for

from memopt.backends.torch.session import TorchTuner
from memopt.core import parse_runnable
from memopt.run.budget import Budget
from memopt.run.settings import RunSettings
from memopt.tui.app import TuneApp
from memopt.tune import TuneSettings

# The screen tests' tiny eight-block GPT, at a budget below its peak without recompute.
OPTIONS = {"size": "tiny", "seq_len": 64, "n_layer": 8}
BATCH = 128
BUDGET_MIB = 880


@pytest.mark.torch
@pytest.mark.long
def test_no_tui_and_the_screens_auto_search_run_the_same_trials(tmp_path: Path) -> None:
    headless = memopt(
        "tune",
        "--backend",
        "torch",
        "gpt",
        "--size",
        "tiny",
        "--seq",
        "64",
        "-o",
        "n_layer=8",
        "--target-batch",
        str(BATCH),
        "--budget",
        f"{BUDGET_MIB}MiB",
        "--device",
        "cpu",
        "--no-tui",
        "--json",
        "--runs-dir",
        str(tmp_path / "no-tui"),
    )
    assert headless.returncode == 0, headless.stderr
    printed = [(t["batch"], t["plans"]) for t in json.loads(headless.stdout)["trials"]]

    run = RunSettings(target=parse_runnable("gpt"), options=OPTIONS, device="cpu", runs_dir=tmp_path / "screen")
    settings = TuneSettings(run=run, target_batch=BATCH, budget=Budget(f"{BUDGET_MIB}MiB", bytes=BUDGET_MIB * 2**20))
    tuner = TorchTuner(settings)

    async def scenario() -> TuneApp:
        app = TuneApp(tuner, auto=True)
        async with app.run_test(size=(130, 40)) as pilot:
            await wait_for(pilot, lambda: app.finished is not None, 300, "the scan, its runs and the search")
            await pilot.press("q")
        return app

    app = asyncio.run(scenario())
    assert app.finished is not None
    assert [(r.batch_size, list(r.plans)) for r in app.finished.trials] == printed
