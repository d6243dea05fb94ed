"""A tiny GPT-2 trained with optimum's ORTTrainer (ORTModule inside); no memopt in it.

    python examples/train_ortrainer.py --batch-size 4                          # one process
    torchrun --nproc_per_node 2 examples/train_ortrainer.py --batch-size 4     # two ranks (gloo on CPU)

The model is built from a GPT-2 config with random weights and trained on random tokens:
nothing is downloaded. Needs optimum's ORT training stack (docs/ort.md, "optimum's ORTTrainer and accelerate"):
pip install 'memopt[optimum]' && pip install --no-deps torch-ort==1.19.2
memopt tunes it as is: memopt tune --cmd "python examples/train_ortrainer.py --batch-size {batch}" --target-batch 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
from unittest import mock

import torch
from optimum.onnxruntime import ORTTrainer, ORTTrainingArguments
from transformers import GPT2Config, GPT2LMHeadModel


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Rows of random token ids; a causal LM's labels are its inputs."""

    def __init__(self, rows: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(0, vocab, (rows, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4, help="Per device (per rank).")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=1000)
    # ORTModule exports only eager attention; sdpa (transformers' default) ends in an ORT assertion.
    parser.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    args = parser.parse_args()

    config = GPT2Config(
        n_layer=args.layers, n_embd=args.width, n_head=4, vocab_size=args.vocab, n_positions=args.seq, use_cache=False
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel._from_config(config, attn_implementation=args.attn)
    cpu = not torch.cuda.is_available()
    training = ORTTrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="ortrainer-"),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps,
        learning_rate=1e-4,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        use_cpu=cpu,
        ddp_backend="gloo" if cpu and "LOCAL_RANK" in os.environ else None,
        dataloader_num_workers=0,
    )
    dataset = RandomTokens(rows=max(64, 4 * args.batch_size), seq=args.seq, vocab=args.vocab)
    if cpu:
        # optimum 1.24's ORTTrainer calls torch.cuda.set_device(local_rank) on every rank but 0,
        # which fails without a CUDA driver: on CPU there is no device to pick.
        with mock.patch.object(torch.cuda, "set_device", lambda device: None):
            trainer = ORTTrainer(model=model, args=training, train_dataset=dataset)
    else:
        trainer = ORTTrainer(model=model, args=training, train_dataset=dataset)
    trainer.train()


if __name__ == "__main__":
    main()
