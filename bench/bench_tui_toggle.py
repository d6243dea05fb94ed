"""A plan toggled in the tune screen of a deep model: how long until the prediction shows.

    .venv/bin/python bench/bench_tui_toggle.py [--target hf:llama] [-o num_hidden_layers=32]
        [--batch 32] [--seq 64] [--toggles 6] [--runs-dir runs/bench_tui]

Sets up a tuning session (graph probe, scan, one calibration run), opens the tune screen
under Textual's pilot and presses space on the first ``--toggles`` rows in turn (each a
combination of plans not simulated before, but the first: one plan alone, whose saving
the plans table already shows), then on the last of them again (off: a combination seen
before). Per toggle: the wall time from the key to the updated screen, the CPU time
memopt spent in it, and how much of that the prediction took (``Tuner.predict``). A
benchmark figure, not an assertion: the machine's load moves the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from memopt.backends.ort.tune.tuner import Tuner
from memopt.core import parse_runnable
from memopt.recipes import parse_option_value
from memopt.run.budget import parse_budget
from memopt.run.settings import RunSettings
from memopt.tui.app import TuneApp
from memopt.tui.widgets import PlansTable
from memopt.tune import TuneSettings

SIZE = (130, 40)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="hf:llama")
    parser.add_argument(
        "-o", "--option", action="append", default=None, help="key=value (default num_hidden_layers=32)"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--toggles", type=int, default=6)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/bench_tui"))
    args = parser.parse_args()
    pairs = args.option if args.option is not None else ["num_hidden_layers=32"]
    options: dict[str, Any] = {"size": "tiny", "seq_len": args.seq}
    options.update({key: parse_option_value(value) for key, value in (pair.split("=", 1) for pair in pairs)})
    settings = TuneSettings(
        run=RunSettings(target=parse_runnable(args.target), options=options, runs_dir=args.runs_dir),
        target_batch=args.batch,
        budget=parse_budget("64GiB"),  # the prediction does not depend on it
        resume=True,
    )
    tuner = Tuner(settings)
    started = time.process_time()
    tuner.setup()
    setup_s = time.process_time() - started
    predicting: list[float] = []
    predict = tuner.predict

    def timed_predict(*a: Any, **k: Any) -> Any:
        begun = time.process_time()
        try:
            return predict(*a, **k)
        finally:
            predicting.append(time.process_time() - begun)

    tuner.predict = timed_predict  # type: ignore[method-assign]
    rows: list[tuple[str, int, float, float, float]] = []

    async def scenario() -> None:
        app = TuneApp(tuner, auto=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)
            table = app.query_one(PlansTable)
            presses = [("on", ("space",))] + [("on", ("down", "space"))] * (args.toggles - 1)
            presses.append(("off again (seen before)", ("space",)))
            for what, press in presses:
                predicting.clear()
                wall, cpu = time.monotonic(), time.process_time()
                await pilot.press(*press)
                await pilot.pause()
                rows.append(
                    (
                        what,
                        len(app.selection.plans),
                        time.monotonic() - wall,
                        time.process_time() - cpu,
                        sum(predicting),
                    )
                )
                assert table.current_key is not None
            await pilot.press("q")

    asyncio.run(scenario())
    graph_nodes = len(tuner.report.graph.nodes)
    print(f"Command: `{' '.join(shlex.quote(a) for a in ['.venv/bin/python', *sys.argv])}`\n")
    print(
        f"{args.target} {' '.join(pairs)} at batch {args.batch}, seq {args.seq}: {graph_nodes} graph nodes, "
        f"{len(tuner.report.patterns)} plans; session set-up {setup_s:.1f} s CPU in memopt (probe and calibration "
        "runs are child processes)\n"
    )
    print("| toggle | plans on | wall s, key to screen | memopt CPU s | of which the prediction |")
    print("|---|---:|---:|---:|---:|")
    for what, count, wall, cpu, prediction in rows:
        print(f"| {what} | {count} | {wall:.3f} | {cpu:.3f} | {prediction:.3f} |")
    new = [wall for what, count, wall, _, _ in rows[1:-1]]
    if new:
        print(f"\nnew combinations: median {statistics.median(new):.3f} s, worst {max(new):.3f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
