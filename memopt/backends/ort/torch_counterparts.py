"""What each of ORT's recompute plans becomes in plain PyTorch: the one place that knows ORT's plan names.

An ORT plan reruns a chain of ONNX nodes in backward so that its entry node's stashed output is
not kept. In eager PyTorch the same tensor is an aten op's output that autograd saves, made in the
same module (the ONNX exporter names nodes by module scope). A counterpart names those aten ops:

* ``OP`` — recompute the ops' outputs from their inputs (``MODULE: op``), the tight checkpoint ORT's
  plan is;
* ``MODULE`` — the op is random (dropout), so only a checkpoint of the whole module, with its RNG
  state replayed, drops what it keeps (``MODULE: *``);
* ``NONE`` — PyTorch keeps no such tensor, or dropping it would keep a larger one alive.

How close the carried-over plan is comes with it (``Fidelity``), and a sentence saying why. The
table is keyed by the subgraph name ORT 1.19 prints (``FusedMatMul+Add+``), with the entry op (the
name's last op that is not a reshape) as the fallback for names it lacks. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Counterpart", "CounterpartKind", "Fidelity", "counterpart", "entry_op"]


class CounterpartKind(Enum):
    OP = "op"  # recompute the aten ops' outputs
    MODULE = "module"  # checkpoint the whole module
    NONE = "none"  # nothing to carry over


class Fidelity(Enum):
    EXACT = "exact"  # drops the same tensors
    APPROXIMATE = "approximate"  # drops the same tensor and what PyTorch keeps beside it
    NONE = "none"  # no counterpart


@dataclass(frozen=True)
class Counterpart:
    kind: CounterpartKind
    aten_ops: tuple[str, ...]  # the ops whose outputs ORT's stashed tensor is, in eager PyTorch
    fidelity: Fidelity
    note: str  # what carries over and what differs, for the mapping table

    @property
    def carries_over(self) -> bool:
        return self.kind is not CounterpartKind.NONE


_LINEAR = Counterpart(
    CounterpartKind.OP,
    ("addmm", "mm"),
    Fidelity.EXACT,
    "the linear layer's output (aten.addmm), recomputed from its input, which the matmul keeps anyway",
)
_GELU = Counterpart(
    CounterpartKind.OP,
    ("gelu",),
    Fidelity.EXACT,
    "gelu's output, recomputed from its input, which gelu keeps anyway",
)
_FAST_GELU = Counterpart(
    CounterpartKind.OP,
    ("gelu", "tanh"),
    Fidelity.APPROXIMATE,
    "the tanh GELU: aten.gelu's output where the model calls it; where it is written out (Hugging Face's "
    "gelu_new), the tanh's output alone, the formula's other products kept",
)
_SILU = Counterpart(
    CounterpartKind.OP,
    ("silu",),
    Fidelity.EXACT,
    "SiLU's output (aten.silu; ORT fuses x·sigmoid(x) into QuickGelu), recomputed from its input, which silu "
    "keeps anyway; a written-out x·sigmoid(αx) has no aten.silu and is left out",
)
_PRODUCT = Counterpart(
    CounterpartKind.OP,
    ("mul",),
    Fidelity.EXACT,
    "the elementwise product (aten.mul, a gated MLP's act(gate)·up), recomputed from its two inputs, which the "
    "product's backward keeps anyway",
)
_DROPOUT = Counterpart(
    CounterpartKind.MODULE,
    ("native_dropout", "bernoulli", "mul"),
    Fidelity.APPROXIMATE,
    "dropout is random: a checkpoint of the dropout module with its RNG state replayed; it drops the output "
    "and PyTorch's mask (a float noise tensor on CPU, a bool mask from native_dropout on CUDA)",
)
_LAYER_NORM = Counterpart(
    CounterpartKind.OP,
    ("native_layer_norm",),
    Fidelity.APPROXIMATE,
    "layer norm's output, recomputed from its input; PyTorch's mean and rstd go with it",
)
_RMS_NORM = Counterpart(
    CounterpartKind.OP,
    ("mul",),
    Fidelity.APPROXIMATE,
    "the RMS norm's output: PyTorch runs it written out (pow, mean, rsqrt, mul), so its two muls are recomputed "
    "from what the norm keeps anyway, which drops the normalized input too",
)
_SOFTMAX = Counterpart(
    CounterpartKind.NONE,
    (),
    Fidelity.NONE,
    "eager softmax keeps its output, and rerunning it keeps the masked scores nothing else keeps: no smaller "
    "tensor to drop (under SDPA there is no T×T matrix at all); a region over the attention module "
    "(memopt tune --backend torch) is the nearest",
)
_VIEWS = Counterpart(
    CounterpartKind.NONE,
    (),
    Fidelity.NONE,
    "PyTorch's reshape and transpose are views: the stashed copy is the batched matmul's own contiguous "
    "input, and rerunning it keeps its source alive: nothing to drop",
)
_RESIDUAL = Counterpart(
    CounterpartKind.OP,
    ("add",),
    Fidelity.EXACT,
    "the residual sum (aten.add), recomputed from its two inputs where both are kept anyway",
)
_OUTSIDE_MODULES = Counterpart(
    CounterpartKind.NONE,
    (),
    Fidelity.NONE,
    "made in the model's own forward, outside any submodule, where a policy names no module (a few bytes)",
)

# ORT 1.19's plan names for the models memopt tunes (built-in gpt and bert, Hugging Face decoders).
_BY_SUBGRAPH: dict[str, Counterpart] = {
    "Gelu+": _GELU,
    "FastGelu+": _FAST_GELU,
    "BiasGelu+": _GELU,
    "FusedMatMul+Add+": _LINEAR,
    "MatMul+Add+": _LINEAR,
    "Add+": _RESIDUAL,
    "FusedMatMul+Add+Add+": _RESIDUAL,
    "LayerNormalization+": _LAYER_NORM,
    "SimplifiedLayerNormalization+": _RMS_NORM,
    "FusedMatMul+": _LINEAR,
    "QuickGelu+": _SILU,
    "Mul+": _PRODUCT,
    "Dropout+": _DROPOUT,
    "FusedMatMul+Add+Dropout+": _DROPOUT,
    "BitmaskDropout+": _DROPOUT,
    "FusedMatMul+Where+Softmax+": _SOFTMAX,
    "Softmax+": _SOFTMAX,
    "MatMul+Transpose+Reshape+": _VIEWS,
    "MatMul+Transpose+Reshape+Reshape+": _VIEWS,
    "FusedMatMul+Add+Split+Reshape+Transpose+": _VIEWS,
    "FusedMatMul+Add+Reshape+Transpose+": _VIEWS,
    "Range+": _OUTSIDE_MODULES,
}
# Any other plan, by its entry node's op: the stashed tensor is that op's output.
_BY_ENTRY_OP: dict[str, Counterpart] = {
    "Gelu": _GELU,
    "FastGelu": _FAST_GELU,
    "Gemm": _LINEAR,
    "BiasGelu": _GELU,
    "LayerNormalization": _LAYER_NORM,
    "SimplifiedLayerNormalization": _RMS_NORM,
    "QuickGelu": _SILU,
    "Dropout": _DROPOUT,
    "BitmaskDropout": _DROPOUT,
    "Softmax": _SOFTMAX,
    "Transpose": _VIEWS,
    "Reshape": _VIEWS,
    "Range": _OUTSIDE_MODULES,
}


# ONNX ops that only reshape: PyTorch's are views of the tensor before them.
_VIEW_OPS = frozenset({"Reshape", "Transpose", "Split", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def entry_op(subgraph: str) -> str:
    """The op whose output an ORT plan stops stashing, as PyTorch holds it: the last op its
    subgraph name lists that is not a reshape (``FastGelu+Reshape+``: the GELU, of which
    PyTorch's reshape is a view); the last op where all are."""
    ops = [op for op in subgraph.split("+") if op]
    computing = [op for op in ops if op not in _VIEW_OPS]
    return (computing or ops or [""])[-1]


def counterpart(subgraph: str) -> Counterpart:
    """What the ORT plan ``subgraph`` (``FusedMatMul+Add+``) becomes in plain PyTorch."""
    known = _BY_SUBGRAPH.get(subgraph) or _BY_ENTRY_OP.get(entry_op(subgraph))
    if known is not None:
        return known
    return Counterpart(
        CounterpartKind.NONE,
        (),
        Fidelity.NONE,
        f"no PyTorch counterpart is known for ORT's {entry_op(subgraph) or 'empty'} plans",
    )
