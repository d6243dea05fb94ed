"""Tiny Hugging Face models as a recipe: the evidence for scan parity on HF graphs.

``-o arch=gpt2|llama|t5|bert|qwen2``. Each model is randomly initialised from a small
transformers config (2 layers, width 32, eager attention: ORTModule cannot export sdpa);
nothing is downloaded. The batch is what a Trainer gets from a padding tokenizer:
``input_ids``, ``attention_mask`` (ones) and ``labels`` (causal and masked LM: the inputs'
shape; T5: decoder labels of the same length). The loss is the model's own ``.loss``.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

__all__ = ["ARCHITECTURES", "build_model", "loss", "make_batch"]

VOCAB = 64
WIDTH = 32
LAYERS = 2
HEADS = 4
SEQ = 16

# arch -> (config class, model class, config fields)
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS, "n_positions": 64}),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {"hidden_size": WIDTH, "intermediate_size": 2 * WIDTH, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "max_position_embeddings": 64},
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {"hidden_size": WIDTH, "intermediate_size": 2 * WIDTH, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "max_position_embeddings": 64},
    ),
    "bert": (
        "BertConfig",
        "BertForMaskedLM",
        {"hidden_size": WIDTH, "intermediate_size": 2 * WIDTH, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "max_position_embeddings": 64},
    ),
    # Released T5 configs set decoder_start_token_id = pad_token_id; training needs it.
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {"d_model": WIDTH, "d_kv": WIDTH // HEADS, "d_ff": 2 * WIDTH, "num_layers": LAYERS,
         "num_decoder_layers": LAYERS, "num_heads": HEADS, "decoder_start_token_id": 0},
    ),
}


def build_model(arch: str = "gpt2") -> torch.nn.Module:
    config_class, model_class, fields = ARCHITECTURES[arch]
    config = getattr(transformers, config_class)(vocab_size=VOCAB, attn_implementation="eager", **fields)
    torch.manual_seed(0)
    model: torch.nn.Module = getattr(transformers, model_class)(config)
    return model


def make_batch(batch_size: int, arch: str = "gpt2", seq_len: int = SEQ) -> tuple[dict[str, torch.Tensor], None]:
    del arch  # every architecture here takes the same Trainer-style batch
    input_ids = torch.randint(2, VOCAB, (batch_size, seq_len))
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.randint(2, VOCAB, (batch_size, seq_len)),
    }
    return batch, None


def loss(output: Any, target: None) -> torch.Tensor:
    del target  # the labels are in the batch; the model computes its own loss
    value: torch.Tensor = output.loss if hasattr(output, "loss") else output[0]
    return value
