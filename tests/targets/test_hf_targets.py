"""hf: targets, model-computed losses, the --seq rule and the checks that keep ignored entries
out of configs: in-process with real transformers models and tiny graphs, no ORT run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from onnx import TensorProto
from support.cli import assert_one_line_error, memopt
from support.graphs import stashed_gelu
from support.logsamples import PLAIN_LOG

from memopt.backends.ort.config import ConfigEntry, ConfigError, OptimizationType, refuse_unknown_entries
from memopt.backends.ort.graph.sizes import resolve_dims, sequence_symbols
from memopt.backends.ort.graph.training_graph import TensorInfo
from memopt.backends.ort.predict.calibration import keep_ort_plans
from memopt.backends.ort.scan import scan_graph
from memopt.backends.ort.trials import requested_off
from memopt.core import RunStatus, parse_target
from memopt.recipes import RecipeError, check_hf_recipe, load_hf_recipe
from memopt.recipes.defaults import default_loss
from memopt.recipes.hf import PRESETS, resolve_hf_target

TINY = {"size": "tiny", "seq_len": 16}


@pytest.mark.parametrize(
    ("name", "model_class", "task"),
    [
        ("gpt2", "GPT2LMHeadModel", "causal-lm"),
        ("llama", "LlamaForCausalLM", "causal-lm"),
        ("qwen2", "Qwen2ForCausalLM", "causal-lm"),
        ("bert", "BertForMaskedLM", "masked-lm"),
        ("t5", "T5ForConditionalGeneration", "seq2seq"),
    ],
)
def test_tiny_preset_trains_with_its_own_loss(name: str, model_class: str, task: str) -> None:
    target = resolve_hf_target(f"hf:{name}", TINY)
    assert (target.model_class, target.task, target.seq_len) == (model_class, task, 16)
    recipe = load_hf_recipe(f"hf:{name}", TINY)
    model = recipe.model()
    assert model.config._attn_implementation == "eager"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000  # fast enough for CPU tests
    inputs, target_tensor = recipe.batch(2)
    assert target_tensor is None and set(inputs) == {"input_ids", "attention_mask", "labels"}
    assert inputs["input_ids"].shape == (2, 16) and bool((inputs["attention_mask"] == 1).all())
    assert inputs["labels"].shape == (2, 16)
    loss = default_loss(model(**inputs), None)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert json.loads(recipe.files["config.json"])["model_type"] == PRESETS[name]["tiny"]["model_type"]


def test_seq2seq_labels_take_target_seq() -> None:
    inputs, _ = load_hf_recipe("hf:t5", {**TINY, "target_seq": 8}).batch(3)
    assert inputs["input_ids"].shape == (3, 16) and inputs["labels"].shape == (3, 8)


def test_classification_has_one_label_per_row_and_a_pad_token(tmp_path: Path) -> None:
    target = resolve_hf_target("hf:gpt2", {**TINY, "hf_task": "sequence-classification"})
    assert target.model_class == "AutoModelForSequenceClassification"
    assert target.config.pad_token_id is not None and any("pad_token_id" in note for note in target.notes)
    inputs, _ = load_hf_recipe("hf:gpt2", {**TINY, "hf_task": "sequence-classification"}).batch(4)
    assert inputs["labels"].shape == (4,)


def test_base_presets_are_the_public_shapes() -> None:
    gpt2 = resolve_hf_target("hf:gpt2", {}).config
    assert (gpt2.n_layer, gpt2.n_embd, gpt2.vocab_size) == (12, 768, 50257)
    bert = resolve_hf_target("hf:bert", {}).config
    assert (bert.num_hidden_layers, bert.hidden_size, bert.vocab_size) == (12, 768, 30522)
    assert resolve_hf_target("hf:t5", {}).seq_len == 128


def test_config_file_and_folder_with_overrides(tmp_path: Path) -> None:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64}
    config.update(intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=500)
    (tmp_path / "config.json").write_text(json.dumps(config))
    for spec in (f"hf:{tmp_path}", f"hf:{tmp_path / 'config.json'}"):
        target = resolve_hf_target(spec, {"seq_len": 8, "num_hidden_layers": 3})
        assert target.config.num_hidden_layers == 3 and target.config.vocab_size == 500
        assert target.config.use_cache is False  # a training step needs no KV cache
    assert parse_target(f"hf:{tmp_path}").label == f"hf-{tmp_path.name}"
    assert parse_target(f"hf:{tmp_path}/config.json").label == f"hf-{tmp_path.name}"
    assert parse_target("hf:gpt2").label == "hf-gpt2" and parse_target("gpt").label == "gpt"
    before = parse_target(f"hf:{tmp_path}").identity()
    assert before == parse_target(f"hf:{tmp_path / 'config.json'}").identity()
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 4}))
    assert parse_target(f"hf:{tmp_path}").identity() != before  # the journal does not reuse trials of another model


def test_missing_decoder_start_token_is_defaulted_and_said(tmp_path: Path) -> None:
    path = tmp_path / "t5.json"
    path.write_text(json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64}))
    notes = check_hf_recipe(f"hf:{path}", {})
    assert len(notes) == 1 and "decoder_start_token_id unset: 0 (pad_token_id" in notes[0]
    assert resolve_hf_target(f"hf:{path}", {}).config.decoder_start_token_id == 0


def test_no_architecture_needs_a_task(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    with pytest.raises(RecipeError, match="names no architectures; give --hf-task"):
        resolve_hf_target(f"hf:{tmp_path}", {})
    target = resolve_hf_target(f"hf:{tmp_path}", {"hf_task": "masked-lm"})
    assert (target.model_class, target.task) == ("AutoModelForMaskedLM", "masked-lm")


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("hf:gpt2", {"attn_implementation": "sdpa"}, "ORTModule cannot export Hugging Face's sdpa attention"),
        ("hf:llama", {"attn_implementation": "flash_attention_2"}, "leave attn_implementation at eager"),
        ("hf:gpt2", {"n_layers": 2}, "its gpt2 config has no field 'n_layers'"),
        ("hf:gpt2", {"n_layer": "abc"}, "-o n_layer='abc': its gpt2 config holds an integer there"),
        ("hf:gpt2", {"n_layer": 2.5}, "-o n_layer=2.5: its gpt2 config holds an integer there"),
        ("hf:gpt2", {"use_cache": "yes"}, "-o use_cache='yes': its gpt2 config holds a boolean there"),
        ("hf:gpt2", {"size": "huge"}, "has sizes base, tiny, not 'huge'"),
        ("hf:gpt2", {"size": "tiny", "seq_len": 4096}, "--seq 4096 exceeds the model's 128 positions"),
        ("hf:gpt2", {"target_seq": 8}, "--target-seq applies to seq2seq models"),
        ("hf:gpt2", {"hf_task": "vision"}, "--hf-task must be one of causal-lm"),
        ("hf:no/such/folder", {}, "not a preset (gpt2, llama, qwen2, bert, t5) nor a config.json"),
    ],
)
def test_bad_hf_targets_are_recipe_errors(spec: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_hf_recipe(spec, options)


def test_without_transformers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # what an environment without it sees
    with pytest.raises(RecipeError, match=r"hf: targets need the hf extra: pip install 'memopt\[hf\]'"):
        load_hf_recipe("hf:gpt2", TINY)


@pytest.mark.subprocess
def test_cli_refuses_sdpa_and_hf_flags_on_other_recipes() -> None:
    sdpa = memopt("probe", "hf:gpt2", "--size", "tiny", "-o", "attn_implementation=sdpa", "--batch", "2")
    assert_one_line_error(sdpa, "ORTModule cannot export", "eager")
    flag = memopt("probe", "gpt", "--hf-task", "causal-lm", "--batch", "2")
    assert_one_line_error(flag, "--hf-task applies to hf: targets")


_CONFIG_ONLY = """
import os, sys
from memopt.recipes import RecipeError, check_hf_recipe, load_hf_recipe
notes = check_hf_recipe("hf:llama", {"size": "tiny", "num_hidden_layers": 32})
assert "torch" not in sys.modules and "USE_TORCH" not in os.environ, "torch imported or the switch left set"
try:
    load_hf_recipe("hf:llama", {"size": "tiny"}).build_model()
