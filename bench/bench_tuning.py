"""Tuning cost: trials and wall time to a verified recompute config, memopt vs the alternatives.

    .venv/bin/python bench/bench_tuning.py [--recipe tests/recipes/wide_gpt.py -o n_layer=2 -o seq_len=128]
        [--target-batch 16] [--steps 2] [--repeats 3] [--margins 0.02 0.01] [--top-k 5]
        [--quality-steps 3] [--ab-repeats 3] [--runs-dir DIR] [--plot bench/results/tuning.png]

On one recipe at one target batch, CPU (peak RSS), real ORTModule trials throughout:
  1. the budget: a no-config and an every-plan trial at the target batch; the budget is halfway
     between their peaks (as tests/support/real_tuning.py does), so the no-recompute run exceeds it;
  2. strategies, each repetition of each in its own fresh runs folder (no journal reuse),
     counted in trials and wall time until a config is verified under the budget:
       memopt      ``Tuner.auto_search`` headless (= ``memopt tune --no-tui``): graph probe,
                   calibration trials, search trials; once per ``--margins`` value
       manual      ORT's documented loop: run, read ORT's Plan table from the run's log
                   (memopt's parser), enable the plan ORT says saves most that is not on, rerun
       level1      ``ORTMODULE_MEMORY_OPT_LEVEL=1``: one run
       binsearch   Lightning's ``binsearch`` batch scaler without recompute (start at 2, double
                   until over budget, then bisect): the largest batch that fits
  3. quality: every subset of the ``--top-k`` plans by the scan's saving at the target batch,
     measured with ``--quality-steps`` steps; the best is the fastest median step under budget.
     The configs the strategies found and the exhaustive best are then rerun in alternation
     (``--ab-repeats`` rounds) for step-time ratios that do not rest on one noisy trial.
Prints markdown tables (the command first) and writes the plot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from memopt.backends.ort.calibrate import prepare_target
from memopt.backends.ort.config import ENV_VAR
from memopt.backends.ort.logparse import parse_file
from memopt.backends.ort.logparse.model import Plan
from memopt.backends.ort.scan.patterns import Pattern
from memopt.backends.ort.trials import LEVEL_VAR, TrialSpec, parse_trial_config, run_trial
from memopt.backends.ort.tune.tuner import Tuner
from memopt.backends.ort.version import OrtVersion
from memopt.core import parse_runnable
from memopt.core.trial import TrialResult
from memopt.run.budget import Budget
from memopt.run.launch import LOG_NAME, RunRequest, launch, new_run_dir
from memopt.run.settings import RunSettings
from memopt.tune import StageFinished, TuneEvent, TuneSettings, event_line

LEVEL1 = "level1"  # the config label of an ORTMODULE_MEMORY_OPT_LEVEL=1 run
MIB = 2**20
TIMEOUT_S = 600.0


# ----------------------------------------------------------------------------- what is measured


@dataclass(frozen=True)
class Run:
    """One child run a strategy made: a trial, or the tuner's graph probe."""

    purpose: str  # probe, calibration, search, trial
    batch: int
    config: str  # "none", plan keys joined by " + ", or LEVEL1
    outcome: str  # ok, over_budget, crashed, ...
    peak_bytes: int | None
    step_s: float | None
    wall_s: float


@dataclass(frozen=True)
class StrategyRun:
    """One repetition of one strategy."""

    name: str
    repetition: int
    runs: tuple[Run, ...]
    wall_s: float
    reached: bool  # a config verified under budget at the target batch
    config: str | None  # what it found (for binsearch: "none" at ``batch``)
    plans: tuple[str, ...]  # the plan keys of ``config``
    batch: int | None
    peak_bytes: int | None
    step_s: float | None
    note: str = ""

    @property
    def trials(self) -> int:
        return sum(1 for r in self.runs if r.purpose != "probe")

    @property
    def probes(self) -> int:
        return sum(1 for r in self.runs if r.purpose == "probe")


@dataclass(frozen=True)
class Bench:
    """The recipe, the target, the scan's plans and the budget (0 until measured)."""

    recipe: str
    options: dict[str, Any]
    target: int
    steps: int
    ort: OrtVersion
    patterns: tuple[Pattern, ...]
    savings: dict[str, float]  # the scan's exact saving per plan at the target batch
    budget_bytes: int = 0
    peaks: tuple[int, int] = (0, 0)  # (no config, every plan) at the target batch


