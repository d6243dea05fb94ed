"""Recompute plans of a plain-PyTorch model, with their savings as functions of batch and sequence.

A recipe's step is captured (``capture``) with fake tensors (``FakeTensorMode``: shapes and bytes
without memory, so a model larger than the machine scans too) at the asked batch and sequence
length and at a few other sizes; each plan's saved bytes are then fitted exactly as
``batch·(a + b·seq + c·seq²)`` (as many sequence terms as there were distinct sequence lengths)
and checked on one more batch. A plan whose bytes do not follow that form keeps its measured
figure and no formula. The recompute times come from one real capture at batch 2 (a small real
step, as every capture keeps all its forward outputs alive), taken as growing with the batch. A
forward that reads its tensors' values cannot run on fake tensors, and is captured real.

Three kinds of plan come out (``policy``): ``MODULE: OP`` for every op whose saved outputs a
recompute from its inputs can drop, ``MODULE: *`` for repeated modules (numbered, as layers
are), whose saving is what their subtree keeps less the inputs a checkpoint keeps in its place,
and on each layer (a module whose own name is its number) its selective sets
``MODULE: * except mm, ...``: its checkpoint keeping the outputs of the matmuls that ran in it
(``SELECTIVE_KEEP``), so backward reruns only the cheaper ops between them (norms, activations,
softmax, dropout), as torchtitan's selective mode does. Each saves the layer's checkpoint's bytes
less every kept output (eager SAC caches them whole, saved for backward or not) and costs the
layer's forward time less the kept ops'. Modules holding batch norm get no whole-module plan:
its rerun would update the running stats twice.
Each comes over every layer alike (``rows``, ``blocks.*.mlp: *``) and layer by layer (``layers``,
``blocks.3.mlp: *``), which is what tune chooses from, with a causal LM's chunked loss
(``HEAD: chunked-loss``) beside them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)

from memopt.errors import MemoptError, one_line
from memopt.graph.polynomial import Monomial, Polynomial
from memopt.recipes import Recipe, RecipeError
from memopt.recipes.defaults import check_loss, default_loss
from memopt.recompute.capture import BATCH_INPUT, CapturedStep, capture_step, module_pattern, plannable
from memopt.recompute.loss import causal_lm_head
from memopt.recompute.policy import OpName, RecomputePlan

__all__ = [
    "BATCH",
    "NEEDS_VALUES",
    "SELECTIVE_KEEP",
    "SEQ",
    "Size",
    "TorchPlanRow",
    "TorchScan",
    "capture_recipe",
    "plans_of",
    "recipe_forward",
    "scan_recipe",
    "scan_sizes",
]

BATCH, SEQ = "batch", "seq"
# The one real step a scan runs, for its recompute times: a small batch, as it keeps every forward
# output alive until it ends; two, not one, as batch norm in training and some losses need two.
_TIMED_BATCH = 2
# What a fake tensor cannot answer: the forward reads a value, or an op's output shape depends on one.
NEEDS_VALUES = (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException)
Size = tuple[int, int | None]  # batch, and seq where the recipe takes one
# The ops a layer's selective sets keep: the matmuls, the costly ops between cheap ones. First the
# projections' (a weight's matmul: ``mm``, ``addmm``), as torchtitan keeps; then every matmul, the
# attention's batched ones too, which keeps the attention scores (batch × heads × seq², the largest
# tensors of eager attention) and reruns only the softmax and dropout around them. Attention kernels
# (``_scaled_dot_product_*``) are never kept: they draw random numbers for their dropout, so skipped
# in backward's rerun they would shift the replayed RNG of every random op after them
# (``OpName.refuse_unsafe`` refuses to keep them).
SELECTIVE_KEEP = (("addmm", "mm"), ("addmm", "baddbmm", "bmm", "mm"))


@dataclass(frozen=True)
class TorchPlanRow:
    plan: RecomputePlan
    tensors: int  # saved tensors the plan drops at the scan's size
    modules: int  # modules the pattern matches
    saving_bytes: int  # at the scan's batch and sequence length
    saving: Polynomial | None  # in BATCH (and SEQ); None where the sizes follow no such formula
    recompute_seconds: float  # the forward time of what backward reruns, at the scan's size
    peak_share: float  # the saving's share the peak sees (backward holds some of it again as it recomputes)
    grows_with_batch: bool = True  # the cost grows with the batch (the optimizer's step does not)

    def seconds_at(self, batch: int, scan_batch: int) -> float:
        """The plan's cost a step at ``batch``, from its figure at the scan's batch."""
        return self.recompute_seconds * batch / scan_batch if self.grows_with_batch else self.recompute_seconds


@dataclass(frozen=True)
class TorchScan:
    batch: int
    seq: int | None
    saved_bytes: int  # every activation the step keeps (parameters left out)
    saved: Polynomial | None
    rows: tuple[TorchPlanRow, ...]  # each plan over every layer alike
    # The plans layer by layer (exact module paths) and the chunked loss: what tune chooses from.
    layers: tuple[TorchPlanRow, ...] = ()


def scan_recipe(recipe: Recipe, batch: int, *, timed: bool = True) -> TorchScan:
    """Capture the recipe's step at ``batch`` (and its ``seq_len`` option, where it takes one) and group the plans.

    The bytes come from fake tensors (``FakeTensorMode``): the model, its batch and every op's
    output hold no memory, so any size scans in seconds. ``timed``: the recompute times come from
    one real step at batch 2 (or ``batch`` if smaller) and the scan's sequence length, scaled to
    ``batch``; a forward that reads its tensors' values scans with real tensors throughout; without it they
    are only the fake dispatch's, not the ops'."""
    points, check = scan_sizes(recipe, batch)
    try:
        with FakeTensorMode():  # type: ignore[no-untyped-call]
            captures = {point: capture_recipe(recipe, *point) for point in [*points, check]}
            model = _model(recipe)
    except NEEDS_VALUES:
        # A forward that reads its tensors' values (a branch on them, .item(), a boolean mask's
        # shape) cannot run on fake ones: its bytes and times come from real captures instead.
        captures = {point: capture_recipe(recipe, *point) for point in [*points, check]}
        return _grouped(captures, points, check, _model(recipe))
    if timed:
        timed_batch = min(batch, _TIMED_BATCH)
        real = capture_recipe(recipe, timed_batch, points[0][1])
        captures[points[0]] = _with_times(captures[points[0]], real, batch / timed_batch)
    return _grouped(captures, points, check, model)


def _grouped(captures: Mapping[Size, CapturedStep], points: list[Size], check: Size, model: nn.Module) -> TorchScan:
    """The plans of ``captures``, batch norm's modules left out of the whole-module plans."""
    batch_norm = {path for path, module in model.named_modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)}
    all_paths = [path for path, _ in model.named_modules() if path]
    return plans_of(captures, points, check, all_paths, batch_norm, causal_lm_head(model))


