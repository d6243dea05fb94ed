"""A plain PyTorch training loop with ORTModule and DistributedDataParallel; no memopt in it.

    python examples/train_ddp.py --batch-size 4                          # one process
    torchrun --nproc_per_node 2 examples/train_ddp.py --batch-size 4     # two ranks (gloo on CPU, nccl on CUDA)

A small GPT-like language model on random tokens (long sequences, many heads: its activations,
not its weights, fill the memory, as in real training); it trains until stopped (or --max-steps).
memopt tunes it as is: memopt trial --cmd "torchrun --nproc_per_node 2 examples/train_ddp.py --batch-size {batch}" --batch 4
"""

from __future__ import annotations

import argparse
import os

import torch
from onnxruntime.training.ortmodule import ORTModule
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        attention = self.drop(scores.masked_fill(~mask, float("-inf")).softmax(-1))
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(batch, seq, width))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(1, seq, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def parse_arguments(description: str) -> argparse.Namespace:
    """The batch size, the model's shape and the step count, as every example loop takes them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--max-steps", type=int, default=0, help="Stop after this many steps (0: train until stopped).")
    return parser.parse_args()


def main() -> None:
    args = parse_arguments(__doc__.splitlines()[0])

    distributed = "RANK" in os.environ
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if distributed:
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo")
        if device == "cuda":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = ORTModule(TinyLM(args.vocab, args.width, args.layers, args.heads, args.seq).to(device))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    step = 0
    while not args.max_steps or step < args.max_steps:
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq + 1), device=device)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0 and int(os.environ.get("RANK", "0")) == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