@dataclass
class Measurements:
    """Everything one benchmark run produced (dumped as JSON beside the runs)."""

    command: str
    bench: dict[str, Any] = field(default_factory=dict)
    strategies: list[StrategyRun] = field(default_factory=list)
    exhaustive: list[dict[str, Any]] = field(default_factory=list)
    ab: dict[str, list[float]] = field(default_factory=dict)  # config -> median step per round
    ab_peaks: dict[str, list[int]] = field(default_factory=dict)  # config -> peak per round
    wall_s: float = 0.0


# ----------------------------------------------------------------------------- helpers


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def short(key: str) -> str:
    return key.removesuffix(":1:-1")


def label(plans: Iterable[str]) -> str:
    names = [short(p) for p in plans]
    return " + ".join(sorted(names)) if names else "none"


def mib(value: float | None) -> str:
    return "–" if value is None else f"{value / MIB:.1f}"


def spread(values: Sequence[float], digits: int = 1) -> str:
    """``median [min–max]`` (just the value when all agree)."""
    if not values:
        return "–"
    med, low, high = statistics.median(values), min(values), max(values)
    if low == high:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} [{low:.{digits}f}–{high:.{digits}f}]"


def bench_runs(bench: Bench, steps: int, folder: Path) -> RunSettings:
    """How the bench's runs of its recipe go."""
    return RunSettings(
        target=parse_runnable(bench.recipe), options=bench.options, steps=steps, timeout_s=TIMEOUT_S, runs_dir=folder
    )


def trial(bench: Bench, folder: Path, plans: Sequence[str], batch: int, steps: int) -> TrialResult:
    """A memopt trial of ``plans`` (ORT Plan-table keys) judged against the budget (once there is one)."""
    entries = parse_trial_config(",".join(plans), bench.ort).entries if plans else ()
    spec = TrialSpec(bench_runs(bench, steps, folder), batch, entries)
    result = run_trial(spec, folder, budget_bytes=bench.budget_bytes or None)
    log(
        f"  b{batch} {label(plans)}: {result.outcome}, peak {mib(result.memory.peak_bytes)} MiB, "
        f"step {result.median_step_s or 0:.2f} s ({result.wall_s:.1f} s wall)"
    )
    return result


def as_run(result: TrialResult, purpose: str, plans: Sequence[str]) -> Run:
    return Run(
        purpose,
        result.batch_size,
        label(plans),
        result.outcome,
        result.memory.peak_bytes,
        result.median_step_s,
        result.wall_s,
    )


def level1_run(bench: Bench, folder: Path, steps: int) -> tuple[Run, tuple[str, ...], int | None]:
    """One run with ``ORTMODULE_MEMORY_OPT_LEVEL=1`` (and no config), judged against the budget.

    memopt's trials always drop the level variable (it would override any config), so this
    goes through ``memopt.run.launch.launch`` directly. Returns the run, the plans ORT reported ON
    and the recomputed-node count from its log.
    """
    request = RunRequest(
        bench_runs(bench, steps, folder), bench.target, log_level="DEVINFO", env={LEVEL_VAR: "1"}, unset_env=(ENV_VAR,)
    )
    run = launch(request, new_run_dir(folder, f"level1-b{bench.target}"))
    peak = run.memory.steady_or_run_peak
    outcome = run.status if run.status != "ok" else ("over_budget" if peak and peak > bench.budget_bytes else "ok")
    plans_on: tuple[str, ...] = ()
    recomputed = None
    summaries = [s for s in parse_file(run.log_path).summaries if s.plans or s.total_recomputed_nodes is not None]
    if summaries:
        with_plans = [s for s in summaries if s.plans]
        if with_plans:
            plans_on = tuple(p.key for p in with_plans[-1].plans if p.enabled)
        recomputed = next(
            (s.total_recomputed_nodes for s in reversed(summaries) if s.total_recomputed_nodes is not None), None
        )
    log(
        f"  level1: {outcome}, peak {mib(peak)} MiB, step {run.median_step_s or 0:.2f} s, "
        f"{len(plans_on)} plans ON, {recomputed} nodes recomputed ({run.wall_s:.1f} s wall)"
    )
    return Run("trial", bench.target, LEVEL1, outcome, peak, run.median_step_s, run.wall_s), plans_on, recomputed


