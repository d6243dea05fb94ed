"""GPT-style decoder: pre-LayerNorm blocks, hand-written causal attention, GELU MLP.

Attention is written out with matmuls (not ``nn.MultiheadAttention``) because ORT's
symbolic shape inference cannot follow the latter's exported graph.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from memopt.recipes.transformer import TransformerConfig

__all__ = ["SIZES", "GPT", "build_model", "make_batch", "loss"]


SIZES: dict[str, TransformerConfig] = {
    "tiny": TransformerConfig(vocab_size=256, n_layer=2, n_head=2, d_model=64, max_seq=64, seq_len=32),
    "small": TransformerConfig(vocab_size=50257, n_layer=12, n_head=12, d_model=768, max_seq=1024, seq_len=128),
    "medium": TransformerConfig(vocab_size=50257, n_layer=24, n_head=16, d_model=1024, max_seq=1024, seq_len=512),
    "xl": TransformerConfig(vocab_size=50257, n_layer=48, n_head=25, d_model=1600, max_seq=1024, seq_len=1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.max_seq, cfg.max_seq, dtype=torch.bool))
        self.register_buffer("causal_mask", mask.view(1, 1, cfg.max_seq, cfg.max_seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        head_dim = width // self.n_head
        q, k, v = self.qkv(x).split(width, dim=2)
        q = q.view(batch, seq, self.n_head, head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.n_head, head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.n_head, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        scores = scores.masked_fill(~self.causal_mask[:, :, :seq, :seq], float("-inf"))
        weights = self.attn_drop(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(batch, seq, width)
        return self.resid_drop(self.proj(out))


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: TransformerConfig, tied: bool = True) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if tied:
            self.head.weight = self.tok_emb.weight
        self.apply(_init_weights)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.tok_emb(input_ids) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _init_weights(module: nn.Module) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def build_model(size: str = "small", tied: bool = True, n_layer: int | None = None) -> GPT:
    """``n_layer`` overrides the size's depth (e.g. 48 GPT-2-XL layers at tiny width)."""
    cfg = SIZES[size]
    return GPT(cfg.with_layers(n_layer), tied=tied)


def make_batch(
    batch_size: int, size: str = "small", seq_len: int | None = None
) -> tuple[tuple[torch.Tensor], torch.Tensor]:
    cfg = SIZES[size]
    seq = cfg.sequence(seq_len)
    tokens = torch.randint(0, cfg.vocab_size, (batch_size, seq + 1))
    return (tokens[:, :-1],), tokens[:, 1:]


def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
