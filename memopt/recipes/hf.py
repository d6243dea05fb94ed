"""Hugging Face models named by their config: ``hf:NAME`` presets and ``hf:PATH`` config files.

The model is built from the config alone with random weights (peak memory does not depend
on weight values; nothing is downloaded, the hub is kept offline), with eager attention,
the one ORTModule exports. The batch is what a ``Trainer`` gets from a padding tokenizer:
``input_ids``, ``attention_mask`` (ones) and ``labels``; for an image classifier, random
``pixel_values`` at the config's image size and ``labels``; the loss is the model's own.

Options: ``size`` (a preset's ``tiny`` or ``base``), ``seq_len`` (tokens per row),
``target_seq`` (seq2seq decoder labels, default ``seq_len``), ``hf_task`` (when the config
names no architecture) and any config field (``-o n_layer=4``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memopt.recipes import RecipeError

__all__ = [
    "ATTENTION_LIMIT",
    "HF_PREFIX",
    "HF_TASKS",
    "PRESETS",
    "HfModelSpec",
    "resolve_hf_target",
]

HF_PREFIX = "hf:"

# --hf-task: the auto class that builds the model when the config names no architecture.
HF_TASKS: dict[str, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
}
# Each task's auto class maps these model types (transformers' table, read without torch).
_TASK_MODEL_TYPES = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
}
_IMAGES = "image-classification"  # the one task whose batch is pixels, not tokens

ATTENTION_LIMIT = (
    "ORTModule cannot export Hugging Face's {name} attention (its torch.onnx export of "
    "scaled_dot_product_attention ends in an ORT C++ assertion); leave attn_implementation "
    "at eager, the default"
)

_TINY_DECODER = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
}

# Config fields per preset and size. "base" is the architecture's public base model, or its
# smallest public release where the base does not train on a CPU (Llama: SmolLM-135M's
# shape; Qwen2: Qwen2-0.5B's).
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "gpt2": {
        "base": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
        "tiny": {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "vocab_size": 1000,
            "n_positions": 128,
        },
    },
    "llama": {
        "base": {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": True,
        },
        "tiny": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **_TINY_DECODER},
    },
    "qwen2": {
        "base": {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "tiny": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], **_TINY_DECODER},
    },
    "bert": {
        "base": {"model_type": "bert", "architectures": ["BertForMaskedLM"]},
        "tiny": {
            "model_type": "bert",
            "architectures": ["BertForMaskedLM"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "vocab_size": 1000,
            "max_position_embeddings": 128,
        },
    },
    "t5": {
        "base": {
            "model_type": "t5",
            "architectures": ["T5ForConditionalGeneration"],
            "d_model": 768,
            "d_ff": 3072,
            "num_layers": 12,
            "num_decoder_layers": 12,
            "num_heads": 12,
            "decoder_start_token_id": 0,
        },
        "tiny": {
            "model_type": "t5",
            "architectures": ["T5ForConditionalGeneration"],
            "d_model": 64,
            "d_ff": 128,
            "d_kv": 16,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "vocab_size": 1000,
            "decoder_start_token_id": 0,
        },
    },
}
_DEFAULT_SEQ = {"tiny": 32, "base": 128}
_CLASS_TASKS = (  # the model class's name ending -> the task its batch needs
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq"),
    ("ForSeq2SeqLM", "seq2seq"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForImageClassification", _IMAGES),
)
_POSITION_FIELDS = ("max_position_embeddings", "n_positions")


class HFError(RecipeError):
    """An ``hf:`` target that cannot be built."""


@dataclass(frozen=True)
class HfModelSpec:
    """An ``hf:`` spec resolved: the config to build from, the model class, the batch's shape."""

    name: str
    config: Any  # transformers.PretrainedConfig
    model_class: str  # a transformers class name (GPT2LMHeadModel, AutoModelForCausalLM, …)
    task: str
    seq_len: int
    target_seq: int
    notes: tuple[str, ...] = ()  # fields memopt defaulted, said to the user

    def build_model(self) -> Any:
        model_class = getattr(_transformers(), self.model_class)
        if self.model_class.startswith("Auto"):
            return model_class.from_config(self.config, attn_implementation="eager")
        return model_class._from_config(self.config, attn_implementation="eager")

    def make_batch(self, batch_size: int) -> tuple[dict[str, Any], None]:
        """The Trainer's batch; the target is None because the model computes its own loss."""
        import torch

        generator = torch.Generator().manual_seed(0)
        image_size = _image_size(self.config)
        if image_size is not None and self.task == _IMAGES:
            height, width = image_size
            shape = (batch_size, int(self.config.num_channels), height, width)
            labels = torch.randint(0, int(self.config.num_labels), (batch_size,), generator=generator)
            return {"pixel_values": torch.randn(shape, generator=generator), "labels": labels}, None
        vocab = int(self.config.vocab_size)
        input_ids = torch.randint(0, vocab, (batch_size, self.seq_len), generator=generator)
        batch: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self.task == "seq2seq":
            batch["labels"] = torch.randint(0, vocab, (batch_size, self.target_seq), generator=generator)
        elif self.task == "sequence-classification":
            batch["labels"] = torch.randint(0, int(self.config.num_labels), (batch_size,), generator=generator)
        else:
            batch["labels"] = input_ids.clone()
        return batch, None

    def config_json(self) -> str:
        return str(self.config.to_json_string(use_diff=False))