def plan_table(log_path: Path) -> tuple[Plan, ...]:
    """ORT's Plan table as the run's log printed it last (memopt's parser)."""
    with_plans = [s for s in parse_file(log_path).summaries if s.plans]
    return with_plans[-1].plans if with_plans else ()


def ort_saving(plan: Plan) -> float:
    """What ORT's table says the plan saves, at the run's own dims."""
    return plan.saving_at_logged_dims if plan.saving_at_logged_dims is not None else float(plan.max_saving_bytes or 0)


# ----------------------------------------------------------------------------- 1. the budget


def measure_budget(recipe: str, options: dict[str, Any], target: int, steps: int, folder: Path) -> Bench:
    log("budget: graph probe and scan, then no-config and every-plan trials at the target batch")
    prepared = prepare_target(RunSettings(target=parse_runnable(recipe), options=options, runs_dir=folder))
    report = prepared.report
    dims = {**prepared.loaded.logged_dims, **{symbol: target for symbol in prepared.batch_symbols}}
    savings = {p.key: p.exact.evaluate(dims) for p in report.patterns}
    bench = Bench(recipe, options, target, steps, prepared.ort_version, report.patterns, savings)
    no_config = trial(bench, folder, (), target, steps)
    every_plan = trial(bench, folder, [p.key for p in report.patterns], target, steps)
    if not (no_config.ran and every_plan.ran and no_config.memory.peak_bytes and every_plan.memory.peak_bytes):
        raise SystemExit(f"the budget trials did not run: {no_config.error or every_plan.error}")
    if every_plan.memory.peak_bytes >= no_config.memory.peak_bytes:
        raise SystemExit(
            f"recompute does not lower the peak here ({mib(no_config.memory.peak_bytes)} MiB without, "
            f"{mib(every_plan.memory.peak_bytes)} MiB with every plan): no budget to tune for"
        )
    budget = (no_config.memory.peak_bytes + every_plan.memory.peak_bytes) // 2
    log(
        f"budget {mib(budget)} MiB (no config {mib(no_config.memory.peak_bytes)}, every plan {mib(every_plan.memory.peak_bytes)})"
    )
    return replace(bench, budget_bytes=budget, peaks=(no_config.memory.peak_bytes, every_plan.memory.peak_bytes))


# ----------------------------------------------------------------------------- 2. strategies


def memopt_search(bench: Bench, folder: Path, margin: float, max_trials: int, repetition: int) -> StrategyRun:
    """memopt's auto-search, headless, exactly as ``memopt tune --no-tui`` runs it."""
    events: list[TuneEvent] = []

    def on_event(event: TuneEvent) -> None:
        events.append(event)
        print(event_line(event), file=sys.stderr, flush=True)

    settings = TuneSettings(
        run=bench_runs(bench, bench.steps, folder),
        target_batch=bench.target,
        budget=Budget(f"{bench.budget_bytes}B", bytes=bench.budget_bytes),
        margin=margin,
        max_trials=max_trials,
    )
    started = time.monotonic()
    result = Tuner(settings, on_event).auto_search()
    wall = time.monotonic() - started
    probe_s = sum(e.seconds for e in events if isinstance(e, StageFinished) and e.stage == "probe")
    runs = [Run("probe", 2, "none", "ok", None, None, probe_s)]
    runs += [
        Run(r.purpose, r.batch_size, label(r.plans), r.outcome, r.peak_bytes, r.step_s, r.result.wall_s)
        for r in result.trials
    ]
    best = result.best
    return StrategyRun(
        f"memopt (margin {margin:g})",
        repetition,
        tuple(runs),
        wall,
        best is not None,
        label(best.plans) if best else None,
        best.plans if best else (),
        bench.target,
        best.peak_bytes if best else None,
        best.step_s if best else None,
        f"{result.status}: {result.message}",
    )


