"""`memopt scan <graph> --json` on the tiny Hugging Face models of sample_logs/ (ORT 1.19.2).

Each graph is the execution graph ORTModule 1.19.2 saved for a tiny random-init model
(sample_logs/hf_tiny.py: Trainer-style batch of 4, the model's own loss); the log beside it
is what ORT printed for that model and batch. The scan of the graph alone must list the
same Configs cells with the same frequencies. No ORT session runs: the CLI reads the saved
graph alone (no session graph beside it: ORT's node indices are approximated by position).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import memopt

from memopt.backends.ort.logparse import parse_file

SAMPLES = Path(__file__).parents[4] / "sample_logs"
RELEASE = "1.19.2"
BATCH, SEQ = 4, 16  # what capture.py gave sample_logs/hf_tiny.py
HF_MODELS = ("hf-gpt2", "hf-llama", "hf-t5", "hf-bert", "hf-qwen2")


@pytest.mark.parametrize("model", HF_MODELS)
@pytest.mark.subprocess
def test_scan_json_lists_the_cells_and_frequencies_ort_printed(model: str) -> None:
    summary = [s for s in parse_file(SAMPLES / RELEASE / f"{model}-no-config-info.log").summaries if s.plans][-1]
    graph = SAMPLES / "graphs" / RELEASE / f"{model}.onnx"
    run = memopt("scan", str(graph), "--ort-version", RELEASE, "--batch", str(BATCH), "--seq", str(SEQ), "--json")
    assert run.returncode == 0, run.stderr
    scanned = {plan["config"]: plan["frequency"] for plan in json.loads(run.stdout)["plans"]}
    assert scanned == {plan.key: plan.frequency for plan in summary.plans}


def test_every_hf_model_was_captured_on_every_release() -> None:
    for release in ("1.17.3", "1.18.0", RELEASE):
        for model in HF_MODELS:
            assert (SAMPLES / "graphs" / release / f"{model}.onnx").is_file()
            assert (SAMPLES / release / f"{model}-no-config-info.log").is_file()
