"""A Hugging Face target trained under ORTModule, its RSS sampled every 2 ms from another
process and cut at each step's phases (forward, backward, optimizer step): what each phase
holds above the bytes held between steps, the part outside ORT's arena once its pages are
all touched (from the second step on).

    .venv/bin/python bench/phase_rss.py hf:bert --batch 16 --seq 128 --steps 4
"""

from __future__ import annotations

import argparse
import bisect
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from onnxruntime.training.ortmodule import DebugOptions, LogLevel, ORTModule

from memopt.errors import MemoptError
from memopt.recipes.hf import resolve_hf_target

MIB = 2**20
_SAMPLER = """
import os, sys, time
pid, out = int(sys.argv[1]), open(sys.argv[2], "w")
page = os.sysconf("SC_PAGE_SIZE")
while os.path.exists(f"/proc/{pid}") and not os.path.exists(sys.argv[2] + ".stop"):
    with open(f"/proc/{pid}/statm") as f:
        out.write(f"{time.time_ns()} {int(f.read().split()[1]) * page}\\n")
    time.sleep(0.002)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="hf:<model>[:size], as memopt takes it")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    try:
        target = resolve_hf_target(args.target, {"seq_len": args.seq})
    except MemoptError as error:
        parser.exit(2, f"error: {error}\n")
    with tempfile.TemporaryDirectory() as folder:
        samples = Path(folder) / "rss.txt"
        sampler = subprocess.Popen([sys.executable, "-c", _SAMPLER, str(os.getpid()), str(samples)])
        marks: list[tuple[int, str]] = []
        try:
            torch.manual_seed(0)
            model = ORTModule(target.build_model(), DebugOptions(log_level=LogLevel.WARNING))
            optimizer = torch.optim.AdamW(model.parameters())
            for step in range(args.steps):
                batch, _ = target.make_batch(args.batch)
                marks.append((time.time_ns(), f"step {step} forward"))
                output = model(**batch)
                marks.append((time.time_ns(), f"step {step} backward"))
                output.loss.backward()
                marks.append((time.time_ns(), f"step {step} optimizer"))
                optimizer.step()
                optimizer.zero_grad()
                del output
            marks.append((time.time_ns(), "end"))
        finally:
            Path(f"{samples}.stop").touch()
            sampler.wait()
        rows = [tuple(map(int, line.split())) for line in samples.read_text().splitlines() if len(line.split()) == 2]
    times = [t for t, _ in rows]
    print(f"{args.target} batch {args.batch} seq {args.seq}: RSS MiB per phase")
    for (start, name), (end, _) in zip(marks, marks[1:]):
        phase = [rss for _, rss in rows[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]] or [0]
        print(f"{name:22s} start {phase[0] / MIB:8.1f}  max {max(phase) / MIB:8.1f}  end {phase[-1] / MIB:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
