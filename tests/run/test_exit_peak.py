"""The whole-run peak counts the job's own exit: a job that allocates at interpreter shutdown
(a module-level object's finalizer, as a runtime's teardown does) peaks there, after every
step, and ``trial`` sees that peak and says the exit binds: one process, two torchrun ranks,
and a recipe (its child process ends the same way).

The figure is the kernel's (``wait4``'s peak RSS of the job's processes): what ``/usr/bin/time
-v`` reports for the same job run by hand."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from support.cli import memopt
from support.processes import assert_gone

pytestmark = pytest.mark.ort  # real ORTModule training jobs

EXIT_BYTES = 300 * 2**20  # what the job's finalizer holds at interpreter shutdown

JOB = f"""
import argparse, os, weakref
import torch
from onnxruntime.training.ortmodule import ORTModule


class Runtime:
    pass


# A module-level object whose finalizer runs at interpreter shutdown, after all the job's
# code: it writes {EXIT_BYTES} bytes, as a runtime's teardown might.
RUNTIME = Runtime()
weakref.finalize(RUNTIME, lambda: len(b"x" * {EXIT_BYTES}))

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
batch = parser.parse_args().batch_size
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
if "RANK" in os.environ:
    torch.distributed.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(model)
model = ORTModule(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(20):
    try:
        loss = model(torch.randn(batch, 64)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    except Exception as err:  # a loop that logs and goes on does not hold memopt's exit back
        print("step failed:", err)
"""

SINGLE = f"{sys.executable} job.py --batch-size {{batch}}"
TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 job.py --batch-size {{batch}}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exit-job")
    (folder / "job.py").write_text(JOB)
    return folder


def test_a_single_process_job_peaks_at_its_exit(folder: Path) -> None:
    run = memopt("trial", "--cmd", SINGLE, "--batch", "4", "--json", "--runs-dir", "runs", cwd=folder)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["outcome"] == "ok"
    during = max(record["peak_bytes"], record["peak_over_run_bytes"])
    assert record["whole_run_peak_bytes"] >= during + EXIT_BYTES * 0.8
    assert record["binding_phase"] == "exit"
    assert record["exit_peak_bytes"] == record["whole_run_peak_bytes"]
    for rank in record["ranks"]:
        assert_gone(rank["pid"])


@pytest.mark.long
def test_torchrun_ranks_exit_and_the_trial_says_the_exit_binds(folder: Path) -> None:
    run = memopt("trial", "--cmd", TORCHRUN, "--batch", "4", "--runs-dir", "runs", cwd=folder)
    assert run.returncode == 0, run.stderr
    whole_run = re.search(r"whole run\s+([\d,.]+) MiB at its peak \((\w[\w-]*)\).*exit included", run.stdout)
    assert whole_run, run.stdout
    assert whole_run.group(2) == "exit"
    per_rank = [float(mib.replace(",", "")) for mib in re.findall(r"\d: ([\d,.]+) MiB", run.stdout)]
    assert len(per_rank) == 2, run.stdout
    assert float(whole_run.group(1).replace(",", "")) >= max(per_rank) + EXIT_BYTES / 2**20 * 0.8


RECIPE = f"""
import weakref
import torch


class Runtime:
    pass


RUNTIME = Runtime()
weakref.finalize(RUNTIME, lambda: len(b"x" * {EXIT_BYTES}))


def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))


def make_batch(batch_size):
    return torch.randn(batch_size, 64), None
"""


def test_a_recipe_trial_counts_its_childs_exit(folder: Path) -> None:
    """With a config: a run without one profiles the kernels in a second session after its
    steps, which no job of the user's runs, so its end is not counted."""
    (folder / "exiting.py").write_text(RECIPE)
    (folder / "config.json").write_text(json.dumps(["Gemm+:1:-1"]))
    run = memopt(
        "trial", "exiting.py", "--batch", "4", "--config", "config.json", "--json", "--runs-dir", "runs", cwd=folder
    )
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    during = max(record["peak_bytes"], record["peak_over_run_bytes"])
    assert record["whole_run_peak_bytes"] >= during + EXIT_BYTES * 0.8
    assert record["binding_phase"] == "exit"


@pytest.mark.long
def test_a_job_that_catches_the_exit_is_ended_and_its_exit_not_measured(folder: Path) -> None:
    """The old path stays as the fallback: a loop that swallows every exception (SystemExit too)
    trains on, memopt ends its group after the grace period and says the exit was not measured."""
    (folder / "stubborn.py").write_text(
        JOB.replace("for step in range(20):", "for step in range(10**9):").replace(
            "except Exception as err:", "except BaseException as err:"
        )
    )
    command = f"{sys.executable} stubborn.py --batch-size {{batch}}"
    run = memopt("trial", "--cmd", command, "--batch", "4", "--json", "--runs-dir", "stubborn-runs", cwd=folder)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["outcome"] == "ok"
    assert record["exit_peak_bytes"] is None and record["binding_phase"] == "steps"
    assert "its exit (atexit, finalizers) is not measured" in (folder / record["run_dir"] / "ort.log").read_text()
    for rank in record["ranks"]:
        assert_gone(rank["pid"])
