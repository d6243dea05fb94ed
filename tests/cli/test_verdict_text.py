"""The figures a verdict turns on print in MiB with a decimal, never rounded to GiB: budgets,
limits, predictions, and each rank's peak (a 1,150 MiB budget is not "1.1 GiB")."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console
from support.results import MiB, measured

from memopt.backends.ort import OrtVersion
from memopt.cli.show import print_trial
from memopt.core import parse_runnable
from memopt.tune import Purpose, Ready, TrialStarted, event_line


def test_the_ready_line_gives_the_budget_and_limit_in_mib() -> None:
    ready = Ready(
        target=parse_runnable("gpt"),
        options={},
        runtime=f"ORT {OrtVersion.parse('1.19.2')} (onnxruntime-training-cpu) · torch 2.4.1",
        device="CPU",
        budget_bytes=1150 * MiB,
        limit_bytes=1150 * MiB * 0.98,
        target_batch=8,
        rows=(),
        runs_dir=Path("runs"),
    )
    line = event_line(ready)
    assert "budget 1,150.0 MiB (limit 1,127.0 MiB)" in line and "GiB" not in line


def test_a_trial_starts_with_its_prediction_in_mib() -> None:
    started = TrialStarted(2, Purpose.SEARCH, 8, (), 1133.4 * MiB, "planner", 2, 600.0)
    assert event_line(started).endswith("no config, predicted 1,133.4 MiB…")


def test_each_ranks_peak_prints_in_mib() -> None:
    result = measured("k", 8, 1150, 1150, (1150, 1150), (1141, 1141), static_bytes=900 * MiB, budget_bytes=1150 * MiB)
    buffer = StringIO()
    print_trial(result, Console(file=buffer, width=400, color_system=None))
    text = buffer.getvalue()
    assert "ranks        0: 1,150.0 MiB, 1: 1,141.0 MiB" in text and "budget       1,150.0 MiB: within" in text
