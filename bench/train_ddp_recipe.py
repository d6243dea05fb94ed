"""examples/train_ddp.py's model and batches as a memopt recipe: the same training step, run in
memopt's own child process, to compare with the command run of the script (bench_command.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_SPEC = importlib.util.spec_from_file_location(
    "train_ddp_example", Path(__file__).resolve().parent.parent / "examples" / "train_ddp.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_EXAMPLE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_EXAMPLE)

VOCAB, SEQ, WIDTH, LAYERS, HEADS = 512, 512, 128, 4, 8  # the script's defaults


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return _EXAMPLE.TinyLM(VOCAB, WIDTH, LAYERS, HEADS, SEQ)


def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch_size, SEQ + 1))
    return ids[:, :-1], ids[:, 1:]
