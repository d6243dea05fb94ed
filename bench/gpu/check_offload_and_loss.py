"""Offload and the chunked loss on a device: what they take off the peak, what they cost, and
that training computes the same.

    python3 bench/gpu/check_offload_and_loss.py --out "$OUT"

Two checks, in this process:

- **Offload** (``MODULE: offload``, ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` through
  ``memopt.recompute.apply``): a stack of MLP blocks trained a step without a policy, with every
  block offloaded and with every block checkpointed. Per policy: the peak allocated bytes of the
  step (``max_memory_allocated``), its median time, and the gradients against the plain step's
  (bitwise: offload only moves tensors; a checkpoint reruns the same ops). The predicted saving
  is what memopt's scan counts for such plans: what each block makes and saves (its first
  linear's output and the GELU's), for every block but the last (backward brings the last back
  first); the predicted cost the copies out and back at the host link's bandwidth measured here,
  as the tune costs an offload plan (``memopt.backends.torch.offload``).
- **The chunked loss** (``memopt.recompute.loss.chunked_cross_entropy``) against
  ``F.cross_entropy`` over the full logits, both in fp32, at a 32k vocabulary: the step's peak,
  its time, and the gradients (within rtol 1e-5 / atol 1e-6, as the token sum runs chunk by chunk).

``--device cpu`` runs the same on this CPU, the CPU self-test of ``make test``
(``tests/gpu/test_gpu_check.py``): there the peak is the live bytes of the step's tensors counted
as memopt's play counts them, offload moves nothing (a CPU tensor is in host memory already) and
no bandwidth is measured; it says nothing of CUDA.

Writes ``offload_loss_check.json`` and ``offload_loss_check.md`` under ``--out``; exits 1 where
gradients differ beyond the stated tolerance. Imports torch, numpy and memopt's recompute, offload
and play, and ``host_link_bandwidth`` starts one short process: nothing the device image lacks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from memopt import recompute  # noqa: E402
from memopt.backends.torch.offload import host_link_bandwidth  # noqa: E402
from memopt.backends.torch.simulate import LiveBytes  # noqa: E402
from memopt.recompute.loss import chunked_cross_entropy  # noqa: E402

MIB = 1 << 20
VOCAB = 32_000


@dataclass(frozen=True)
class Measured:
    check: str
    variant: str
    peak_bytes: int
    step_s: float
    predicted_saving_bytes: float | None  # against the check's first variant
    predicted_extra_s: float | None
    gradients: str  # "bitwise", "within rtol 1e-5 / atol 1e-6" or what differed


class Blocks(nn.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


@contextlib.contextmanager
def peak_of(device: str) -> Iterator[Callable[[], int]]:
    """The step's peak: ``max_memory_allocated`` on CUDA, the live bytes of its tensors on CPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield torch.cuda.max_memory_allocated
        torch.cuda.synchronize()
        return
    counter = LiveBytes()
    with counter:
        yield lambda: counter.peak


