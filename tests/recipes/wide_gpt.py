"""A small but wide GPT for tuner tests: activations dominate CPU peak memory, so recompute shows.

The built-in ``gpt --size tiny`` (64 wide) keeps so few activations that allocator noise
hides what recompute saves; this one (the built-in GPT at 256 wide, 4 heads, 256 tokens of
vocabulary and positions) frees tens of MiB at batch 16, sequence 128, and a trial still
takes seconds on a CPU. Only the built-in recipe's public names are used.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from memopt.recipes.gpt import GPT, SIZES, loss  # noqa: F401  (loss is part of this recipe)

CONFIG = replace(SIZES["tiny"], n_layer=4, n_head=4, d_model=256, max_seq=256, seq_len=256)


def build_model(n_layer: int = CONFIG.n_layer) -> GPT:
    return GPT(replace(CONFIG, n_layer=n_layer))


def make_batch(batch_size: int, seq_len: int = CONFIG.seq_len) -> tuple[tuple[torch.Tensor], torch.Tensor]:
    tokens = torch.randint(0, CONFIG.vocab_size, (batch_size, seq_len + 1))
    return (tokens[:, :-1],), tokens[:, 1:]