def resolve_hf_target(spec: str, options: Mapping[str, Any], *, models: bool = True) -> HfModelSpec:
    """The config, model class and batch shape ``spec`` and ``options`` name; raises HFError.
    ``models=False``: only the config is read here, no model built in this process (see
    ``_transformers``)."""
    name = spec[len(HF_PREFIX) :]
    options = dict(options)
    size = options.pop("size", None)
    seq_len = options.pop("seq_len", None)
    target_seq = options.pop("target_seq", None)
    task = options.pop("hf_task", None)
    attention = str(options.pop("attn_implementation", "eager"))
    if attention != "eager":
        raise HFError(f"{spec}: attn_implementation={attention}: {ATTENTION_LIMIT.format(name=attention)}")
    if task is not None and task not in HF_TASKS:
        raise HFError(f"--hf-task must be one of {', '.join(HF_TASKS)}, not {task!r}")
    transformers = _transformers(models)
    if name in PRESETS:
        sizes = PRESETS[name]
        size = size or "base"
        if size not in sizes:
            raise HFError(f"{spec} has sizes {', '.join(sizes)}, not {size!r}")
        fields = dict(sizes[size])
        config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    else:
        if size is not None:
            raise HFError(f"--size applies to the presets ({', '.join(PRESETS)}), not to a config file ({spec})")
        config = _load_config(spec, name, transformers)
    for key, value in options.items():
        if not hasattr(config, key):
            raise HFError(f"{spec}: its {config.model_type} config has no field {key!r} (-o {key}=…)")
        expected = _field_kind(getattr(config, key))
        if expected is not None and _field_kind(value) not in _ACCEPTED_KINDS[expected]:
            raise HFError(f"{spec}: -o {key}={value!r}: its {config.model_type} config holds {expected} there")
        setattr(config, key, value)
    notes = _default_training_fields(config, options)
    model_class, task = _model_class(spec, config, task, transformers)
    config._attn_implementation = "eager"
    display = f"{name} ({size})" if name in PRESETS else name
    if task == _IMAGES:
        if seq_len is not None or target_seq is not None:
            raise HFError(f"{spec} classifies images: its batch is sized by its config's image_size, not --seq")
        if _image_size(config) is None:
            raise HFError(f"{spec}: its config's image_size is {config.image_size!r}, not a size in pixels")
        return HfModelSpec(display, config, model_class, task, 0, 0, tuple(notes))
    if task == "sequence-classification" and config.pad_token_id is None:
        config.pad_token_id = config.eos_token_id if config.eos_token_id is not None else 0
        notes.append(f"pad_token_id unset: {config.pad_token_id} (classification of batches needs a pad token)")
    seq = int(seq_len or _DEFAULT_SEQ.get(str(size), _DEFAULT_SEQ["base"]))
    positions = next((getattr(config, f) for f in _POSITION_FIELDS if getattr(config, f, None)), None)
    if positions is not None and seq > positions:
        raise HFError(f"{spec}: --seq {seq} exceeds the model's {positions} positions")
    target = int(target_seq or seq)
    if target_seq is not None and task != "seq2seq":
        raise HFError(f"--target-seq applies to seq2seq models, and {spec} is {task}")
    return HfModelSpec(display, config, model_class, task, seq, target, tuple(notes))


# What a config field's current value accepts from -o: an int field takes no float, a float
# field takes an int; a field whose value is None (unset) takes anything.
_ACCEPTED_KINDS = {
    "a boolean": ("a boolean",),
    "an integer": ("an integer",),
    "a number": ("an integer", "a number"),
    "text": ("text",),
    "a list": ("a list",),
    "a mapping": ("a mapping",),
}


