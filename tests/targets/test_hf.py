"""hf: targets and model-computed losses under real ORTModule runs on CPU, and entries ORT
ignores flagged after a real trial. Tiny sizes, batch 2, 32 tokens, one measured step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import RECIPES
from support.cli import assert_one_line_error, memopt

pytestmark = pytest.mark.ort  # real ORTModule runs

SMALL = ("--size", "tiny", "--batch", "2", "--seq", "32", "--steps", "1")


# GPT-2 in `make test`; the other four architectures, the same probe of another graph, in `make test-all`.
@pytest.mark.parametrize(
    "name", ["gpt2", *(pytest.param(name, marks=pytest.mark.long) for name in ("llama", "t5", "bert", "qwen2"))]
)
def test_tiny_hf_preset_trains_under_ortmodule(name: str, tmp_path: Path) -> None:
    run = memopt("probe", f"hf:{name}", *SMALL, "--runs-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.run_dir.name.startswith(f"probe-hf-{name}-b2-")
    assert run.record()["result"]["status"] == "ok"
    kept = json.loads((run.run_dir / "config.json").read_text())  # the config the run used
    assert kept["_attn_implementation_autoset"] or kept.get("model_type")
    assert " - Plan 1 " in run.log_path.read_text()  # ORT's own Plan table of the HF graph


def test_hf_config_folder_scans_at_seq_and_target_seq(tmp_path: Path) -> None:
    folder = tmp_path / "my-t5"
    folder.mkdir()
    config = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64, "d_ff": 128}
    config.update(d_kv=16, num_layers=2, num_heads=4, vocab_size=1000)  # no decoder_start_token_id
    (folder / "config.json").write_text(json.dumps(config))
    args = ("--seq", "32", "--target-seq", "16", "--batch", "4", "--runs-dir", str(tmp_path), "--json")
    scan = memopt("scan", f"hf:{folder}", *args)
    assert scan.returncode == 0, scan.stderr
    assert "decoder_start_token_id unset: 0 (pad_token_id" in scan.stderr
    report = json.loads(scan.stdout)
    dims = report["dims"]  # ORT names a dim the inputs share after any one of them
    assert dims["labels_dim1"] == 16 and set(dims.values()) == {4, 32, 16} and report["plans"]
    probe_dir = next(tmp_path.glob("probe-hf-my-t5-b2-*"))
    assert json.loads((probe_dir / "config.json").read_text())["decoder_start_token_id"] == 0


@pytest.mark.parametrize("style", ["dict", "tuple"])
def test_a_model_that_returns_its_loss_needs_no_loss_function(style: str, tmp_path: Path) -> None:
    run = memopt("probe", str(RECIPES / "returns_loss.py"), "--batch", "2", "--steps", "1", "-o", f"style={style}")
    assert run.returncode == 0, run.stderr
    assert run.record()["result"]["losses"][0] > 0


def test_a_loss_that_cannot_be_found_is_a_recipe_error(tmp_path: Path) -> None:
    recipe = str(RECIPES / "returns_loss.py")
    run = memopt("trial", recipe, "--batch", "2", "--steps", "1", "-o", "style=none", "--runs-dir", str(tmp_path))
    assert_one_line_error(run, "the recipe is broken", "without a loss (keys: prediction)", after_backend_line=True)
    failing = memopt("trial", recipe, "--batch", "2", "-o", "fail=true", "--runs-dir", str(tmp_path))
    assert_one_line_error(
        failing,
        "the recipe is broken",
        "make_batch() failed: ValueError: the data loader is empty",
        after_backend_line=True,
    )
    outcomes = [json.loads(line)["outcome"] for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert outcomes == ["recipe_error", "recipe_error"]


def test_trial_flags_an_entry_ort_ignored(tmp_path: Path) -> None:
    run = memopt(
        "trial", "gpt", "--size", "tiny", "--batch", "2", "--steps", "1", "--config", "Gelu+,NoSuchPlan+",
        "--runs-dir", str(tmp_path),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "ON: Gelu+:1:-1" in run.stdout
    assert "ignored      ORT did not report NoSuchPlan+:1:-1 ON" in run.stdout
    (record,) = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert record["plans_off"] == ["NoSuchPlan+:1:-1"] and record["plans_on"] == ["Gelu+:1:-1"]
