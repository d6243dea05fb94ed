"""hf: image classifiers (ViT, ConvNeXt configs with random weights, nothing downloaded) as
targets of the torch back end, and every --hf-task that cannot build a config refused in one
line. In this process with real transformers models; the command line in real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.cli import assert_one_line_error, memopt

from memopt.recipes import RecipeError, load_hf_recipe
from memopt.recipes.defaults import default_loss

VIT = {
    "model_type": "vit",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "image_size": 32,
    "patch_size": 8,
    "num_labels": 10,
}
CONVNEXT = {
    "model_type": "convnext",
    "architectures": ["ConvNextForImageClassification"],
    "num_stages": 2,
    "hidden_sizes": [16, 32],
    "depths": [1, 1],
    "image_size": [32, 48],
    "num_labels": 10,
}


def _config(tmp_path: Path, fields: dict[str, object]) -> str:
    path = tmp_path / f"{fields['model_type']}.json"
    path.write_text(json.dumps(fields))
    return f"hf:{path}"


@pytest.mark.parametrize(
    ("fields", "options", "shape"),
    [(VIT, {"hf_task": "image-classification"}, (3, 3, 32, 32)), (CONVNEXT, {}, (3, 3, 32, 48))],
)
def test_an_image_classifier_trains_on_random_pixels_and_labels(
    tmp_path: Path, fields: dict[str, object], options: dict[str, object], shape: tuple[int, ...]
) -> None:
    recipe = load_hf_recipe(_config(tmp_path, fields), options)
    model = recipe.model().train()
    inputs, target = recipe.batch(3)
    assert set(inputs) == {"pixel_values", "labels"} and target is None
    assert tuple(inputs["pixel_values"].shape) == shape and inputs["pixel_values"].dtype == torch.float32
    assert tuple(inputs["labels"].shape) == (3,) and int(inputs["labels"].max()) < 10
    loss = default_loss(model(**inputs), target)
    loss.backward()
    assert loss.dim() == 0 and all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    ("fields", "options", "message"),
    [
        (VIT, {"hf_task": "sequence-classification"}, "--hf-task sequence-classification cannot build a vit model"),
        (VIT, {"hf_task": "causal-lm"}, "it takes --hf-task image-classification"),
        (VIT, {"hf_task": "image-classification", "seq_len": 16}, "classifies images"),
        (
            {**VIT, "image_size": "big"},
            {"hf_task": "image-classification"},
            "image_size is 'big', not a size in pixels",
        ),
    ],
)
def test_a_task_that_cannot_build_the_config_is_refused(
    tmp_path: Path, fields: dict[str, object], options: dict[str, object], message: str
) -> None:
    with pytest.raises(RecipeError, match=message):
        load_hf_recipe(_config(tmp_path, fields), options)


@pytest.mark.subprocess
def test_the_cli_refuses_a_task_the_config_cannot_take_in_one_line(tmp_path: Path) -> None:
    """It was a 73-line traceback from inside transformers."""
    spec = _config(tmp_path, VIT)
    for args in (("scan", spec), ("trial", spec, "-b", "2")):
        run = memopt(
            *args, "--hf-task", "sequence-classification", "--backend", "torch", "--runs-dir", str(tmp_path / "runs")
        )
        assert_one_line_error(run, "cannot build a vit model", "it takes --hf-task image-classification")
    assert not (tmp_path / "runs").exists()


@pytest.mark.torch
def test_scan_trial_and_tune_take_an_image_classifier(tmp_path: Path) -> None:
    vit, convnext, runs = _config(tmp_path, VIT), _config(tmp_path, CONVNEXT), str(tmp_path / "runs")
    scan = memopt("scan", vit, "--hf-task", "image-classification", "--backend", "torch", "-b", "2", "--fake")
    assert scan.returncode == 0, scan.stderr
    assert "vit.encoder.layer.*: *" in scan.stdout
    trial = memopt("trial", convnext, "-b", "2", "--backend", "torch", "--runs-dir", runs)
    assert trial.returncode == 0, trial.stderr
    assert "batch 2, no recompute: peak" in trial.stdout
    tune = ("tune", vit, "--hf-task", "image-classification", "--target-batch", "4", "--budget", "8GiB")
    done = memopt(*tune, "--no-tui", "--json", "--backend", "torch", "--runs-dir", runs)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "verified"