def _field_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "a boolean"
    for kind, types in (
        ("an integer", int),
        ("a number", float),
        ("text", str),
        ("a list", (list, tuple)),
        ("a mapping", dict),
    ):
        if isinstance(value, types):
            return kind
    return None


def _transformers(models: bool = True) -> Any:
    """transformers, offline. ``models=False`` in a process that has imported neither it nor
    torch: transformers without torch (its USE_TORCH switch, set for the import alone, so
    children do not inherit it), which reads configs alike and imports in a sixth of the time;
    its model classes are then placeholders, so a model built later in this process fails."""
    # Nothing is ever downloaded: the config is local or a preset, the weights random.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    without_torch = not models and "transformers" not in sys.modules and "torch" not in sys.modules
    before = os.environ.get("USE_TORCH")
    if without_torch:
        os.environ["USE_TORCH"] = "0"
    try:
        import transformers
    except ImportError as err:
        raise HFError(
            f"hf: targets need the hf extra: pip install 'memopt[hf]' (importing transformers failed: {err})"
        ) from None
    finally:
        if without_torch:
            _restore("USE_TORCH", before)
    if models and not transformers.is_torch_available():
        raise HFError("hf: this process read the config with transformers without torch and cannot build the model")
    return transformers


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _load_config(spec: str, name: str, transformers: Any) -> Any:
    path = Path(name).expanduser()
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise HFError(
            f"{spec}: not a preset ({', '.join(PRESETS)}) nor a config.json or a folder holding one "
            "(nothing is downloaded)"
        )
    try:
        fields = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise HFError(f"{spec}: cannot read {file}: {err}") from None
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise HFError(f"{spec}: {file} is no Hugging Face config (it names no model_type)")
    try:
        return transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    except (ValueError, KeyError, TypeError) as err:
        raise HFError(f"{spec}: transformers cannot read {file}: {err}") from None


def _default_training_fields(config: Any, overridden: Mapping[str, Any]) -> list[str]:
    """Fields training needs that released configs set, where this one leaves them unset."""
    notes = []
    if getattr(config, "is_encoder_decoder", False) and config.decoder_start_token_id is None:
        config.decoder_start_token_id = config.pad_token_id if config.pad_token_id is not None else 0
        notes.append(
            f"decoder_start_token_id unset: {config.decoder_start_token_id} (pad_token_id, as released "
            f"{config.model_type} configs set it)"
        )
    if "use_cache" not in overridden and getattr(config, "use_cache", False):
        config.use_cache = False  # a training step needs no KV cache, and ORTModule cannot export one
    return notes


def _tasks_of(model_type: str) -> list[str]:
    """The tasks whose auto class builds a model of ``model_type``."""
    tables = importlib.import_module("transformers.models.auto.modeling_auto")
    return [task for task, table in _TASK_MODEL_TYPES.items() if model_type in getattr(tables, table)]


def _image_size(config: Any) -> tuple[int, int] | None:
    """Height and width of the config's images (``image_size``: one side, or both); None where it names none."""
    size = getattr(config, "image_size", None)
    sides = list(size) if isinstance(size, (list, tuple)) else [size, size]
    whole = [side for side in sides if isinstance(side, int) and not isinstance(side, bool) and side > 0]
    return (whole[0], whole[1]) if len(whole) == len(sides) == 2 else None


def _model_class(spec: str, config: Any, task: str | None, transformers: Any) -> tuple[str, str]:
    if task is not None:
        # Refused here, in one line: the auto class would fail inside the run, in a traceback.
        tasks = _tasks_of(config.model_type)
        if task not in tasks:
            takes = f"it takes --hf-task {' or '.join(tasks)}" if tasks else "memopt builds it for no task"
            raise HFError(
                f"{spec}: --hf-task {task} cannot build a {config.model_type} model ({HF_TASKS[task]} of "
                f"transformers {transformers.__version__} has none); {takes}"
            )
        return HF_TASKS[task], task
    for architecture in config.architectures or ():
        if not hasattr(transformers, architecture):
            raise HFError(f"{spec}: transformers {transformers.__version__} has no model class {architecture}")
        found = next((t for ending, t in _CLASS_TASKS if architecture.endswith(ending)), None)
        if found is None:
            raise HFError(
                f"{spec}: cannot tell the batch {architecture} trains on; give --hf-task ({', '.join(HF_TASKS)})"
            )
        return architecture, found
    raise HFError(f"{spec}: the config names no architectures; give --hf-task ({', '.join(HF_TASKS)})")