def manual_loop(bench: Bench, folder: Path, max_trials: int, repetition: int) -> StrategyRun:
    """ORT's docs: run, read the Plan table, enable the largest-saving plan not yet on, rerun."""
    started = time.monotonic()
    enabled: list[str] = []
    runs: list[Run] = []
    note = f"gave up after {max_trials} trials"
    while len(runs) < max_trials:
        result = trial(bench, folder, enabled, bench.target, bench.steps)
        runs.append(as_run(result, "trial", enabled))
        if result.fits:
            return StrategyRun(
                "manual (ORT docs)",
                repetition,
                tuple(runs),
                time.monotonic() - started,
                True,
                label(enabled),
                tuple(enabled),
                bench.target,
                result.memory.peak_bytes,
                result.median_step_s,
                f"enabled in order: {', '.join(short(k) for k in enabled) or 'nothing'}",
            )
        if not result.ran:
            note = f"trial {result.outcome}: {result.error}"
            break
        remaining = sorted(
            (p for p in plan_table(Path(result.run_dir) / LOG_NAME) if p.key not in enabled),
            key=lambda p: (-ort_saving(p), p.key),
        )
        if not remaining:
            note = "every plan in ORT's table is on and it still does not fit"
            break
        enabled.append(remaining[0].key)
    return StrategyRun(
        "manual (ORT docs)",
        repetition,
        tuple(runs),
        time.monotonic() - started,
        False,
        None,
        (),
        None,
        None,
        None,
        note,
    )


def level1(bench: Bench, folder: Path, repetition: int) -> StrategyRun:
    started = time.monotonic()
    run, plans_on, recomputed = level1_run(bench, folder, bench.steps)
    return StrategyRun(
        "ORTMODULE_MEMORY_OPT_LEVEL=1",
        repetition,
        (run,),
        time.monotonic() - started,
        run.outcome == "ok",
        LEVEL1,
        (),
        bench.target,
        run.peak_bytes,
        run.step_s,
        f"{len(plans_on)} plans ON, {recomputed} nodes recomputed",
    )


def binsearch(bench: Bench, folder: Path, repetition: int, init: int = 2, max_trials: int = 25) -> StrategyRun:
    """Lightning's ``_run_binary_scaling`` without recompute, over budget counting as OOM."""
    started = time.monotonic()
    runs: list[Run] = []
    low, high, size = 1, None, init
    fitted: TrialResult | None = None
    while len(runs) < max_trials:
        result = trial(bench, folder, (), size, bench.steps)
        runs.append(as_run(result, "trial", ()))
        if result.fits:
            low, fitted = size, result
            if high is not None:
                if high - low <= 1:
                    break
                size = (high + low) // 2
            else:
                size *= 2
        elif result.outcome in ("over_budget", "out_of_memory"):
            high = size
            size = (high + low) // 2
            if high - low <= 1:
                break
        else:
            break
    found = fitted.batch_size if fitted else None
    return StrategyRun(
        "binsearch (no recompute)",
        repetition,
        tuple(runs),
        time.monotonic() - started,
        False,
        "none",
        (),
        found,
        fitted.memory.peak_bytes if fitted else None,
        fitted.median_step_s if fitted else None,
        f"largest batch without recompute: {found} (target {bench.target} not reachable this way)",
    )


# ----------------------------------------------------------------------------- 3. quality


def exhaustive(bench: Bench, folder: Path, top_k: int, steps: int) -> list[dict[str, Any]]:
    """Every subset of the top-k plans by saving, in a shuffled order (drift spreads over all)."""
    top = sorted(bench.patterns, key=lambda p: (-bench.savings[p.key], p.key))[:top_k]
    subsets = [tuple(p.key for p in combo) for n in range(top_k + 1) for combo in itertools.combinations(top, n)]
    random.Random(0).shuffle(subsets)
    log(f"exhaustive: {len(subsets)} subsets of {', '.join(short(p.key) for p in top)}, {steps} steps each")
    rows = []
    for plans in subsets:
        result = trial(bench, folder, plans, bench.target, steps)
        rows.append(
            {
                "config": label(plans),
                "plans": list(plans),
                "outcome": result.outcome,
                "peak_bytes": result.memory.peak_bytes,
                "step_s": result.median_step_s,
                "steps_s": list(result.step_times_s[1:]),
                "wall_s": result.wall_s,
            }
        )
    return rows


