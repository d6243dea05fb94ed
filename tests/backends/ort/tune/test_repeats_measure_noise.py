"""A run that misses a spike does not verify: ``tune`` runs a config again before calling it
verified, and a spike in one of those runs (the end of one rank's life, the exit of a
recipe's child) is over the budget or inside the noise the repeats measured.

Real jobs: a two-rank torchrun job and a recipe, each with a finalizer that writes 200 MiB at
interpreter shutdown in the second run at the target batch only, counted in a file the test
hands it. One run of each is measured first, without the spike, to set a budget just above it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.cli import CliRun, memopt

pytestmark = [pytest.mark.ort, pytest.mark.subprocess, pytest.mark.long]

SPIKE_BYTES = 200 * 2**20
SPIKE = f"""
import os, weakref


class Runtime:
    counted = False


def _spike_in_the_second_run(batch_size):
    # Counted once per process, by one process only (rank 1 of a job), at the target batch only.
    counter = os.environ.get("SPIKE_COUNTER")
    if not counter or batch_size != 4 or os.environ.get("RANK", "1") != "1" or RUNTIME.counted:
        return
    RUNTIME.counted = True
    runs = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(runs))
    if runs == 2:
        weakref.finalize(RUNTIME, lambda: len(b"x" * {SPIKE_BYTES}))


RUNTIME = Runtime()
"""

JOB = (
    SPIKE
    + """
import argparse
import torch
from onnxruntime.training.ortmodule import ORTModule

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
batch = parser.parse_args().batch_size
_spike_in_the_second_run(batch)
torch.distributed.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
)
model = ORTModule(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(4):
    model(torch.randn(batch, 64)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
"""
)

RECIPE = (
    SPIKE
    + """
import torch


def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


def make_batch(batch_size):
    _spike_in_the_second_run(batch_size)
    return torch.randn(batch_size, 64), None
"""
)

TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 job.py --batch-size {{batch}}"


def _whole_run_peak(folder: Path, *target: str) -> int:
    """One run at batch 4 without the spike, as tune's own runs measure it: its whole-run peak."""
    run = memopt(
        "tune", *target, "--target-batch", "4", "--steps", "2", "--calibrate", "2", "--repeats", "1",
        "--budget", "64GiB", "--no-tui", "--json", "--runs-dir", "measure", cwd=folder,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return int(json.loads(run.stdout)["best"]["whole_run_peak_bytes"])


def _tune(folder: Path, budget: int, *target: str) -> CliRun:
    return memopt(
        "tune", *target, "--target-batch", "4", "--steps", "2", "--calibrate", "2", "--max-trials", "2",
        "--budget", f"{budget}B", "--no-tui", "--runs-dir", "tune", cwd=folder,
        env={"SPIKE_COUNTER": str(folder / "count")},
    )  # fmt: skip


def test_a_two_rank_jobs_spike_in_a_repeat_unverifies_its_config(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    # The budget leaves 25 MiB above a run without the spike: one run of no config fits with
    # room to spare, and before repeats that one run was "verified" while a re-run went over.
    run = _tune(tmp_path, _whole_run_peak(tmp_path, "--cmd", TORCHRUN) + 25 * 2**20, "--cmd", TORCHRUN)
    assert (tmp_path / "count").read_text().strip() not in ("", "1"), run.stderr  # a repeat ran
    assert run.returncode == 3, run.stdout + run.stderr  # nothing verified
    journal = [json.loads(line) for line in (tmp_path / "tune" / "journal.jsonl").read_text().splitlines()]
    at_target = [r for r in journal if r.get("batch_size") == 4 and not r.get("kind")]
    assert any(r["outcome"] == "over_budget" for r in at_target), at_target  # the spiked repeat
    assert "over budget, whole-run peak" in run.stderr
    # --no-tui says the verdict on stdout, not only where the journal is
    assert run.stdout.splitlines()[0].startswith(("# within_noise: ", "# impossible: ", "# max_trials: ")), run.stdout


def test_a_no_config_answer_measures_its_exit(tmp_path: Path) -> None:
    """A no-config run profiled its kernels in a second session after its steps, so its own exit
    went unmeasured: a recipe whose child holds 200 MiB more at its exit was verified on its steps."""
    (tmp_path / "exiting.py").write_text(RECIPE.replace("if runs == 2:", "if True:"))
    steps = memopt("trial", "exiting.py", "--batch", "4", "--steps", "2", "--json", "--runs-dir", "m", cwd=tmp_path)
    assert steps.returncode == 0, steps.stderr
    run = _tune(tmp_path, json.loads(steps.stdout)["peak_bytes"] + 30 * 2**20, "exiting.py")
    assert run.returncode == 3, run.stdout + run.stderr  # the exit does not fit: nothing verified
    assert "over budget, whole-run peak" in run.stderr and "(the exit's;" in run.stderr, run.stderr
    assert "the job's exit" in run.stdout, run.stdout
