"""``memopt tune``: from "OOM at the batch I need" to a verified recompute config: an
ORTMODULE_MEMORY_OPT_CONFIG for ORTModule, or a recompute policy for plain PyTorch.

The TUI (``memopt.tui``) by default; ``--no-tui`` runs the same session of the same back end
(``Backend.tuning_session``: ORT's ``Tuner``, plain PyTorch's ``TorchTuner``) with its events printed
as plain lines on stderr and the result (``--json``: a JSON document) on stdout.
Either way the ``export …`` line(s) of the best verified config end up on stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from memopt.backends import BackendName, choose_backend
from memopt.backends.ort.tune.tuner import Tuner
from memopt.cli import EXIT_DOES_NOT_FIT, app
from memopt.cli.carry_over import carry_over_to_torch
from memopt.cli.options import (
    BackendOption,
    BudgetOption,
    CalibrateOption,
    CommandOption,
    DeviceOption,
    HfTaskOption,
    MarginOption,
    OptionalRecipeArgument,
    OptionPairs,
    PythonOption,
    RunOptions,
    RunsDirOption,
    SeqOption,
    SizeOption,
    StepsOption,
    TargetBatchOption,
    TargetOptions,
    TargetSeqOption,
    TimeoutOption,
    calibration_batches,
    checked_count,
    choose_target,
    run_settings,
)
from memopt.cli.progress import CommandProgress
from memopt.cli.show import say, stdout_kept_for_the_result
from memopt.core import runnable
from memopt.errors import MemoptError
from memopt.pipeline.carry_over import exportable, torch_side
from memopt.predict import DEFAULT_MARGIN
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S, parse_budget
from memopt.run.files import check_write_target
from memopt.tune import DEFAULT_MAX_TRIALS, DEFAULT_REPEATS, OrtTuneSettings, TuneEvent, TuneSettings, event_line
from memopt.tune.session import TuningSession

__all__ = ["tune_command", "print_event"]


@app.command("tune")
def tune_command(
    target_batch: TargetBatchOption,
    recipe: OptionalRecipeArgument = None,
    command: CommandOption = None,
    budget: BudgetOption = None,
    max_trials: int = typer.Option(
        DEFAULT_MAX_TRIALS,
        "--max-trials",
        callback=checked_count,
        help="Most search trials at the target batch (calibration trials and repeats not counted).",
    ),
    repeats: int = typer.Option(
        DEFAULT_REPEATS,
        "--repeats",
        callback=checked_count,
        help="Runs of a config before it is verified: their highest peak must clear the limit by more than their spread.",
    ),
    steps: StepsOption = DEFAULT_STEPS,
    resume: bool = typer.Option(
        False, "--resume", help="Reuse finished trials of a previous session from the journal in --runs-dir."
    ),
    no_tui: bool = typer.Option(False, "--no-tui", help="No terminal UI: plain progress on stderr, result on stdout."),
    as_json: bool = typer.Option(False, "--json", help="With --no-tui: print the result as JSON."),
    manual: bool = typer.Option(
        False, "--manual", help="TUI: do not start the auto-search; toggle plans and run trials yourself."
    ),
    seq: SeqOption = None,
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    hf_task: HfTaskOption = None,
    target_seq: TargetSeqOption = None,
    device: DeviceOption = "auto",
    margin: MarginOption = DEFAULT_MARGIN,
    calibrate_at: CalibrateOption = None,
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    python: PythonOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    backend: BackendOption = None,
    export_torch: bool = typer.Option(
        False,
        "--export-torch",
        help="Once verified, carry the ORT config over to plain PyTorch and verify it there (as memopt export --torch).",
    ),
    frontier: bool = typer.Option(
        False,
        "--frontier",
        help="torch: verify memopt's policy at budgets from the no-recompute peak down to the floor, beside no "
        "recompute, every layer checkpointed and torch.compile; a table and a PNG (no TUI).",
    ),
    frontier_points: int | None = typer.Option(
        None, "--frontier-points", callback=checked_count, help="--frontier: how many budgets (default 7, at least 2)."
    ),
    frontier_plot: Path | None = typer.Option(
        None, "--frontier-plot", help="--frontier: the PNG to write (default: beside the journal); never replaced."
    ),
    frontier_compile: str | None = typer.Option(
        None,
        "--frontier-compile",
        help="--frontier: also torch.compile at these activation_memory_budget fractions, e.g. 1,0.5 "
        "(compile's knob is a fraction, not bytes; on CPU each run compiles for minutes).",
    ),
) -> None:
    """Find and verify the cheapest recompute config (ORT) or policy (torch) that fits --target-batch in --budget.

    Prints the export line to paste before your training command: ORTMODULE_MEMORY_OPT_CONFIG
    for ORTModule, MEMOPT_RECOMPUTE_POLICY for a script that calls memopt.recompute.apply.
    """
    if as_json and not no_tui and not frontier:  # --frontier runs without the screen
        raise MemoptError("--json needs --no-tui")
    if manual and no_tui:
        raise MemoptError("--manual is the TUI's: without it (--no-tui) the search runs by itself; choose one")
    if not frontier and (frontier_points is not None or frontier_plot is not None or frontier_compile is not None):
        raise MemoptError("--frontier-points, --frontier-plot and --frontier-compile go with --frontier")
    compile_budgets = _fractions(frontier_compile) if frontier_compile is not None else ()
    chosen_backend = choose_backend(backend)
    if frontier:
        _check_frontier(chosen_backend.name, budget, manual, export_torch, frontier_points, frontier_plot)
    target = runnable(choose_target(recipe, command))
    if export_torch and chosen_backend.name is not BackendName.ORT:
        raise MemoptError(
            f"--export-torch carries an ORT config over, and the {chosen_backend.name.value} back end "
            f"({chosen_backend.line()}) already ends with the {chosen_backend.name.value} policy"
        )
    chosen_backend.backend.prepare()
    if export_torch:
        if as_json:
            raise MemoptError("--export-torch prints the carried-over policy's lines after tune's: drop --json")
        exportable(target, "tune --export-torch")
    run = run_settings(
        target,
        target_batch,
        TargetOptions(seq, size, option, hf_task, target_seq),
        RunOptions(steps, device, timeout, python, runs_dir),
    )
    parsed_budget = parse_budget(budget) if budget is not None else None
    if export_torch:
        torch_side(run, parsed_budget)  # what the carry-over would refuse, refused before the tune
    settings = TuneSettings(
        run=run,
        target_batch=target_batch,
        budget=parsed_budget,
        max_trials=max_trials,
        repeats=repeats,
        resume=resume,
        margin=margin,
        ort=OrtTuneSettings(calibration_batches=calibration_batches(calibrate_at)),
    )
    progress = CommandProgress(chosen_backend.line())
    if frontier:
        session = chosen_backend.backend.tuning_session(settings, progress, on_event=print_event)
        _frontier(session, frontier_points, frontier_plot, compile_budgets, as_json)
        return
    # A stack, device or budget the back end refuses is refused here, not on the screen once it is open.
    if not no_tui:
        _needs_terminal()
    session = chosen_backend.backend.tuning_session(settings, progress, on_event=print_event if no_tui else None)
    carry_over = _carry_over_to_torch(recipe or "") if export_torch else None
    if no_tui:
        _headless(session, as_json, carry_over)
        return
    _show(session, manual)
    if carry_over is not None and not carry_over(session):
        sys.exit(EXIT_DOES_NOT_FIT)


def _check_frontier(
    backend: BackendName, budget: str | None, manual: bool, export_torch: bool, points: int | None, plot: Path | None
) -> None:
    """What ``--frontier`` refuses, before anything runs."""
    if backend is not BackendName.TORCH:
        raise MemoptError("--frontier walks the torch back end's budgets: add --backend torch")
    if budget is not None:
        raise MemoptError(
            "--frontier walks its own budgets, from the no-recompute peak down to the floor: drop --budget"
        )
    if manual or export_torch:
        raise MemoptError("--frontier runs by itself, without the TUI: drop --manual and --export-torch")
    if points is not None and points < 2:
        raise MemoptError(f"--frontier-points must be at least 2, not {points}")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise MemoptError(f"--frontier-plot {plot}: the plot is a PNG; name a .png file")
        if plot.exists() or plot.is_symlink():
            raise MemoptError(f"--frontier-plot {plot} exists; memopt never replaces a file: name a new one")
        check_write_target(plot, overwrite=False)


def _fractions(text: str) -> tuple[float, ...]:
    """``--frontier-compile``'s fractions, each in [0, 1]."""
    try:
        fractions = tuple(float(word) for word in text.split(","))
    except ValueError:
        fractions = ()
    if not fractions or not all(0 <= f <= 1 for f in fractions):
        raise MemoptError(f"--frontier-compile {text!r}: give fractions in [0, 1] separated by commas, e.g. 1,0.5")
    return fractions


