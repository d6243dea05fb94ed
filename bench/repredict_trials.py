"""Predict every measured trial of bench runs folders again, with this checkout's memory model.

``bench_memory_model.py`` leaves per case a ``<case>-model`` folder (its calibration journal
and model) and a ``<case>-reference`` folder (the trials measured with each config); a tune's
``--runs-dir`` holds both in one folder. This refits each case's model from its own no-config
calibration measurements and predicts every ok trial: a model change is judged on the same
measurements, with no new run.

    .venv/bin/python bench/repredict_trials.py RUNS_DIR [RUNS_DIR …]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from memopt.backends.ort.config import PlanKey
from memopt.backends.ort.predict.memory_model import MemoryModel, fit_memory_model

MIB = 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    errors, activation_errors = [], []
    for folder in args.runs_dirs:
        for reference, stored_file in _cases(folder):
            stored = MemoryModel.from_json(next(iter(json.loads(stored_file.read_text()).values())))
            model = fit_memory_model(
                [o for o in stored.observations if not o.plans],
                stored.plans,
                stored.batch_symbols,
                stored.fixed_dims,
                single_batch=False,
                simulator=stored.simulator,
            )
            print(f"{reference.name}: {model.describe()}")
            for line in (reference / "journal.jsonl").read_text().splitlines():
                record = json.loads(line)
                if record.get("status") != "ok" or not record.get("whole_run_peak_bytes"):
                    continue
                keys, counts = [], {}
                for entry in record["config"]:  # "<key>:<count>" as ORT's config lists it
                    head, _, count = entry.rpartition(":")
                    key = PlanKey(f"{head}:-1")
                    keys.append(key)
                    if int(count) >= 0:
                        counts[key] = int(count)
                measured = record["whole_run_peak_bytes"] / MIB
                predicted = model.predict(record["batch_size"], keys, counts).peak_bytes / MIB
                error = 100 * (predicted - measured) / measured
                errors.append(abs(error))
                activation_errors.append(100 * abs(predicted - measured) / (measured - model.static_bytes / MIB))
                print(
                    f"{reference.name:40s} b{record['batch_size']:<4d} {len(keys):2d} plans"
                    f"  measured {measured:8.1f}  predicted {predicted:8.1f} ({error:+5.1f}%)"
                )
    if not errors:
        parser.error("no measured reference trials in these folders")
    print(
        f"median |error| {statistics.median(errors):.2f}% of the peak, {statistics.median(activation_errors):.1f}%"
        f" of its activation part, max {max(errors):.1f}%, over {len(errors)} trials"
    )
    return 0


def _cases(folder: Path) -> list[tuple[Path, Path]]:
    """Per case, the folder of its measured trials and its saved model's file."""
    if (folder / "journal.jsonl").exists() and (folder / "memopt_models.json").exists():
        return [(folder, folder / "memopt_models.json")]  # a tune's runs folder
    pairs = [
        (reference, reference.with_name(reference.name.replace("-reference", "-model")) / "memopt_models.json")
        for reference in sorted(folder.glob("*-reference"))
    ]
    return [(reference, stored) for reference, stored in pairs if stored.exists()]


if __name__ == "__main__":
    raise SystemExit(main())
