"""A verdict that covers the whole run: a job whose start-up peaks above its training steps is
over a budget its steps fit in, says that start-up binds, and tune stops there instead of
adding recompute that cannot lower it.

The job has the shape of a Hugging Face training script: an HF model (a small GPT-2) that
ORTModule exports at its first forward, most of its peak fixed (runtime, weights, AdamW:
about 83% of the steps' peak without the dataset), and a dataset held while the model is
built and exported, as a tokenizer or a data loader holds one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.cli import memopt

pytestmark = pytest.mark.ort  # real ORTModule training jobs

JOB = """
import argparse
import torch
from onnxruntime.training.ortmodule import ORTModule
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
batch = parser.parse_args().batch_size
dataset = b"x" * (400 * 2**20)  # start-up: held until the model is exported (its first forward)
config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=8000, n_positions=128, attn_implementation="eager")
model = ORTModule(GPT2LMHeadModel(config))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(20):
    ids = torch.randint(0, config.vocab_size, (batch, 64))
    loss = model(input_ids=ids, labels=ids).loss
    if step == 0:
        del dataset
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("start-up-job")
    (folder / "job.py").write_text(JOB)
    return f"{sys.executable} job.py --batch-size {{batch}}", folder


@pytest.fixture(scope="module")
def unbudgeted(job: tuple[str, Path]) -> dict:
    command, folder = job
    run = memopt("trial", "--cmd", command, "--batch", "4", "--json", "--runs-dir", "runs", cwd=folder)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.long
def test_the_whole_run_peak_counts_start_up(unbudgeted: dict) -> None:
    assert unbudgeted["binding_phase"] == "start-up"
    assert unbudgeted["whole_run_peak_bytes"] > unbudgeted["peak_bytes"] + 300 * 2**20


@pytest.mark.long
def test_a_budget_the_steps_fit_in_is_over_at_start_up(job: tuple[str, Path], unbudgeted: dict) -> None:
    command, folder = job
    budget = (unbudgeted["peak_bytes"] + unbudgeted["whole_run_peak_bytes"]) // 2
    run = memopt("trial", "--cmd", command, "--batch", "4", "--budget", f"{budget}B", "--runs-dir", "runs", cwd=folder)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "over budget" in run.stdout and "start-up" in run.stdout and "recompute cannot lower it" in run.stdout


@pytest.mark.long
def test_tune_stops_where_start_up_binds(job: tuple[str, Path], unbudgeted: dict) -> None:
    command, folder = job
    budget = (unbudgeted["peak_bytes"] + unbudgeted["whole_run_peak_bytes"]) // 2
    run = memopt(
        "tune", "--cmd", command, "--target-batch", "4", "--budget", f"{budget}B", "--no-tui", "--runs-dir", "runs",
        cwd=folder,
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    assert "recompute cannot lower it" in run.stdout + run.stderr