def timed(step: Callable[[], None], device: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def gradients_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def compared(base: list[torch.Tensor], other: list[torch.Tensor], bitwise: bool) -> str:
    if bitwise:
        return "bitwise" if all(torch.equal(a, b) for a, b in zip(base, other)) else "DIFFER"
    close = all(torch.allclose(b, a, rtol=1e-5, atol=1e-6) for a, b in zip(base, other))
    return "within rtol 1e-5 / atol 1e-6" if close else "DIFFER"


def check_offload(device: str, width: int, layers: int, batch: int, repeats: int) -> list[Measured]:
    bandwidth = host_link_bandwidth() if device == "cuda" else None
    inputs = torch.randn(batch, width, device=device)

    def model_with(plans: tuple[str, ...]) -> nn.Module:
        torch.manual_seed(0)
        model = Blocks(width, layers).to(device)
        if plans:
            with _quiet():  # on CPU apply warns that offload moves nothing
                recompute.apply(model, recompute.RecomputePolicy(tuple(map(recompute.RecomputePlan.parse, plans))))
        return model

    results = []
    plain_gradients: list[torch.Tensor] = []
    for variant, plans in (
        ("no policy", ()),
        ("blocks.*: offload", ("blocks.*: offload",)),
        ("blocks.*: *", ("blocks.*: *",)),
    ):
        model = model_with(plans)

        def step(model: nn.Module = model) -> None:
            model.zero_grad(set_to_none=True)
            model(inputs).sum().backward()

        step()  # warm-up
        with peak_of(device) as peak:
            step()
        seconds = timed(step, device, repeats)
        gradients = gradients_of(model)
        if not plans:
            plain_gradients = gradients
        offloads = "offload" in variant
        # On CPU an offloaded block's tensors stay where they are: it is predicted to save nothing.
        saved = _block_saving(width, batch) * (layers - 1) * (device == "cuda" or not offloads) if plans else None
        extra = 2 * saved / bandwidth if saved is not None and bandwidth and offloads else None
        results.append(
            Measured("offload", variant, peak(), seconds, saved, extra, compared(plain_gradients, gradients, True))
        )
    return results


def _block_saving(width: int, batch: int) -> float:
    """What one block makes and saves in fp32: the first linear's output and the GELU's (4 × width each)."""
    return 2 * batch * 4 * width * 4


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def check_loss(device: str, hidden_size: int, tokens: int, repeats: int) -> list[Measured]:
    torch.manual_seed(0)
    hidden0 = torch.randn(tokens, hidden_size, device=device)
    weight0 = torch.randn(VOCAB, hidden_size, device=device) * 0.02
    labels = torch.randint(0, VOCAB, (tokens,), device=device)
    results = []
    base: list[torch.Tensor] = []
    for variant in ("cross_entropy over the logits", "chunked_cross_entropy"):
        hidden = hidden0.clone().requires_grad_()
        weight = weight0.clone().requires_grad_()

        def step(variant: str = variant, hidden: torch.Tensor = hidden, weight: torch.Tensor = weight) -> None:
            hidden.grad = weight.grad = None
            if variant == "chunked_cross_entropy":
                loss = chunked_cross_entropy(hidden, weight, labels)
            else:
                loss = F.cross_entropy((hidden @ weight.T).float(), labels)
            loss.backward()

        step()
        with peak_of(device) as peak:
            step()
        seconds = timed(step, device, repeats)
        gradients = [t.grad.detach().clone() for t in (hidden, weight) if t.grad is not None]
        if not base:
            base = gradients
        logits = 2 * tokens * VOCAB * 4.0  # the logits and the log-softmax backward keeps, in fp32
        results.append(
            Measured(
                "loss",
                variant,
                peak(),
                seconds,
                logits if variant == "chunked_cross_entropy" else None,
                None,
                compared(base, gradients, False),
            )
        )
    return results


def report(results: list[Measured], facts: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "offload_loss_check.json").write_text(
        json.dumps({"device": facts, "rows": [asdict(r) for r in results]}, indent=1)
    )
    lines = [
        f"Device: {facts['name']}, torch {facts['torch']}, CUDA {facts['cuda']}; `{facts['command']}`, "
        f"{facts['seconds']:.0f} s.",
        "",
        "| check | variant | peak (MiB) | saving predicted (MiB) | saving measured (MiB) | step (ms) | extra predicted (ms) | gradients |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    firsts: dict[str, Measured] = {}
    for r in results:
        first = firsts.setdefault(r.check, r)
        predicted = "" if r.predicted_saving_bytes is None else f"{r.predicted_saving_bytes / MIB:,.1f}"
        extra = "" if r.predicted_extra_s is None else f"{r.predicted_extra_s * 1e3:,.1f}"
        lines.append(
            f"| {r.check} | {r.variant} | {r.peak_bytes / MIB:,.1f} | {predicted} | "
            f"{(first.peak_bytes - r.peak_bytes) / MIB:,.1f} | {r.step_s * 1e3:,.1f} | {extra} | {r.gradients} |"
        )
    (out / "offload_loss_check.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4096, help="rows through the blocks (tokens)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens of the loss check")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = time.monotonic()
    results = check_offload(args.device, args.width, args.layers, args.batch, args.repeats)
    results += check_loss(args.device, args.width, args.tokens, args.repeats)
    facts = {
        "name": torch.cuda.get_device_name() if args.device == "cuda" else "CPU (self-test: no CUDA figure)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "seconds": time.monotonic() - started,
        "command": shlex.join(["python3", "bench/gpu/check_offload_and_loss.py", *sys.argv[1:]]),
    }
    report(results, facts, args.out)
    print((args.out / "offload_loss_check.md").read_text())
    sys.exit(0 if all(r.gradients != "DIFFER" for r in results) else 1)


if __name__ == "__main__":
    main()
