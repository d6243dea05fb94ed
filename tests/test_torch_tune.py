"""The torch back end's trial and tune through the command line, in processes that cannot import
onnxruntime: real plain-PyTorch training steps in memopt's child process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, memopt
from support.torch_steps import without_onnxruntime

from memopt.recompute import POLICY_ENV, RecomputePolicy

# Eight tiny GPT blocks at 256 x 64 tokens: activations (about 0.8 GiB) well above the
# runtime's own RSS, so a budget between them needs recompute.
GPT = ("gpt", "--size", "tiny", "--seq", "64", "-o", "n_layer=8")
BATCH = 256


@pytest.mark.torch
def test_tune_without_onnxruntime_ends_verified_with_the_export_line(tmp_path: Path) -> None:
    env = without_onnxruntime(tmp_path)
    runs = tmp_path / "runs"
    plain = memopt("trial", *GPT, "--batch", str(BATCH), "--runs-dir", str(runs), "--json", env=env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines()[0].startswith("backend: torch (ORTModule cannot run here: onnxruntime-training")
    peak = json.loads(plain.stdout)["peak_bytes"]
    budget = peak - 300 * 2**20
    tuned = memopt(
        "tune",
        *GPT,
        "--target-batch",
        str(BATCH),
        "--budget",
        f"{budget}B",
        "--no-tui",
        "--runs-dir",
        str(runs),
        env=env,
    )
    assert tuned.returncode == 0, tuned.stderr
    assert tuned.stderr.splitlines()[0].startswith("backend: torch")
    assert "measurement: verified" in tuned.stderr
    export = re.search(rf"^export {POLICY_ENV}=(\S+)$", tuned.stdout, re.MULTILINE)
    assert export is not None, tuned.stdout
    policy = RecomputePolicy.read(Path(export.group(1)))
    assert policy.plans  # the budget needed recompute
    records = [json.loads(line) for line in (runs / "journal.jsonl").read_text().splitlines()]
    verified = [r for r in records if r["plans"] == [str(p) for p in policy.plans]]
    assert verified and verified[-1]["peak_bytes"] <= budget


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("scan", "gpt", "--backend", "tensorflow"), ("--backend 'tensorflow': choose ort or torch",)),
        (("tune", "gpt", "--backend", "torch", "--target-batch", "4", "--budget", "1GiB"), ("use --no-tui",)),
        (
            ("trial", "gpt", "--size", "tiny", "--batch", "2", "--backend", "torch", "--config", "blocks.*: gleu"),
            ("has no op aten.gleu",),
        ),
        (
            ("trial", "--backend", "torch", "--batch", "2", "--cmd", "python train.py"),
            ("--backend torch runs recipes, not cmd:python train.py",),
        ),
    ],
)
def test_bad_torch_backend_input_is_one_error_line(
    tmp_path: Path, args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    assert_one_line_error(memopt(*args, "--runs-dir", str(tmp_path)), *fragments)
