"""examples/train_ddp.py's model in a loop driven by Hugging Face accelerate; no memopt in it.

    accelerate launch --cpu --num_processes 1 examples/train_accelerate.py --batch-size 4
    accelerate launch --multi_gpu --num_processes 2 examples/train_accelerate.py --batch-size 4    # on CPU too: gloo

``Accelerator.prepare`` wraps the ORTModule in DistributedDataParallel when there are several
processes (gloo on CPU). Needs accelerate: pip install 'memopt[accelerate]'.
memopt tunes it as is:
memopt tune --cmd "accelerate launch --cpu --num_processes 1 examples/train_accelerate.py --batch-size {batch}" --target-batch 8
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from onnxruntime.training.ortmodule import ORTModule
from torch.nn import functional as F
from train_ddp import TinyLM, parse_arguments  # the script's own folder is on the import path


def main() -> None:
    args = parse_arguments(__doc__.splitlines()[0])

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = ORTModule(TinyLM(args.vocab, args.width, args.layers, args.heads, args.seq))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)

    step = 0
    while not args.max_steps or step < args.max_steps:
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq + 1), device=accelerator.device)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0 and accelerator.is_main_process:
            print(f"step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