def _frontier(
    session: TuningSession, points: int | None, plot: Path | None, compile_budgets: tuple[float, ...], as_json: bool
) -> None:
    """``--frontier``: the walk, its table (or JSON) on stdout and its plot."""
    from memopt.backends.torch.frontier import DEFAULT_POINTS, walk_frontier
    from memopt.backends.torch.session import TorchTuner
    from memopt.cli.frontier import default_plot_path, print_frontier, write_plot

    assert isinstance(session, TorchTuner)  # --frontier is refused on any other back end
    try:
        with stdout_kept_for_the_result():
            walked = walk_frontier(session, points or DEFAULT_POINTS, say, compile_budgets)
            settings = session.settings
            path = plot or default_plot_path(session.journal.path, settings.run.target.label, settings.target_batch)
            written = write_plot(walked, path)
    except KeyboardInterrupt:
        session.cancel()
        raise
    print_frontier(walked, written.resolve(), as_json)
    if not walked.verified:
        sys.exit(EXIT_DOES_NOT_FIT)


def _needs_terminal() -> None:
    if not sys.stderr.isatty() or not sys.stdin.isatty():
        raise MemoptError("the tuner's screen needs a terminal; use --no-tui for scripts and CI")


def _show(tuner: TuningSession, manual: bool) -> None:
    """The tuner's screen until the user quits; then its lines on stdout."""
    from memopt.tui.app import TuneApp

    tune_app = TuneApp(tuner, auto=not manual)
    tune_app.run()
    for line in tune_app.exit_lines:
        print(line)
    if tune_app.error is not None:
        raise MemoptError(tune_app.error)


