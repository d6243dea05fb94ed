"""Models whose forward returns only their loss (the loss runs inside ORT's graph).

The recipe option that trains any recipe that way, and the scan's parity at the loss
boundary on real captures (sample_logs/: ``*-lossonly`` graphs and the Plan tables ORT
1.17.3, 1.18.0 and 1.19.2 printed for them).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from onnx import TensorProto
from support.cli import memopt
from torch import nn

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.scan import scan_graph
from memopt.backends.ort.scan.parity import captured_parity, logged_parity
from memopt.backends.ort.stack import inspect_stack
from memopt.child.steps import LossOnly
from memopt.recipes import RecipeError, load_hf_recipe, load_recipe
from memopt.recipes.defaults import default_loss

SAMPLES = Path(__file__).parents[4] / "sample_logs"

# Plan rows at the boundary to the loss, as each release printed them: config cell -> frequency.
LOSS_BOUNDARY_ROWS: dict[str, dict[str, dict[str, int]]] = {
    "1.17.3": {
        "gpt-lossonly": {"Gelu+Reshape+:1:-1": 1},
        "hf-bert-lossonly": {"Gelu+Reshape+:1:-1": 1},
        "hf-gpt2-lossonly": {"LayerNormalization+Reshape+Slice+Reshape+:1:-1": 1},
    },
    "1.18.0": {
        "gpt-lossonly": {"LayerNormalization+Reshape+:1:-1": 1},
        "bert-lossonly": {"Reshape+Sub+NonZero+Squeeze+:1:-1": 1},
        "hf-gpt2-lossonly": {"LayerNormalization+Reshape+Slice+Reshape+:1:-1": 1},
        "hf-llama-lossonly": {"SimplifiedLayerNormalization+Slice+Reshape+:1:-1": 1},
        "hf-t5-lossonly": {"SimplifiedLayerNormalization+Dropout+Mul+Reshape+:1:-1": 1},
    },
    "1.19.2": {
        "gpt-lossonly": {"LayerNormalization+:1:-1,Reshape+:1:-1": 1},
        "hf-gpt2-lossonly": {"Reshape+Slice+Reshape+:1:-1": 1, "Slice+Reshape+:1:-1": 1},
        "hf-llama-lossonly": {"Slice+Reshape+:1:-1": 2},
        "hf-qwen2-lossonly": {"Slice+Reshape+:1:-1": 2},
        "hf-t5-lossonly": {"Mul+Reshape+:1:-1": 1},
    },
}


def test_every_recipe_takes_loss_only() -> None:
    recipe = load_recipe("gpt", {"size": "tiny", "loss_only": True})
    assert recipe.loss_only and "loss_only" not in recipe.options
    assert load_hf_recipe("hf:gpt2", {"size": "tiny", "loss_only": True}).loss_only
    assert not load_recipe("gpt", {"size": "tiny"}).loss_only


def test_loss_only_must_be_true_or_false() -> None:
    with pytest.raises(RecipeError, match=r"-o loss_only=yes is not true or false"):
        load_recipe("gpt", {"loss_only": "yes"})


def test_loss_only_model_returns_the_recipes_loss() -> None:
    recipe = load_recipe("gpt", {"size": "tiny"})
    assert recipe.loss is not None
    model = recipe.model().eval()  # no dropout: both calls see the same network
    (tokens,), target = recipe.batch(2)
    bundled = LossOnly(model, recipe.loss, takes_target=True)
    assert torch.equal(bundled(tokens, target), recipe.loss(model(tokens), target))


class _NamedInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features)


def test_loss_only_model_takes_a_dict_batchs_target_by_name() -> None:
    model = _NamedInputs()
    features, target = torch.randn(5, 4), torch.randint(0, 3, (5,))
    loss = LossOnly(model, default_loss, takes_target=True)(features=features, target=target)
    assert loss.dim() == 0 and torch.equal(loss, default_loss(model(features), target))


def test_tensors_ort_made_untyped_are_typed_by_onnx_inference() -> None:
    """GPT-2's label shift: ORT's transformers made the Slice and the Reshape before the LM
    head; the saved graph has no value_info for them, ORT's session does."""
    graph = load_graph(SAMPLES / "graphs" / "1.19.2" / "hf-gpt2-lossonly.onnx")
    reshaped = graph.tensor("/_original_module/model/Reshape_output_0_token_4")
    assert reshaped.elem_type == TensorProto.FLOAT and reshaped.dims == (None, 32)
    labels = graph.tensor("/_original_module/model/Slice_1_output_0_token_3")
    assert labels.elem_type == TensorProto.INT64 and labels.dims == ("labels_dim0", None)


@pytest.mark.parametrize("release", sorted(LOSS_BOUNDARY_ROWS))
def test_loss_boundary_rows_agree_with_the_release(release: str) -> None:
    for model, rows in LOSS_BOUNDARY_ROWS[release].items():
        parity = {p.key: p for p in captured_parity(SAMPLES, release, model, "no-config").plans}
        for key, frequency in rows.items():
            assert key in parity, (model, key)
            assert parity[key].agrees and parity[key].log_frequency == frequency, (model, parity[key])


def test_each_differing_row_is_one_line() -> None:
    release, model = "1.19.2", "hf-llama-lossonly"
    log = SAMPLES / release / f"{model}-no-config-info.log"
    patterns = scan_graph(load_graph(SAMPLES / "graphs" / release / f"{model}.onnx"), release).patterns
    dropped, changed, *rest = patterns
    parity = logged_parity([replace(changed, frequency=changed.frequency + 1), *rest], log)
    assert parity is not None
    assert sorted(parity.differences()) == sorted(
        [
            f"{dropped.key}: in ORT's table (frequency {dropped.frequency}), not in memopt's",
            f"{changed.key}: frequency {changed.frequency + 1} in memopt's table, {changed.frequency} in ORT's",
        ]
    )


@pytest.mark.ort
def test_scan_of_a_loss_only_recipe_checks_itself_against_its_probe(tmp_path: Path) -> None:
    run = memopt("scan", "gpt", "--size", "tiny", "-o", "loss_only=true", "--json", "--runs-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["differences_from_ort"] == []
    if inspect_stack().ort_version == "1.19.2":
        assert "LayerNormalization+:1:-1,Reshape+:1:-1" in {plan["config"] for plan in report["plans"]}


@pytest.mark.subprocess
def test_a_dim_ort_leaves_unnamed_keeps_only_its_plans_symbolic() -> None:
    graph = SAMPLES / "graphs" / "1.19.2" / "hf-gpt2-lossonly.onnx"
    run = memopt("scan", str(graph), "--ort-version", "1.19.2", "--batch", "4", "--seq", "16", "--json")
    assert run.returncode == 0, run.stderr
    assert "ORT knows no size for empty_dim_param0" in run.stderr
    savings = {plan["config"]: plan["saving_bytes"] for plan in json.loads(run.stdout)["plans"]}
    assert savings.pop("Reshape+Slice+Reshape+:1:-1") is None
    assert savings["Slice+Reshape+:1:-1"] == 8 * 4 * 15  # the labels shifted by one, int64
    assert all(value is not None for value in savings.values())
