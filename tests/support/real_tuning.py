"""Tuning sessions over real CPU trials, for test_tui.py and test_tune.py.

The recipe is tests/recipes/wide_gpt.py with 2 layers and 128 tokens: at batch 16 its
activations are large enough that recompute lowers the CPU peak RSS by tens of MiB, and a
trial takes seconds. The budget is measured, not guessed: halfway between the peaks of a
no-config and an every-plan trial at the target batch, run in their own folder (the tuner
never sees them), so it holds against the machine's noise. The model is calibrated at half
and all of the target batch, so it interpolates rather than extrapolates.

Each test gets a session of its own (``tuner()``), in one runs folder per pytest process: a
session resumes the journal, so the calibration trials an earlier one ran come back from it,
unless it is ``fresh``. What the tests share is never changed: the folder's path, the probe
and scan (``prepared()``, a frozen record the sessions only read) and the measured budget.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from memopt.backends.ort.calibrate import ScannedGraph
from memopt.backends.ort.trials import TrialSpec, parse_trial_config, run_trial
from memopt.backends.ort.tune.tuner import Tuner
from memopt.core import parse_runnable
from memopt.run import RunSettings
from memopt.run.budget import parse_budget
from memopt.tune import OrtTuneSettings, TuneSettings

RECIPE = str(Path(__file__).resolve().parent.parent / "recipes" / "wide_gpt.py")
OPTIONS = {"n_layer": 2, "seq_len": 128}
TARGET = 16
STEPS = 1
CALIBRATION = (TARGET // 2, TARGET)
PLACEHOLDER_BUDGET = "64GiB"  # replaced by the measured one (Tuner.set_budget)


@functools.cache
def work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="memopt-tune-tests-"))


def recipe_run_settings(runs_dir: Path) -> RunSettings:
    """How the tests' runs of the recipe go."""
    return RunSettings(target=parse_runnable(RECIPE), options=OPTIONS, steps=STEPS, timeout_s=300, runs_dir=runs_dir)


def settings(budget: str = PLACEHOLDER_BUDGET, *, resume: bool = True) -> TuneSettings:
    return TuneSettings(
        run=recipe_run_settings(work_dir() / "tune"),
        target_batch=TARGET,
        budget=parse_budget(budget),
        max_trials=4,
        margin=0.01,
        ort=OrtTuneSettings(calibration_batches=CALIBRATION),
        resume=resume,
    )


@functools.cache
def prepared() -> ScannedGraph:
    """The recipe's probe and scan, from the first session set up in the shared folder (which
    leaves its calibration trials in the journal for the sessions after it)."""
    session = Tuner(settings())
    session.setup()
    assert session.prepared is not None
    return session.prepared


def tuner(*, fresh: bool = False) -> Tuner:
    """A new session in the shared folder, not set up yet. A ``fresh`` one probes the recipe and
    runs its calibration trials itself, as ``memopt tune`` starts without --resume; the others
    take the shared probe and the calibration trials an earlier session left in the journal."""
    if fresh:
        return Tuner(settings(resume=False))
    shared = prepared()
    return Tuner(settings(), prepare=lambda cancel: shared)


@functools.cache
def measured() -> tuple[int, int]:
    """(no-config peak at the target batch, a budget halfway to the every-plan peak), in bytes.

    Measured on this machine (CPU, ORT 1.19.2): recompute of the MLP and attention plans
    lowers this recipe's peak by ~30-45 MiB at batch 16, so the budget is reachable but
    only with recompute.
    """
    target = prepared()
    ort = target.ort_version
    every_plan = parse_trial_config(",".join(p.key for p in target.report.patterns), ort).entries
    peaks = []
    for config in ((), tuple(every_plan)):
        result = run_trial(
            TrialSpec(recipe_run_settings(work_dir() / "measure"), TARGET, config), work_dir() / "measure"
        )
        assert result.fits and result.memory.peak_bytes, (result.outcome, result.error)
        peaks.append(int(result.memory.peak_bytes))
    no_config, with_every_plan = peaks
    assert with_every_plan < no_config, peaks
    return no_config, (no_config + with_every_plan) // 2