def alternate(
    bench: Bench, folder: Path, configs: Sequence[str], plans_of: dict[str, tuple[str, ...]], rounds: int, steps: int
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Each config's median step time and peak, rerun in alternation for ``rounds`` rounds."""
    times: dict[str, list[float]] = {c: [] for c in configs}
    peaks: dict[str, list[int]] = {c: [] for c in configs}
    for number in range(rounds):
        log(f"A/B round {number + 1}/{rounds}")
        for config in configs:
            if config == LEVEL1:
                run = level1_run(bench, folder, steps)[0]
                step, peak = run.step_s, run.peak_bytes
            else:
                result = trial(bench, folder, plans_of[config], bench.target, steps)
                step, peak = result.median_step_s, result.memory.peak_bytes
            if step is not None and peak is not None:
                times[config].append(step)
                peaks[config].append(peak)
    return times, peaks


# ----------------------------------------------------------------------------- report


def print_report(m: Measurements, bench: Bench, top_k: int, quality_steps: int) -> None:
    print(f"Command: `{m.command}`\n")
    print(
        f"Recipe {bench.recipe} {' '.join(f'-o {k}={v}' for k, v in bench.options.items())}, target batch "
        f"{bench.target}, CPU peak RSS over the measured steps, ORT {bench.ort}; {bench.steps} measured step(s) "
        f"per strategy trial. Budget {mib(bench.budget_bytes)} MiB = halfway between no config "
        f"({mib(bench.peaks[0])} MiB) and every plan ({mib(bench.peaks[1])} MiB), {bench.steps}-step trials. "
        f"Whole run {m.wall_s / 60:.1f} min.\n"
    )

    print("### Strategies: cost to a verified config\n")
    print(
        "Trials: every training run the strategy made (memopt: its calibration trials included, plus one "
        "graph probe, counted apart). Medians [min–max] over repetitions, each in a fresh runs folder.\n"
    )
    print(
        "| strategy | reps | trials | of which calibration | graph probes | wall (s) | reached target under budget "
        "| config found | peak (MiB) | step (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for name in dict.fromkeys(s.name for s in m.strategies):
        runs = [s for s in m.strategies if s.name == name]
        reached = sum(s.reached for s in runs)
        configs = ", ".join(
            f"`{c}`" + (f" (batch {b})" if name.startswith("binsearch") else "")
            for c, b in dict.fromkeys((s.config, s.batch) for s in runs if s.config)
        )
        print(
            f"| {name} | {len(runs)} | {spread([s.trials for s in runs], 0)} | "
            f"{spread([sum(r.purpose == 'calibration' for r in s.runs) for s in runs], 0)} | "
            f"{spread([s.probes for s in runs], 0)} | {spread([s.wall_s for s in runs])} | {reached}/{len(runs)} | "
            f"{configs or '–'} | {spread([s.peak_bytes / MIB for s in runs if s.peak_bytes])} | "
            f"{spread([s.step_s for s in runs if s.step_s], 2)} |"
        )
    print()
    for s in m.strategies:
        trail = "; ".join(
            f"{r.purpose} b{r.batch} {r.config}: {r.outcome}" + (f" {mib(r.peak_bytes)}" if r.peak_bytes else "")
            for r in s.runs
            if r.purpose != "probe"
        )
        print(f"- {s.name} #{s.repetition}: {s.note}. Runs: {trail}.")
    print()

    rows = sorted(m.exhaustive, key=lambda r: (r["step_s"] is None, r["step_s"] or 0.0))
    fitting = [r for r in rows if r["outcome"] == "ok" and r["step_s"] is not None]
    best = fitting[0] if fitting else None
    baseline = next((r for r in m.exhaustive if not r["plans"]), None)
    print(f"### Exhaustive: every subset of the top {top_k} plans by saving ({quality_steps} steps each)\n")
    print("Step time: the median of the trial's measured steps (warm-up excluded); min–max over those steps.\n")
    print("| config | peak (MiB) | under budget | median step (s) [min–max] | vs no config |")
    print("|---|---:|---|---:|---:|")
    for r in rows:
        steps = r["steps_s"]
        over = (
            f"{r['step_s'] / baseline['step_s'] - 1:+.1%}" if baseline and baseline["step_s"] and r["step_s"] else "–"
        )
        mark = " **(best)**" if r is best else ""
        print(
            f"| `{r['config']}`{mark} | {mib(r['peak_bytes'])} | {'yes' if r['outcome'] == 'ok' else r['outcome']} | "
            f"{r['step_s'] or 0:.3f} [{min(steps, default=0):.3f}–{max(steps, default=0):.3f}] | {over} |"
        )
    print()

    if best is not None and m.ab:
        reference = m.ab.get(best["config"]) or []
        ref = statistics.median(reference) if reference else None
        print(
            f"### Step time of each strategy's config vs the exhaustive best (`{best['config']}`), rerun in "
            f"alternation, {quality_steps} steps per trial\n"
        )
        print(
            "| config | found by | rounds | median step (s) [min–max over rounds] | ratio to best | "
            "peak (MiB) [min–max] | rounds under budget | ratio in the exhaustive run |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        finders: dict[str, list[str]] = {}
        for s in m.strategies:
            if s.reached and s.config:
                finders.setdefault(s.config, [])
                if s.name not in finders[s.config]:
                    finders[s.config].append(s.name)
        by_config = {r["config"]: r for r in m.exhaustive}
        for config, times in m.ab.items():
            ratio = f"{statistics.median(times) / ref:.3f}" if ref and times else "–"
            found = ", ".join(finders.get(config, [])) or "exhaustive"
            if config == best["config"] and "exhaustive" not in found:
                found += ", exhaustive"
            row = by_config.get(config)
            seen = f"{row['step_s'] / best['step_s']:.3f}" if row and row["step_s"] else "not a top-k subset"
            peaks = m.ab_peaks.get(config, [])
            under = sum(p <= bench.budget_bytes for p in peaks)
            print(
                f"| `{config}` | {found} | {len(times)} | {spread(times, 3)} | {ratio} | "
                f"{spread([p / MIB for p in peaks])} | {under}/{len(peaks)} | {seen} |"
            )
        print()


def plot(m: Measurements, bench: Bench, path: Path) -> None:
    """Measured peak vs step time of every exhaustive subset, the budget, and where strategies landed."""
    figure, axis = plt.subplots(figsize=(11, 5))
    rows = [r for r in m.exhaustive if r["peak_bytes"] and r["step_s"]]
    fits = [r for r in rows if r["outcome"] == "ok"]
    over = [r for r in rows if r["outcome"] != "ok"]
    for subsets, color, side in ((fits, "tab:green", "under"), (over, "tab:gray", "over")):
        axis.scatter(
            [r["peak_bytes"] / MIB for r in subsets],
            [r["step_s"] for r in subsets],
            s=18,
            color=color,
            alpha=0.6,
            label=f"exhaustive subsets {side} budget ({len(subsets)})",
        )
    if fits:
        best = min(fits, key=lambda r: r["step_s"])
        axis.scatter(
            [best["peak_bytes"] / MIB],
            [best["step_s"]],
            s=160,
            marker="*",
            color="gold",
            edgecolor="black",
            zorder=5,
            label=f"exhaustive best: {best['config']}",
        )
    axis.axvline(bench.budget_bytes / MIB, color="tab:red", linestyle="--", label="budget")
    by_config = {r["config"]: r for r in rows}
    markers = itertools.cycle(["o", "s", "D", "^", "v"])
    colours = itertools.cycle(["tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:cyan"])
    for name in dict.fromkeys(s.name for s in m.strategies if s.reached):
        found = [s for s in m.strategies if s.name == name and s.reached]
        config = statistics.mode(s.config for s in found)
        marker, colour = next(markers), next(colours)
        if m.ab.get(config):  # the alternating reruns: medians over rounds
            x = statistics.median(m.ab_peaks[config]) / MIB
            y, where = statistics.median(m.ab[config]), ", reruns"
        elif config in by_config:  # the same config as measured in the exhaustive run
            x, y, where = by_config[config]["peak_bytes"] / MIB, by_config[config]["step_s"], ""
        else:  # the strategy's own trials
            own = [s for s in found if s.config == config and s.peak_bytes and s.step_s]
            x = statistics.median(s.peak_bytes / MIB for s in own)  # type: ignore[operator]
            y = statistics.median(s.step_s for s in own)  # type: ignore[misc]
            where = f", own {bench.steps}-step trials"
        axis.scatter(
            [x],
            [y],
            s=140,
            marker=marker,
            facecolor="none",
            edgecolor=colour,
            linewidth=2,
            zorder=6,
            label=f"{name}: {config}{where}",
        )
    found_batches = [s.batch for s in m.strategies if s.name.startswith("binsearch") and s.batch]
    if found_batches:
        axis.plot(
            [],
            [],
            " ",
            label=f"binsearch without recompute: batch {statistics.mode(found_batches)} fits, not {bench.target}",
        )
    axis.set_xlabel(f"measured peak RSS at batch {bench.target} (MiB)")
    axis.set_ylabel("median step time (s)")
    axis.set_title(
        f"{Path(bench.recipe).stem} {' '.join(f'{k}={v}' for k, v in bench.options.items())}: "
        "recompute subsets vs budget"
    )
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- main


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else value
    return options


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tests/recipes/wide_gpt.py")
    parser.add_argument("-o", dest="options", action="append", default=None, metavar="KEY=VALUE")
    parser.add_argument("--target-batch", type=int, default=16)
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="measured steps per strategy trial (memopt tune's default; 1 can miss the steady peak)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of each strategy")
    parser.add_argument("--margins", type=float, nargs="+", default=[0.02, 0.01], help="memopt tune --margin values")
    parser.add_argument("--max-trials", type=int, default=8, help="give up after this many (search) trials")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--quality-steps", type=int, default=3)
    parser.add_argument("--ab-repeats", type=int, default=3)
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=Path("bench/results/tuning.png"))
    args = parser.parse_args()
    options = parse_options(args.options if args.options is not None else ["n_layer=2", "seq_len=128"])
    root = args.runs_dir or Path(f"runs/bench-tuning-{time.strftime('%Y%m%d-%H%M%S')}")
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    m = Measurements(command)
    started = time.monotonic()

    bench = measure_budget(args.recipe, options, args.target_batch, args.steps, root / "budget")
    m.bench = {
        "budget_bytes": bench.budget_bytes,
        "no_config_peak": bench.peaks[0],
        "every_plan_peak": bench.peaks[1],
        "savings": bench.savings,
    }

    strategies: list[tuple[str, Callable[[Path, int], StrategyRun]]] = [
        *(
            (
                f"memopt-m{margin:g}",
                lambda folder, rep, margin=margin: memopt_search(bench, folder, margin, args.max_trials, rep),
            )
            for margin in args.margins
        ),
        ("manual", lambda folder, rep: manual_loop(bench, folder, args.max_trials, rep)),
        ("level1", lambda folder, rep: level1(bench, folder, rep)),
        ("binsearch", lambda folder, rep: binsearch(bench, folder, rep)),
    ]
    for repetition in range(1, args.repeats + 1):  # interleaved, so drift hits every strategy alike
        for key, run in strategies:
            log(f"strategy {key}, repetition {repetition}")
            m.strategies.append(run(root / f"{key}-{repetition}", repetition))
            log(f"  -> {m.strategies[-1].note} ({m.strategies[-1].wall_s:.0f} s)")

    m.exhaustive = exhaustive(bench, root / "exhaustive", args.top_k, args.quality_steps)
    fitting = [r for r in m.exhaustive if r["outcome"] == "ok" and r["step_s"] is not None]
    if fitting:
        best = min(fitting, key=lambda r: r["step_s"])
        plans_of = {r["config"]: tuple(r["plans"]) for r in m.exhaustive}
        configs = [best["config"]]
        for s in m.strategies:
            if s.reached and s.config and s.config not in configs:
                configs.append(s.config)
                plans_of.setdefault(s.config, s.plans)
        m.ab, m.ab_peaks = alternate(bench, root / "ab", configs, plans_of, args.ab_repeats, args.quality_steps)

    m.wall_s = time.monotonic() - started
    (root / "bench_tuning.json").write_text(
        json.dumps({**asdict(m), "strategies": [asdict(s) for s in m.strategies]}, indent=1, default=str)
    )
    print_report(m, bench, args.top_k, args.quality_steps)
    plot(m, bench, args.plot)
    log(f"plot written to {args.plot}; runs and raw results in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
