"""The memopt tune screen on the torch back end, driven with Textual's pilot over real plain-PyTorch
runs of a tiny GPT (no ORTModule): start-up, the auto-search to a verified policy, a toggle's
prediction, and the export line on quit."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import psutil
import pytest
from support.screens import screen_text, wait_for

from memopt.backends.torch.session import TorchTuner
from memopt.core import parse_runnable
from memopt.recompute import POLICY_ENV, RecomputePolicy
from memopt.run.budget import CPU_ALLOCATOR_ENV, Budget
from memopt.run.settings import RunSettings
from memopt.tui.app import TuneApp
from memopt.tui.widgets import PlansTable
from memopt.tune import Purpose, TuneSettings

pytestmark = pytest.mark.torch

SIZE = (130, 40)
# Eight tiny GPT blocks at 128 x 64 tokens: the activations well above the runtime's RSS, so a
# budget under the peak without recompute needs recompute, and the runs take seconds.
OPTIONS = {"size": "tiny", "seq_len": 64, "n_layer": 8}
BATCH = 128


def session(runs: Path, budget_mib: int) -> TorchTuner:
    run = RunSettings(target=parse_runnable("gpt"), options=OPTIONS, device="cpu", runs_dir=runs)
    budget = Budget(f"{budget_mib}MiB", bytes=budget_mib * 2**20)
    return TorchTuner(TuneSettings(run=run, target_batch=BATCH, budget=budget))


@pytest.mark.long
def test_the_screen_tunes_a_plain_pytorch_model_to_a_verified_policy(tmp_path: Path) -> None:
    tuner = session(tmp_path / "runs", 880)  # the peak without recompute is about 950 MiB

    async def scenario() -> TuneApp:
        app = TuneApp(tuner, auto=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.busy_since is not None, 30, "start-up progress")
            await wait_for(pilot, lambda: app.finished is not None, 300, "the scan, one run and the search")
            result = app.finished
            assert result.status == "verified", result.message
            assert [r.purpose for r in result.trials] == [Purpose.CALIBRATION, Purpose.SEARCH]
            assert result.best is not None and result.best.plans and result.best.peak_bytes <= tuner.limit_bytes
            table = app.query_one("#plans", PlansTable)
            assert table.row_count == len(tuner.rows()) > 0
            text = screen_text(app)
            assert "plain PyTorch · torch" in text and "verified" in text
            # A toggle predicts at once (no run, no play on fake tensors in the key press).
            before = tuner.predict(app.selection.plans).peak_bytes
            table.focus()
            await pilot.press("space")
            await pilot.pause(0.2)
            assert tuner.predict(app.selection.plans).peak_bytes != before
            await pilot.press("q")
            await wait_for(pilot, lambda: bool(app.exit_lines), 30, "the exit lines")
        return app

    app = asyncio.run(scenario())
    lines = app.exit_lines
    export = next(line for line in lines if line.startswith("export "))
    assignments = dict(word.split("=", 1) for word in shlex.split(export)[1:])
    assert assignments == {POLICY_ENV: assignments[POLICY_ENV], **CPU_ALLOCATOR_ENV}
    assert RecomputePolicy.read(Path(assignments[POLICY_ENV])).plans  # the verified policy's file
    assert lines[-1] == f"# journal: {tuner.journal.path}" and tuner.journal.path.is_file()


@pytest.mark.long
def test_x_cancels_the_verifying_run_and_leaves_no_process(tmp_path: Path) -> None:
    tuner = session(tmp_path / "runs", 880)

    async def scenario() -> TuneApp:
        app = TuneApp(tuner, auto=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "(search)" in app.busy_label, 300, "the verifying run to start")
            await pilot.pause(2)  # its child process is up
            await pilot.press("x")
            await wait_for(pilot, lambda: app.finished is not None, 60, "the search to end")
            assert app.finished.status == "cancelled", app.finished.message
            assert [r.outcome for r in app.finished.trials][-1] == "cancelled"
            await pilot.press("q")
            await wait_for(pilot, lambda: bool(app.exit_lines), 30, "the exit lines")
        return app

    app = asyncio.run(scenario())
    # The search had selected its choice: it is handed back, marked as not verified.
    assert app.exit_lines[0] == "# memopt tune: no verified config; your selection, NOT verified:"
    assert app.exit_lines[1].endswith("(NOT verified)") and app.exit_lines[2].startswith("export ")
    assert not psutil.Process().children(recursive=True)