def _headless(tuner: TuningSession, as_json: bool, carry_over: Callable[[TuningSession], bool] | None) -> None:
    """The session's auto-search, its events printed as they come (``print_event``)."""
    try:
        with stdout_kept_for_the_result():
            result = tuner.auto_search()
    except KeyboardInterrupt:
        tuner.cancel()
        raise
    if result.best is not None:
        tuner.write_export_file(result.best.plans)
    if as_json:
        print(json.dumps(tuner.summary(result), indent=2, default=str))
    else:
        for line in tuner.export_lines():
            print(line)
        if not result.verified:  # the verdict, where no export line says it
            print(f"# {result.status}: {result.message}")
        print(f"# journal: {tuner.journal.path}")
    if not result.verified:
        sys.exit(EXIT_DOES_NOT_FIT)
    if carry_over is not None and not carry_over(tuner):
        sys.exit(EXIT_DOES_NOT_FIT)


def _carry_over_to_torch(recipe: str) -> Callable[[TuningSession], bool]:
    """What ``--export-torch`` does once ORT's tuner is done: the verified ORT config carried over
    to plain PyTorch at the target batch and budget (False: no verified config, or the policy misses)."""

    def carry_over(tuner: TuningSession) -> bool:
        assert isinstance(tuner, Tuner)  # --export-torch is refused on any other back end
        best = tuner.best()
        if best is None:
            say("--export-torch: no verified ORT config to carry over")
            return False
        if not best.plans:
            say(
                "--export-torch: the verified ORT config recomputes nothing, so there is nothing to carry over "
                "(eager PyTorch keeps more than ORTModule: memopt tune --backend torch answers for it)"
            )
            return True
        say(
            f"--export-torch: carrying the verified config over to plain PyTorch at batch {tuner.settings.target_batch}"
        )
        run = tuner.settings.run
        return carry_over_to_torch(
            tuner.entries(best.plans),
            run,
            tuner.settings.target_batch,
            tuner.settings.budget,
            margin=tuner.settings.margin,
            recipe=recipe,
        )

    return carry_over


def print_event(event: TuneEvent) -> None:
    """One plain line per event, on stderr (stdout is kept for the result)."""
    say(event_line(event))
