"""In which order ORT saves a graph's constants into its CPU arena, process after process.

    .venv/bin/python bench/ort_constant_order.py [--processes 12]

A model of six constants (100-600 KiB, each read by an ``Add``) is built in a temporary
folder, and a fresh process per run opens an inference session on it with ORT's log at
VERBOSE and memory patterns off, so each constant is its own arena request. Printed per
process: the regions the arena added while the session saved its constants, and for which
request (the first is the constant saved first); then how often each first constant and
each list of region sizes came up. Different first requests across processes show the
order is not the graph's: ``SaveInitializedTensors`` walks a hash map whose seed changes
per process, which is why the arena check compares those regions on their sizes alone
(``memopt.backends.ort.logparse.growth_parts_at``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KIB = 1024
SIZES_KIB = (100, 200, 300, 400, 500, 600)
_REQUEST = re.compile(r"Extending BFCArena for Cpu\..*\(requested\) num_bytes: (\d+)")
_EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")

# Opens one session on argv[1] and lets ORT log what its arena does.
_SESSION = """
import sys
import onnxruntime as ort
ort.set_default_logger_severity(0)
options = ort.SessionOptions()
options.enable_mem_pattern = False
options.log_severity_level = 0
ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
"""


def write_model(path: Path) -> None:
    nodes, constants, outputs = [], [], []
    for index, size in enumerate(SIZES_KIB):
        count = size * KIB // 4
        constants.append(numpy_helper.from_array(np.full(count, index, np.float32), f"constant{index}"))
        nodes.append(helper.make_node("Add", ["x", f"constant{index}"], [f"y{index}"]))
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, [count]))
    graph = helper.make_graph(
        nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], outputs, constants
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "constants.onnx"
        write_model(model)
        first: Counter[int] = Counter()
        shapes: Counter[tuple[int, ...]] = Counter()
        for run in range(args.processes):
            done = subprocess.run(
                [sys.executable, "-c", _SESSION, str(model)], capture_output=True, text=True, check=True
            )
            lines = done.stdout.splitlines() + done.stderr.splitlines()
            requests = [int(m.group(1)) // KIB for m in map(_REQUEST.search, lines) if m]
            regions = [int(m.group(1)) // KIB for m in map(_EXTENDED.search, lines) if m]
            growth = ", ".join(f"{region} KiB for {request} KiB" for request, region in zip(requests, regions))
            print(f"process {run + 1}: regions added while saving the constants: {growth}")
            shapes[tuple(regions)] += 1
            if requests:
                first[requests[0]] += 1
    print(f"first constant saved, over {args.processes} processes: {dict(sorted(first.items()))} (KiB: count)")
    print(f"the regions' sizes, over {args.processes} processes: {dict(shapes)} (KiB: count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
