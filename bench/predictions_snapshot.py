"""The memory model's and the planner's predictions on training graphs, written to a file or
compared with one exactly: a change to how predictions are computed must not change them.

    .venv/bin/python bench/predictions_snapshot.py GRAPH.onnx… --write FILE
    .venv/bin/python bench/predictions_snapshot.py GRAPH.onnx… --compare FILE

Run ``--write`` with the code before the change (another checkout's interpreter runs this
file as is) and ``--compare`` after it. Each graph is scanned with the rules of the ORT
release its folder names (``sample_logs/graphs/1.17.3/gpt.onnx``; 1.19.2 otherwise); its
non-batch dims are set to 64 and the model's fixed part fitted on two made-up no-config
peaks. Recorded, at several batches: the simulated step with no plan, each plan alone and
all plans (peak, resident bytes, where), each plan's saving (also its first occurrence
alone), the largest batch under several limits, and the planner's choice at three budgets.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from memopt.backends.ort import OrtVersion
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.predict.calibration import plan_savings, require_batch_dim, simulator_for
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, fit_memory_model
from memopt.backends.ort.predict.planner import choose_plans
from memopt.backends.ort.scan import scan_graph

BATCHES = (1, 7, 32, 128)
TARGET_BATCH = 32
FRACTIONS = (0.80, 0.90, 0.95)
FIXED_DIM = 64
MiB = 1 << 20


def release_of(path: Path) -> str:
    found = [part for part in path.parts if re.fullmatch(r"\d+\.\d+\.\d+", part)]
    return found[-1] if found else "1.19.2"


def model_for(path: Path) -> tuple[MemoryModel, str]:
    graph = load_graph(path)
    release = release_of(path)
    report = scan_graph(graph, release)
    symbols = require_batch_dim(report, str(path))
    fixed = {symbol: FIXED_DIM for symbol in sorted(report.symbols) if symbol not in symbols}
    plans = plan_savings(report, graph)
    observations = [Observation(8, (), 1024 * MiB), Observation(32, (), 1536 * MiB)]
    simulator = simulator_for(plans, graph, path, OrtVersion.parse(release), "cpu")
    return fit_memory_model(observations, plans, symbols, fixed, simulator=simulator), release


def predictions(path: Path) -> dict[str, Any]:
    model, release = model_for(path)
    keys = [p.key for p in model.plans]
    out: dict[str, Any] = {"release": release, "plans": keys, "scale": model.activation_scale}
    out["fixed"] = model.static_bytes
    for batch in BATCHES:
        row: dict[str, Any] = {}
        for label, plans in [("none", ()), *((key, (key,)) for key in keys), ("all", tuple(keys))]:
            t = model.timeline(batch, plans)
            row[label] = [t.peak_bytes, t.resident_bytes, t.peak_node, t.where(), t.step_count]
        row["raw_saving"] = {key: model.raw_saving(key, batch) for key in keys}
        row["first_occurrence"] = {key: model.raw_saving(key, batch, 1) for key in keys}
        row["predict_all"] = model.predict(batch, keys).peak_bytes
        out[f"batch {batch}"] = row
    target = model.baseline(TARGET_BATCH)
    out["max_batch"] = {
        f"{fraction}": [model.max_batch(fraction * target), model.max_batch(fraction * target, keys)]
        for fraction in (0.5, 0.8, 1.0, 4.0)
    }
    costs = {p.key: 1e-3 * sum(len(r.nodes) for r in p.recomputes) for p in model.plans}
    for fraction in FRACTIONS:
        result = choose_plans(model, costs, TARGET_BATCH, int(fraction * target), release, margin=0.02)
        out[f"plan {fraction}"] = {
            "plans": list(result.plans),
            "predicted": result.predicted_bytes,
            "feasible": result.feasible,
            "savings": [c.saving_bytes for c in result.choices],
            "max_batch": [result.max_batch_all_plans, result.max_batch_no_plans],
            "solver": result.solver,
        }
    return out


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = [f"{where}/{key}: only in one" for key in sorted(set(old) ^ set(new))]
        return found + [d for key in old if key in new for d in differences(old[key], new[key], f"{where}/{key}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", type=Path, nargs="+")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", type=Path)
    what.add_argument("--compare", type=Path)
    args = parser.parse_args()
    found: dict[str, Any] = {}
    for path in args.graphs:
        started = time.process_time()
        found[str(path)] = predictions(path)
        print(f"{path}: {time.process_time() - started:.1f} s CPU", file=sys.stderr)
    if args.write:
        args.write.write_text(json.dumps(found, indent=1))
        return
    expected = json.loads(args.compare.read_text())
    # Through JSON both ways: tuples and lists, int and float keys compare alike.
    problems = differences({k: expected[k] for k in found if k in expected}, json.loads(json.dumps(found)))
    problems += [f"{path}: not in {args.compare}" for path in found if path not in expected]
    for line in problems:
        print(line)
    print(f"{len(found)} graphs, {len(problems)} differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