def scan_sizes(recipe: Recipe, batch: int) -> tuple[list[Size], Size]:
    """The sizes a scan at ``batch`` captures: ``batch`` and ``batch + 1`` at the recipe's
    ``seq_len`` and its half and quarter (the first size is the scan's own), and the size its
    fit is checked on."""
    seq = recipe.options.get("seq_len")
    seqs: list[int | None] = sorted({s for s in (seq, (seq or 0) // 2, (seq or 0) // 4) if s}, reverse=True) or [None]
    return [(b, s) for b in (batch, batch + 1) for s in seqs], (batch + 2, seqs[-1])


def plans_of(
    captures: Mapping[Size, CapturedStep],
    points: list[Size],
    check: Size,
    all_paths: Sequence[str],
    batch_norm: Collection[str],
    loss_head: str | None = None,
) -> TorchScan:
    """The plans of steps captured at ``points`` (the first is the scan's size) and ``check``:
    each op and each repeated module's saving, fitted as a polynomial where the sizes follow one,
    over every layer alike and layer by layer. ``all_paths``: every named submodule;
    ``batch_norm``: those holding batch norm; ``loss_head``: the causal LM's output head, where
    the chunked loss applies (``memopt.recompute.loss``)."""
    batch, seq = points[0]
    main = captures[points[0]]

    def fitted(select: Any) -> Polynomial | None:
        return _fit({point: select(step) for point, step in captures.items()}, points, check)

    def row(plan: RecomputePlan, share: Callable[[int], float]) -> TorchPlanRow | None:
        """The plan's row; ``share(at_once)``: its saving's share that the peak sees, of its modules
        (a whole-module plan) or saved tensors (an op plan) that backward recomputes one at a time."""
        paths = [p for p in all_paths if plan.matches_module(p)]
        if plan.op is not None:
            op = str(plan.op)
            saving = functools.partial(_op_saving, paths=frozenset(paths), op=op)
            count = sum(t.op == op and t.module in paths for t in main.saved)
        else:
            if any(_within(b, p) for b in batch_norm for p in paths):
                return None
            kept = frozenset(map(str, plan.keep))
            saving = functools.partial(_region_saving, paths=paths, kept=kept)
            count = sum(any(_within(t.module, p) for p in paths) and t.op not in kept for t in main.saved)
        bytes_ = saving(main)
        if bytes_ <= 0:
            return None
        return TorchPlanRow(
            plan,
            count,
            len(paths),
            bytes_,
            fitted(saving),
            seconds(plan),
            share(len(paths) if plan.whole_module else count),
        )

    def seconds(plan: RecomputePlan) -> float:
        """The forward time of what the plan reruns, at the scan's size."""
        paths = [p for p in all_paths if plan.matches_module(p)]
        if plan.op is None:
            kept = {str(op) for op in plan.keep}
            skipped = sum(s for (m, name), s in main.op_seconds.items() if name in kept and _within_any(m, paths))
            return sum(main.module_seconds.get(p, 0.0) for p in paths) - skipped
        return sum(s for (path, name), s in main.op_seconds.items() if name == str(plan.op) and path in paths)

    op_plans = sorted({(module_pattern(t.module), t.op) for t in main.saved if t.module and plannable(t.op)})
    region_plans = sorted({module_pattern(p) for p in all_paths if module_pattern(p) != p})
    patterns = [RecomputePlan(pattern, OpName.parse(op)) for pattern, op in op_plans]
    patterns += [RecomputePlan(pattern) for pattern in region_plans]
    patterns += _selective_plans(main, region_plans, all_paths)
    # Over every layer, backward holds one region (or op output) again at a time while it recomputes it.
    rows = [row(plan, _all_but_one) for plan in patterns]
    instances = []
    for plan, pattern, share in _layer_by_layer(patterns, all_paths, functools.partial(_rerun_first, main)):
        instance = row(plan, share)
        if instance is not None:
            # Alike layers do alike work: each takes the mean of their times, steadier than its own
            # (the first layer's call pays what warms the runtime up).
            layers = sum(pattern.matches_module(p) for p in all_paths) / instance.modules
            instances.append(replace(instance, recompute_seconds=seconds(pattern) / layers))
    loss = _loss_row(main, loss_head, fitted) if loss_head is not None else None
    if loss is not None:
        instances.append(loss)
    return TorchScan(
        batch,
        seq,
        main.saved_bytes,
        fitted(lambda step: step.saved_bytes),
        tuple(sorted((r for r in rows if r), key=lambda r: (-r.saving_bytes, str(r.plan)))),
        tuple(instances),
    )


def _selective_plans(step: CapturedStep, region_plans: list[str], all_paths: Sequence[str]) -> list[RecomputePlan]:
    """Each layer's selective sets: its checkpoint keeping each ``SELECTIVE_KEEP`` set's ops that ran
    in it (two sets that ran alike are one). Only on layers (patterns whose last name is the number):
    inside one, its attention and MLP checkpoints already split it, and selective sets on each would
    multiply the rows for little."""
    plans: list[RecomputePlan] = []
    for layer in (RecomputePlan(pattern) for pattern in region_plans if pattern.split(".")[-1] == "*"):
        paths = [p for p in all_paths if layer.matches_module(p)]
        ran = {op for module, op in step.op_seconds if _within_any(module, paths)}
        for keep in dict.fromkeys(tuple(op for op in ops if op in ran) for ops in SELECTIVE_KEEP):
            if keep:
                plans.append(replace(layer, keep=tuple(map(OpName.parse, keep))))
    return plans


def _all_but_one(at_once: int) -> float:
    return (at_once - 1) / at_once if at_once else 0.0


def _rerun_first(step: CapturedStep, layer: str) -> bool:
    """Whether backward reruns ``layer`` as good as at its start, when all is alive: the later
    layers' tensors (saved after the layer's, in the order forward saved them, inside a numbered
    module) come to less than the layer saves itself. A stack's last layer is; the last block of a
    network's first stage is not: backward frees the later stages' tensors before it reaches it,
    making only their parameters' gradients meanwhile, where the head's and the loss's tensors come
    back as gradients as large, and the head's weight's gradient stays."""
    places = [place for place, t in enumerate(step.saved) if _within(t.module, layer)]
    if not places:
        return True
    later = [t for t in step.saved[max(places) + 1 :] if module_pattern(t.module) != t.module]
    return sum(t.nbytes for t in later) < sum(step.saved[place].nbytes for place in places)


def _layer_by_layer(
    patterns: list[RecomputePlan], all_paths: Sequence[str], rerun_first: Callable[[str], bool]
) -> list[tuple[RecomputePlan, RecomputePlan, Callable[[int], float]]]:
    """Each plan over a numbered module path (a layer) as one plan per layer, beside the plan: its first ``*`` as
    that layer's number. A plan saves its whole bytes at the peak on every layer that backward
    reruns after the layers behind it freed theirs; on one it reruns at its start (``rerun_first``:
    a stack's last), when all are alive, it holds one region (or op output) of it again at a time."""
    out: list[tuple[RecomputePlan, RecomputePlan, Callable[[int], float]]] = []
    for plan in patterns:
        names = plan.module.split(".")
        if "*" not in names:
            continue
        star = names.index("*")
        names_there = {p.split(".")[star] for p in all_paths if plan.matches_module(p)}
        numbers = sorted(int(name) for name in names_there if name.isdigit())
        for number in numbers:
            module = ".".join([*names[:star], str(number), *names[star + 1 :]])
            last = rerun_first(".".join([*names[:star], str(number)]))

            def share(at_once: int, last: bool = last) -> float:
                return _all_but_one(at_once) if last else 1.0

            out.append((replace(plan, module=module), plan, share))
    return out


def _loss_row(step: CapturedStep, head: str, fitted: Callable[[Any], Polynomial | None]) -> TorchPlanRow | None:
    """The chunked loss's row: what the head and the loss after it save (the log-softmax over the
    vocabulary, chiefly), the head's input left out; it reruns nothing (its gradients are made in
    forward), so its cost is none."""
    saving = functools.partial(_loss_saving, head=head)
    bytes_ = saving(step)
    if bytes_ <= 0:
        return None
    inside = sum(_within(t.module, head) or t.module == "" for t in step.saved)
    return TorchPlanRow(RecomputePlan(head, chunked_loss=True), inside, 1, bytes_, fitted(saving), 0.0, 1.0)


def _loss_saving(step: CapturedStep, head: str) -> int:
    return sum(
        t.nbytes
        for t in step.saved
        if t.op != BATCH_INPUT
        and (t.module == "" or _within(t.module, head))
        and all(s == "" or _within(s, head) for s in t.savers)
    )


def _op_saving(step: CapturedStep, paths: frozenset[str], op: str) -> int:
    """Bytes of the op's saved outputs in the modules ``paths``, less its inputs that backward's
    recompute keeps and nothing else saved."""
    saved = {t.storage: t.nbytes for t in step.saved}
    made = [t for t in step.saved if t.op == op and t.module in paths]
    outputs = {t.storage: t.nbytes for t in made}
    kept = {
        address: nbytes for t in made for address, nbytes in t.op_inputs if address not in saved or address in outputs
    }
    return sum(outputs.values()) - sum(kept.values())


def _region_saving(step: CapturedStep, paths: list[str], kept: frozenset[str] = frozenset()) -> int:
    """Bytes made and saved only inside the modules: what a checkpoint of each drops; less, for a
    selective set, the outputs of the ``kept`` ops made inside (all of them: eager SAC caches an
    op's whole output, whether autograd saves it or not).

    Tensors made outside and saved inside are the modules' inputs, which the checkpoint keeps;
    an input nothing inside saved is kept too, and not counted against the saving here."""
    dropped = sum(
        t.nbytes for t in step.saved if _within_any(t.module, paths) and all(_within_any(s, paths) for s in t.savers)
    )
    cached = sum(n for (module, op), n in step.op_output_bytes.items() if op in kept and _within_any(module, paths))
    return dropped - cached


def _within(module: str, path: str) -> bool:
    return module == path or module.startswith(path + ".")


def _within_any(module: str, paths: Sequence[str]) -> bool:
    return any(_within(module, p) for p in paths)


def _with_times(step: CapturedStep, timed: CapturedStep, scale: float) -> CapturedStep:
    """``step``'s saved tensors with ``timed``'s forward times, each multiplied by ``scale``."""
    return replace(
        step,
        op_seconds={where: seconds * scale for where, seconds in timed.op_seconds.items()},
        module_seconds={path: seconds * scale for path, seconds in timed.module_seconds.items()},
    )


@contextlib.contextmanager
def _recipe_code(what: str) -> Iterator[None]:
    """The recipe's own code failing (its functions, its model's forward) is the recipe's error,
    one line as a trial says it; what fake tensors cannot answer goes on to the real capture."""
    try:
        yield
    except (MemoptError, *NEEDS_VALUES):
        raise
    except Exception as err:  # the recipe may raise anything
        raise RecipeError(f"{what} failed: {one_line(err)}") from err


def _model(recipe: Recipe) -> nn.Module:
    torch.manual_seed(0)
    with _recipe_code("build_model()"):
        model = recipe.model()
    if not isinstance(model, nn.Module):
        raise MemoptError(f"build_model() returned {type(model).__name__}; expected a torch.nn.Module")
    return model.train()


def capture_recipe(recipe: Recipe, batch: int, seq: int | None) -> CapturedStep:
    """The recipe's training step at ``batch`` and ``seq``, captured with the tensors of the mode it runs under."""
    model, forward = recipe_forward(recipe, batch, seq)
    return capture_step(model, lambda: forward()[1])


def recipe_forward(
    recipe: Recipe, batch: int, seq: int | None
) -> tuple[nn.Module, Callable[[], tuple[Any, torch.Tensor]]]:
    """The recipe's model in training mode, and its forward on one batch of ``batch`` at ``seq``
    (the output and the loss), both made with the tensors of the mode they are built under."""
    options = dict(recipe.options) | ({"seq_len": seq} if seq is not None else {})
    sized = replace(recipe, options=options)
    model = _model(sized)
    with _recipe_code("make_batch()"):
        inputs, target = sized.batch(batch)
    loss_fn = sized.loss or default_loss

    def forward_and_loss() -> tuple[Any, torch.Tensor]:
        with _recipe_code("the model's forward"):
            if isinstance(inputs, dict):
                output = model(**inputs)
            elif isinstance(inputs, tuple):
                output = model(*inputs)
            else:
                output = model(inputs)
        with _recipe_code("loss()" if sized.loss else "the default loss"):
            return output, check_loss(loss_fn(output, target))

    return model, forward_and_loss


def _fit(values: Mapping[Size, int], points: list[Size], check: Size) -> Polynomial | None:
    """The exact polynomial of degree 1 in batch and ``len(seqs) - 1`` in seq through ``points``
    that also gives the ``check`` value, else None."""
    seq_powers = len({seq for _, seq in points})
    monomials: list[Monomial] = [
        tuple(term for term in ((BATCH, b), (SEQ, s)) if term[1]) for b in (0, 1) for s in range(seq_powers)
    ]

    def row(point: Size) -> list[float]:
        batch, seq = point
        return [float(batch**b * (seq or 1) ** s) for b in (0, 1) for s in range(seq_powers)]

    solved = np.linalg.solve(np.array([row(p) for p in points]), np.array([float(values[p]) for p in points]))
    poly = Polynomial(
        {m: c for m, c in zip(monomials, (Fraction(float(c)).limit_denominator(64) for c in solved)) if c}
    )
    if any(poly.evaluate({BATCH: b, SEQ: s or 1}) != values[(b, s)] for b, s in [*points, check]):
        return None
    return poly
