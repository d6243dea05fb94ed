"""BERT-style encoder with an attention-mask input and a tied masked-LM head."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from memopt.recipes.transformer import TransformerConfig

__all__ = ["SIZES", "Bert", "build_model", "make_batch", "loss"]


SIZES: dict[str, TransformerConfig] = {
    "tiny": TransformerConfig(vocab_size=256, n_layer=2, n_head=2, d_model=64, max_seq=64, seq_len=32),
    "base": TransformerConfig(vocab_size=30522, n_layer=12, n_head=12, d_model=768, max_seq=512, seq_len=128),
    "large": TransformerConfig(vocab_size=30522, n_layer=24, n_head=16, d_model=1024, max_seq=512, seq_len=512),
}

IGNORE_INDEX = -100


class SelfAttention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.query = nn.Linear(cfg.d_model, cfg.d_model)
        self.key = nn.Linear(cfg.d_model, cfg.d_model)
        self.value = nn.Linear(cfg.d_model, cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        head_dim = width // self.n_head

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.n_head, head_dim).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim) + additive_mask
        weights = self.drop(F.softmax(scores, dim=-1))
        return self.out((weights @ v).transpose(1, 2).reshape(batch, seq, width))


class EncoderLayer(nn.Module):
    """Post-LayerNorm encoder layer, as in the original BERT."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.drop(self.attn(x, additive_mask)))
        return self.ln2(x + self.drop(self.proj(F.gelu(self.fc(x)))))


class Bert(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.ln_emb = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layer))
        self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm_ln = nn.LayerNorm(cfg.d_model)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.ln_emb(self.tok_emb(input_ids) + self.pos_emb(positions)))
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, additive_mask)
        hidden = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        return hidden @ self.tok_emb.weight.t() + self.mlm_bias


def build_model(size: str = "base", n_layer: int | None = None) -> Bert:
    """``n_layer`` overrides the size's depth."""
    cfg = SIZES[size]
    return Bert(cfg.with_layers(n_layer))


def make_batch(
    batch_size: int, size: str = "base", seq_len: int | None = None, mask_prob: float = 0.15
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Random tokens, a padded tail per row, and masked-LM labels on ``mask_prob`` of tokens."""
    cfg = SIZES[size]
    seq = cfg.sequence(seq_len)
    input_ids = torch.randint(0, cfg.vocab_size, (batch_size, seq))
    lengths = torch.randint(seq // 2, seq + 1, (batch_size, 1))
    attention_mask = (torch.arange(seq)[None, :] < lengths).long()
    labels = torch.where((torch.rand(batch_size, seq) < mask_prob) & attention_mask.bool(), input_ids, IGNORE_INDEX)
    labels[:, 0] = input_ids[:, 0]  # at least one labelled token per row keeps the loss finite
    return (input_ids, attention_mask), labels


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)
