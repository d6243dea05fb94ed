"""Where a CPU trial's peak RSS goes: ORT's arena pages against everything else, per step phase,
measured, and the arena pages the memory model simulates for the same step.

The recipe is trained as a trial trains it (``memopt.child.steps.TrainingStep``, ORT's log at
DEVINFO, the last step's output held into the next forward). At the end of each phase
(forward, backward, optimizer step) it prints the phase's VmHWM (reset at every phase), the
RSS, the pages of ORT's arena that are resident (``mincore`` over the regions ORT's log says it
allocated) and the rest of the RSS (weights, optimizer state, PyTorch's tensors, the C++
heap). With ``--model`` (a runs folder that ``memopt plan`` calibrated) it also prints the
pages the simulated arena has touched after each step it plays, and that model's prediction.

    .venv/bin/python bench/arena_pages.py hf:./llama --batch 8 --seq 256 --config CONFIG.json --model RUNS_DIR
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import re
import sys
import tempfile
from pathlib import Path

MIB = 2**20
_REGION = re.compile(r"Allocated memory at (0x[0-9a-f]+) to (0x[0-9a-f]+)")
_ARENA_CREATED = "Creating BFCArena for Cpu"


def resident_bytes(start: int, end: int) -> int:
    """The bytes of [start, end) in pages resident in this process (``mincore``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    first = start - start % mmap.PAGESIZE
    pages = -(-(end - first) // mmap.PAGESIZE)
    vector = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(pages * mmap.PAGESIZE), vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(flag & 1 for flag in vector) * mmap.PAGESIZE


def arena_regions(log: Path) -> list[tuple[int, int]]:
    """The regions the last CPU arena ORT created has allocated, as its log lists them."""
    text = log.read_text(errors="replace")
    return [(int(a, 16), int(b, 16)) for a, b in _REGION.findall(text[text.rfind(_ARENA_CREATED) :])]


def measure(spec: str, options: dict[str, object], batch: int, steps: int) -> None:
    from memopt.backends.ort.child import OrtSteps
    from memopt.child.memory import proc_status_bytes, reset_rss_peak
    from memopt.child.steps import TrainingStep, _compute_loss
    from memopt.recipes import load_hf_recipe, load_recipe

    recipe = (load_hf_recipe if spec.startswith("hf:") else load_recipe)(spec, options)
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "ort.log"
        os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT), 2)  # ORT's C++ log lines name the regions
        step = TrainingStep(recipe, batch, "cpu", lambda model: OrtSteps().wrap(model, "DEVINFO", False))

        def phase(name: str) -> None:
            regions = arena_regions(log)
            arena = sum(resident_bytes(start, end) for start, end in regions)
            rss = proc_status_bytes("VmRSS")
            print(
                f"{name:20s} peak {proc_status_bytes('VmHWM') / MIB:8.1f}  rss {rss / MIB:8.1f}"
                f"  arena resident {arena / MIB:7.1f} of {sum(e - s for s, e in regions) / MIB:7.1f}"
                f"  outside it {(rss - arena) / MIB:8.1f} MiB",
                flush=True,
            )
            reset_rss_peak()

        reset_rss_peak()
        for index in range(steps):
            output = step.model(**step.inputs) if isinstance(step.inputs, dict) else step.model(*step.inputs)
            phase(f"step {index} forward")
            step.previous = None  # the loop drops the last step's output once forward returns
            loss = _compute_loss(step.loss_fn, output, step.target, step.loss_name)
            loss.backward()
            phase(f"step {index} backward")
            step.optimizer.step()
            step.optimizer.zero_grad(set_to_none=True)
            phase(f"step {index} optimizer")
            step.previous = output, loss


def simulate(folder: Path, batch: int, config: Path | None, steps: int) -> None:
    from memopt.backends.ort.config import PlanKey
    from memopt.backends.ort.predict.liveness import _ArenaPlay, _Sizes
    from memopt.backends.ort.predict.memory_model import MemoryModel

    saved = json.loads((folder / "memopt_models.json").read_text())
    model = MemoryModel.from_json(next(iter(saved.values())))
    if model.simulator is None:
        raise SystemExit(f"error: {folder}'s model has no training graph to simulate")
    plans = [PlanKey(key) for key in json.loads(config.read_text())] if config else []
    dims = model.dims(batch)
    program, sizes = model.simulator._prepare(*model.simulator._memo(dims, plans, None))
    play = _ArenaPlay(program, _Sizes(program, dims, sizes))
    for index in range(steps):
        play.advance()
        print(f"simulated step {index}: arena pages touched {play._arena.touched_bytes / MIB:7.1f} MiB")
        if play.done:
            break
    timeline = model.timeline(batch, plans)
    print(
        f"model: fixed {model.static_bytes / MIB:.1f} MiB + simulated {timeline.held_bytes / MIB:.1f} MiB"
        f" × {model.activation_scale:.2f} = predicted {model.peak(batch, plans) / MIB:.1f} MiB ({timeline.where()})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="a recipe or hf: target, as memopt takes it")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, help="the recipe's seq_len")
    parser.add_argument("-o", "--option", action="append", default=[], help="key=value, as memopt's -o")
    parser.add_argument("--config", type=Path, help="an ORTMODULE_MEMORY_OPT_CONFIG file (a JSON list of plans)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--model", type=Path, help="a runs folder with memopt_models.json: simulate too")
    args = parser.parse_args()
    from memopt.recipes import parse_option_value

    options: dict[str, object] = {}
    for option in args.option:
        key, _, value = option.partition("=")
        options[key] = parse_option_value(value)
    if args.seq:
        options["seq_len"] = args.seq
    if args.config:
        os.environ["ORTMODULE_MEMORY_OPT_CONFIG"] = str(args.config.resolve())
    else:
        os.environ.pop("ORTMODULE_MEMORY_OPT_CONFIG", None)
    measure(args.recipe, options, args.batch, args.steps)
    if args.model:  # after the measurement: the simulation's own memory would count in it
        simulate(args.model, args.batch, args.config, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