except RecipeError as err:
    print(err)
"""


@pytest.mark.subprocess
def test_the_up_front_check_reads_the_config_without_torch() -> None:
    # What memopt's own process does before every run: no torch (seconds of CPU, hundreds of
    # MiB), and a model built after it in that process is refused in one line, not a traceback.
    done = subprocess.run([sys.executable, "-c", _CONFIG_ONLY], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "without torch and cannot build the model" in done.stdout


# --- losses a model returns ---


def test_default_loss_takes_the_models_own_loss() -> None:
    loss = torch.tensor(2.5)
    logits = torch.randn(2, 3)
    assert default_loss(OrderedDict(loss=loss, logits=logits), None) is loss
    assert default_loss({"loss": loss}, None) is loss
    assert default_loss((loss, logits), None) is loss
    assert default_loss([loss], torch.tensor([0, 1])) is loss
    # a tuple whose first item is not a scalar keeps the old meaning: the output to score
    assert default_loss((logits,), torch.tensor([0, 1])).dim() == 0


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"logits": torch.randn(2, 3)}, "without a loss \\(keys: logits\\)"),
        ((), "empty tuple"),
        ("text", "returned str, not a tensor or a loss"),
    ],
)
def test_default_loss_that_cannot_be_derived_is_a_recipe_error(output: object, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        default_loss(output, None)


# --- --seq: token-sequence inputs; --target-seq: labels and decoder inputs ---


def _inputs(**dims: tuple[str, ...]) -> dict[str, TensorInfo]:
    return {name: TensorInfo(TensorProto.INT64, shape) for name, shape in dims.items()}


def test_seq_sets_token_inputs_and_target_seq_the_target_side() -> None:
    inputs = _inputs(
        input_ids=("b", "src"), attention_mask=("b", "src"), labels=("b", "tgt"), decoder_input_ids=("b", "tgt")
    )
    inputs["pixel_values"] = TensorInfo(TensorProto.FLOAT, ("b", "c"))
    known = frozenset({"b", "src", "tgt", "c"})
    assert sequence_symbols(inputs) == ("src",)
    assert sequence_symbols(inputs, target_side=True) == ("tgt",)
    assert resolve_dims(inputs, known, seq=64) == {"src": 64, "tgt": 64}  # labels follow --seq by default
    assert resolve_dims(inputs, known, seq=64, target_seq=16) == {"src": 64, "tgt": 16}
    assert resolve_dims(inputs, known, target_seq=16, defaults={"src": 32}) == {"src": 32, "tgt": 16}


def test_one_label_per_row_is_no_sequence() -> None:
    inputs = _inputs(input_ids=("b", "s"), labels=("b",))
    assert sequence_symbols(inputs, target_side=True) == ()
    with pytest.raises(Exception, match="--target-seq: this graph has no such dynamic dim"):
        resolve_dims(inputs, frozenset({"b", "s"}), target_seq=8)


# --- entries ORT would ignore ---


def test_plans_outside_orts_table_are_left_out_and_said() -> None:
    report = scan_graph(stashed_gelu(), "1.19.2")
    assert [p.key for p in report.patterns] == ["Gelu+:1:-1"]
    kept, refused = keep_ort_plans(report, frozenset({"Gelu+:1"}))
    assert kept.patterns == report.patterns and refused == ()
    kept, refused = keep_ort_plans(report, frozenset({"BiasGelu+:1"}))
    assert kept.patterns == () and refused == (
        "Gelu+: not in the Plan table ORT printed for this model (no Gelu+:1), so ORT would ignore it; left out",
    )
    assert keep_ort_plans(report, None) == (report, ())  # no table to check against: kept as is


def test_emitting_an_entry_orts_table_lacks_is_refused() -> None:
    known = {"Gelu+:1", "Add+:1"}
    refuse_unknown_entries([ConfigEntry("Gelu+", OptimizationType.RECOMPUTE, -1)], known, "log")
    refuse_unknown_entries([ConfigEntry("Nope+", OptimizationType.DISABLED, -1)], known, "log")  # enables nothing
    with pytest.raises(ConfigError, match="Nope\\+:1:-1: ORT printed no plan by that name for this model \\(log\\)"):
        refuse_unknown_entries([ConfigEntry("Nope+", OptimizationType.RECOMPUTE, -1)], known, "log")
    with pytest.raises(ConfigError, match="no plan with that type"):
        refuse_unknown_entries([ConfigEntry("Gelu+", OptimizationType.COMPROMISE, -1)], known, "log")


def test_requested_entries_orts_table_did_not_report_on() -> None:
    entries = (
        ConfigEntry("Gelu+", OptimizationType.RECOMPUTE, -1),
        ConfigEntry("Reshape+", OptimizationType.RECOMPUTE, -1),
        ConfigEntry("Off+", OptimizationType.DISABLED, -1),
    )
    # ORT's combined cell counts for each of its parts
    assert requested_off(entries, ("LayerNormalization+:1:-1,Reshape+:1:-1",)) == ("Gelu+:1:-1",)
    assert requested_off(entries, ("Gelu+:1:-1", "Reshape+:1:-1")) == ()


def test_the_tuner_hands_back_only_what_ort_applied() -> None:
    from memopt.backends.ort.applied import applied_plans, plans_left_off
    from memopt.core.trial import Outcome, TrialResult
    from memopt.tune.events import Purpose, TrialRecord

    result = TrialResult(
        key="k",
        target=parse_target("gpt"),
        options={},
        batch_size=4,
        config=("Gelu+:1:-1", "Add+:1:-1"),
        config_value=None,
        outcome=Outcome.OK,
        status=RunStatus.OK,
        run_dir="fake",
        steps=2,
        plans_on=("Gelu+:1:-1",),
        plans_seen=5,
    )
    plans = ("Gelu+:1:-1", "Add+:1:-1")
    assert plans_left_off(result, plans) == ("Add+:1:-1",) and applied_plans(result, plans) == ("Gelu+:1:-1",)
    record = TrialRecord(1, Purpose.SEARCH, plans, None, "test", result, plans_left_off(result, plans))
    assert record.left_off == ("Add+:1:-1",) and record.applied_plans == ("Gelu+:1:-1",)


@pytest.mark.subprocess
def test_config_emit_with_a_log_refuses_unknown_entries(tmp_path: Path) -> None:
    refused = memopt("config", "emit", "Gelu+", "Nope+", "--log", str(PLAIN_LOG), "--out", str(tmp_path / "c.json"))
    assert_one_line_error(refused, "Nope+:1:-1: ORT printed no plan by that name", "would ignore this entry")
    assert not (tmp_path / "c.json").exists()
    unchecked = memopt("config", "emit", "Nope+", "--ort-version", "1.18")
    assert unchecked.returncode == 0 and "not checked against the model's plans" in unchecked.stderr


def test_journal_identity_resolves_names_as_the_loader_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert parse_target("hf:gpt2").identity() == "hf:gpt2"  # the preset, as the loader takes it, not the folder
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_target("hf:~/gpt2").identity() == parse_target(f"hf:{tmp_path / 'gpt2'}").identity()
