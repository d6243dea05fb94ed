"""A plain PyTorch training loop (AdamW, no ORT) with memopt's one line: ``memopt.recompute.apply(model)``.

    python examples/train_plain_torch.py --batch-size 64                 # trains; no recompute
    export MEMOPT_RECOMPUTE_POLICY=/…/recompute-policy.json               # what memopt tune printed
    python examples/train_plain_torch.py --batch-size 256                # the same loop, with the policy

memopt's torch back end scans, tries and tunes it as you run it (``--cmd``), or as a recipe
(the file also has ``build_model``, ``make_batch``, ``optimizer``):

    memopt tune --backend torch --cmd "python examples/train_plain_torch.py --batch-size {batch}" \
        --target-batch 256 --budget 2.6GiB --no-tui          # as the job runs
    memopt tune --backend torch examples/train_plain_torch.py --target-batch 256 --budget 2.6GiB --no-tui  # as a recipe

A small GPT-like language model on random tokens: long sequences and many heads, so its
activations, not its weights, fill the memory, as in real training. It trains until stopped (or --max-steps).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

import memopt.recompute

VOCAB, WIDTH, LAYERS, HEADS, SEQ = 512, 64, 8, 4, 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * WIDTH, WIDTH)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        q, k, v = (t.reshape(batch, seq, HEADS, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        attention = self.drop(scores.masked_fill(~mask, float("-inf")).softmax(-1))
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(batch, seq, width))
        return x + self.drop(self.out(self.act(self.fc(self.ln2(x)))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(1, SEQ, WIDTH))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


# The recipe: what memopt builds and trains in its own process.
def build_model() -> TinyLM:
    return TinyLM()


def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch_size, SEQ + 1))
    return ids[:, :-1], ids[:, 1:]


def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def optimizer(parameters: object) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=1e-4)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: never)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = memopt.recompute.apply(build_model())  # the one line: reads MEMOPT_RECOMPUTE_POLICY, if set
    opt = optimizer(model.parameters())
    step = 0
    while not args.max_steps or step < args.max_steps:
        ids, target = make_batch(args.batch_size)
        batch_loss = loss(model(ids), target)
        batch_loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0:
            print(f"step {step} loss {batch_loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
