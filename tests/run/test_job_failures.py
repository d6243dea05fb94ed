"""What memopt says when a user's job fails, each on the real failure: the failing rank's own
exception instead of torchrun's summary, ORT's sdpa assertion with its fix, a job that ends
before memopt's steps, and the ORT package a command's probe ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.cli import memopt

from memopt.run.explain import explain_failure, failing_line

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2"

# Rank 0 waits for its peer in the process group; rank 1 picks a CUDA device on a machine
# without one, as optimum's ORTTrainer does under torchrun on CPU.
RANK_FAILURE = """\
import os
import torch

if os.environ["LOCAL_RANK"] == "1":
    torch.cuda.set_device(1)
torch.distributed.init_process_group("gloo")
"""

# A Hugging Face GPT-2 with transformers' default attention (sdpa) under ORTModule.
SDPA_JOB = """\
import sys
import torch
from onnxruntime.training.ortmodule import ORTModule
from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16, use_cache=False)
model = ORTModule(GPT2LMHeadModel._from_config(config, attn_implementation="sdpa"))
optimizer = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 100, (int(sys.argv[1]), 16))
for _ in range(5):
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
"""


@pytest.mark.subprocess
@pytest.mark.long
def test_the_failing_ranks_exception_replaces_torchruns_summary(tmp_path: Path) -> None:
    script = tmp_path / "rank_failure.py"
    script.write_text(RANK_FAILURE)
    run = memopt("trial", "--cmd", f"{TORCHRUN} {script} {{batch}}", "--batch", "2", "--runs-dir", str(tmp_path))
    assert run.returncode != 0
    error = run.stderr.strip().splitlines()[-1]
    assert "rank 1: RuntimeError: Found no NVIDIA driver on your system" in error, error
    assert "(at " + str(script) + ":5 in <module>)" in error  # the job's own line, not torch's
    assert "To enable traceback" not in error and "host      :" not in error
    assert "torch.cuda.set_device on a machine without CUDA" in error and "ORTTrainer" in error


@pytest.mark.ort
@pytest.mark.long
def test_sdpa_export_failure_says_to_use_eager_attention(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="needs the hf extra")
    script = tmp_path / "sdpa_job.py"
    script.write_text(SDPA_JOB)
    run = memopt("trial", "--cmd", f"{sys.executable} {script} {{batch}}", "--batch", "2", "--runs-dir", str(tmp_path))
    assert run.returncode != 0
    said = run.stdout + run.stderr
    assert "GradientBuilderBase::O" in said and "was false." in said, said
    assert 'attn_implementation="eager"' in said


@pytest.mark.ort
@pytest.mark.long
def test_a_job_shorter_than_memopts_steps_is_told_to_run_more_steps(tmp_path: Path) -> None:
    command = f"{sys.executable} examples/train_ddp.py --seq 64 --layers 1 --batch-size {{batch}} --max-steps 2"
    run = memopt("trial", "--cmd", command, "--batch", "2", "--steps", "2", "--runs-dir", str(tmp_path), cwd=ROOT)
    assert run.returncode != 0
    said = run.stdout + run.stderr
    assert "ended by itself after 2 training steps; memopt measures 3" in said, said
    assert "raise the job's own step count" in said and "lower --steps" not in said


@pytest.mark.ort
def test_probe_of_a_command_names_the_ort_package(tmp_path: Path) -> None:
    command = f"{sys.executable} examples/train_ddp.py --seq 64 --layers 1 --batch-size {{batch}}"
    run = memopt("probe", "--cmd", command, "--batch", "2", "--runs-dir", str(tmp_path), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "ORT 1.19.2 (onnxruntime-training" in run.stdout and "(None)" not in run.stdout


def test_a_rank_prefixed_exception_is_quoted_with_its_rank() -> None:
    log = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "train.py", line 3, in <module>',
            "[rank0]: ValueError: batch too large for " + "x" * 400,
            "E1124 … failed (exitcode: 1) local_rank: 0",
        ]
    )
    line = failing_line(log)
    assert line is not None and line.startswith("rank 0: ValueError: batch too large for")
    assert line.endswith(" …") and len(line) < 320


def test_a_log_without_an_exception_or_a_known_failure_explains_nothing() -> None:
    assert explain_failure("step 1 loss 3.2\nKilled\n") is None


@pytest.mark.subprocess
def test_tune_runs_a_failing_job_once_and_says_its_error_once(tmp_path: Path) -> None:
    script = tmp_path / "rank_failure.py"
    script.write_text(RANK_FAILURE)
    runs = tmp_path / "runs"
    command = f"{TORCHRUN} {script} {{batch}}"
    run = memopt(
        "tune", "--cmd", command, "--target-batch", "4", "--budget", "1GiB", "--no-tui", "--runs-dir", str(runs)
    )
    assert run.returncode == 2, run.stdout + run.stderr
    # the calibration trial that is also the graph probe ran the job; nothing ran it again
    assert [folder.name.split("-")[0] for folder in runs.iterdir() if folder.is_dir()] == ["trial"]
    said = run.stdout + run.stderr
    assert said.count("Found no NVIDIA driver") == 1, said
    assert run.stderr.strip().splitlines()[-1].startswith("error: the no-config calibration trial at batch 2")


@pytest.mark.ort
def test_tune_of_a_job_shorter_than_its_steps_stops_before_the_probe_is_done(tmp_path: Path) -> None:
    command = f"{sys.executable} examples/train_ddp.py --seq 64 --layers 1 --batch-size {{batch}} --max-steps 2"
    run = memopt(
        "tune", "--cmd", command, "--target-batch", "4", "--budget", "1GiB", "--steps", "2", "--no-tui",
        "--runs-dir", str(tmp_path), cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    said = run.stdout + run.stderr
    assert "[probe] done" not in said and "did not run:" not in said and "recipe_error" not in said, said
    assert said.count("ended by itself after 2 training steps") == 1, said
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the no-config calibration trial at batch 2 did not run to the end (recipe error)")
