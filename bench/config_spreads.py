"""How far repeats of one config spread, as a share of the no-config peak, over tune runs folders.

For each ORT tune's runs folder: the trials at its target batch (the largest batch that ran),
grouped by config; for each group run two times or more, the spread of the whole-run peaks
(highest less lowest) over the highest no-config run at that batch. The least spread the
search's room takes a config's runs to have (``CONFIG_SPREAD``) is read off this table.

    .venv/bin/python bench/config_spreads.py RUNS_DIR [RUNS_DIR …]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from memopt.run.journal import Journal

MIB = 2**20


def spreads(folder: Path) -> list[tuple[float, int, int, float]]:
    """(spread over the no-config peak, plans, runs, spread in MiB) per config repeated at the target."""
    records = [
        entry.record
        for entry in Journal.in_folder(folder).entries()
        if entry.record.get("status") == "ok" and entry.record.get("whole_run_peak_bytes")
    ]
    if not records:
        return []
    target = max(record["batch_size"] for record in records)
    peaks: dict[frozenset[str], list[int]] = defaultdict(list)
    for record in records:
        if record["batch_size"] == target:
            peaks[frozenset(record["config"])].append(record["whole_run_peak_bytes"])
    baseline = max(peaks.get(frozenset(), ()), default=0)
    if not baseline:
        return []
    return [
        ((max(runs) - min(runs)) / baseline, len(config), len(runs), (max(runs) - min(runs)) / MIB)
        for config, runs in peaks.items()
        if len(runs) > 1
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    configs, baselines = [], []
    for folder in args.runs_dirs:
        for share, plans, runs, mib in spreads(folder):
            print(f"{100 * share:5.2f}%  {mib:6.1f} MiB  {runs} runs  {plans:2d} plans  {folder}")
            (configs if plans else baselines).append(share)
    for name, shares in (("configs", configs), ("no config", baselines)):
        if shares:
            print(
                f"{name}: {len(shares)} repeated, median {100 * statistics.median(shares):.2f}%,"
                f" at most 1.5% in {sum(s <= 0.015 for s in shares)}, highest {100 * max(shares):.2f}%"
            )
    if not configs and not baselines:
        parser.error("no config ran twice at its tune's target batch in these folders")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
