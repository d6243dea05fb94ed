"""An ORT memory-optimizer config carried over to plain PyTorch: the torch policy that drops the same tensors.

Each enabled ORT plan is looked up in ORT's scan of the same model (which stashed tensors it
drops, in which modules) and in the torch scan (which aten op's saved outputs each module keeps):
``memopt.backends.ort.torch_counterparts`` says which aten ops an ORT plan's stashed tensor is, and the
torch plans of those ops in the plan's modules carry it over. A plan with no counterpart, or whose
counterpart the torch scan finds nothing to drop for, is kept in the export with the reason and
left out of the policy: never dropped silently.

The export is then verified in plain PyTorch (``memopt export``): a seeded step with and
without the policy (``gradients``), and a torch trial at the config's batch whose measured peak
is held against the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memopt.backends.ort.config import ConfigEntry, OptimizationType
from memopt.backends.ort.scan.modules import module_path
from memopt.backends.ort.scan.patterns import Pattern
from memopt.backends.ort.torch_counterparts import Counterpart, CounterpartKind, Fidelity, counterpart, entry_op
from memopt.backends.torch.scan import BATCH, SEQ, TorchPlanRow, TorchScan
from memopt.graph.expr import UnknownSymbolError
from memopt.graph.polynomial import Polynomial
from memopt.recompute import RecomputePolicy
from memopt.recompute.capture import module_pattern

__all__ = [
    "PlanExport",
    "TorchExport",
    "export_config",
]


@dataclass(frozen=True)
class PlanExport:
    """One enabled ORT plan and the torch plans that carry it over (none: left out, ``reason`` says why)."""

    entry: ConfigEntry
    counterpart: Counterpart
    modules: tuple[str, ...]  # where ORT's plan occurs, layers folded (blocks.*.mlp.fc)
    ort_bytes: float | None  # what ORT's plan saves in memopt's model at the export's size; None: not in the scan
    rows: tuple[TorchPlanRow, ...]
    row_bytes: tuple[float, ...]  # what each torch plan saves at the export's size (torch scan)
    reason: str

    @property
    def torch_bytes(self) -> float:
        return sum(self.row_bytes)

    @property
    def carried(self) -> bool:
        return bool(self.rows)

    @property
    def fidelity(self) -> Fidelity:
        return self.counterpart.fidelity if self.carried else Fidelity.NONE


@dataclass(frozen=True)
class TorchExport:
    batch: int
    plans: tuple[PlanExport, ...]
    # Activations kept for backward without recompute at the batch: the baselines the savings come off.
    ort_kept_bytes: float | None  # memopt's model of ORT's stashed tensors
    torch_kept_bytes: float  # the torch scan's saved tensors

    @property
    def policy(self) -> RecomputePolicy:
        rows = {str(row.plan): row.plan for plan in self.plans for row in plan.rows}
        return RecomputePolicy(tuple(rows.values()))

    @property
    def ort_bytes(self) -> float:
        return sum(plan.ort_bytes or 0.0 for plan in self.plans)

    @property
    def torch_bytes(self) -> float:
        """What the policy saves: each torch plan once, though two ORT plans may carry over to it."""
        saved = {str(row.plan): b for plan in self.plans for row, b in zip(plan.rows, plan.row_bytes)}
        return sum(saved.values())

    @property
    def left_out(self) -> tuple[PlanExport, ...]:
        return tuple(plan for plan in self.plans if not plan.carried)


def export_config(
    entries: Sequence[ConfigEntry],
    patterns: Sequence[Pattern],
    torch_scan: TorchScan,
    *,
    batch: int,
    ort_dims: Mapping[str, int],
    ort_stashed: Polynomial,
) -> TorchExport:
    """Carry each enabled entry of an ORT config over to ``torch_scan``'s plans.

    ``patterns`` and ``ort_stashed``: ORT's scan of the same model (``memopt.backends.ort.scan``), its plans and
    every stashed activation's bytes, evaluated at ``ort_dims`` (the graph's dims at ``batch``); the
    torch figures at ``batch`` and the torch scan's seq."""
    effective = {entry.subgraph: entry for entry in entries}  # ORT keeps the last entry per subgraph
    # A plan ORT ties to another by a shared buffer is its own row too: the plan's own row first.
    by_cell = {cell: p for p in patterns if len(p.key.cells) > 1 for cell in p.key.cells}
    by_cell |= {p.key.cells[0]: p for p in patterns if len(p.key.cells) == 1}
    exported = []
    for entry in effective.values():
        if entry.optimization is OptimizationType.DISABLED:
            continue
        exported.append(_export_entry(entry, by_cell.get(entry.cell), torch_scan, batch, ort_dims))
    torch_kept = _at_batch(torch_scan.saved, torch_scan.saved_bytes, torch_scan, batch)
    return TorchExport(batch, tuple(exported), _bytes(ort_stashed, ort_dims), torch_kept)


def _export_entry(
    entry: ConfigEntry, pattern: Pattern | None, scan: TorchScan, batch: int, ort_dims: Mapping[str, int]
) -> PlanExport:
    found = counterpart(entry.subgraph)
    if pattern is None:
        return PlanExport(entry, found, (), None, (), (), "ORT's scan of this model has no such plan: ORT ignores it")
    modules = tuple(dict.fromkeys(module_pattern(m) for m in pattern.modules))
    ort_bytes = _bytes(pattern.exact, ort_dims)
    if entry.optimization is OptimizationType.COMPROMISE:
        reason = "a compromise plan keeps a smaller copy (a cast); PyTorch has no such mode"
        return PlanExport(entry, found, modules, ort_bytes, (), (), reason)
    if not found.carries_over:
        return PlanExport(entry, found, modules, ort_bytes, (), (), found.note)
    rows = _torch_rows(found, pattern, scan)
    if not rows:
        where = ", ".join(modules) or "the model's own forward"
        reason = (
            f"the torch scan finds no saved output of {' or '.join(f'aten.{op}' for op in found.aten_ops)} "
            f"in {where} that a recompute would drop"
        )
        return PlanExport(entry, found, modules, ort_bytes, (), (), reason)
    note = found.note
    if entry.count >= 0 and entry.count < pattern.frequency:
        note += f"; ORT recomputes the first {entry.count} of {pattern.frequency}, the torch plan every one"
    row_bytes = tuple(_at_batch(row.saving, row.saving_bytes, scan, batch) for row in rows)
    return PlanExport(entry, found, modules, ort_bytes, rows, row_bytes, note)


def _torch_rows(found: Counterpart, pattern: Pattern, scan: TorchScan) -> tuple[TorchPlanRow, ...]:
    """The torch plans of the counterpart's ops in the modules ORT's plan occurs in.

    The module is the scope the exporter gave the node whose output PyTorch holds (the GELU of
    ``FastGelu+Reshape+``, not the reshape). A node ORT fused (``Gelu_token_0``) lost that scope,
    and memopt's ORT scan names a neighbour's module instead (``mlp.fc`` for the GELU in
    ``mlp.act``): for those, the op is looked for in the nearest enclosing module of the same
    layer that runs it."""
    whole = found.kind is CounterpartKind.MODULE
    candidates = [
        row
        for row in scan.rows
        if row.plan.whole_module == whole
        and (whole or (row.plan.op is not None and row.plan.op.name in found.aten_ops))
    ]
    # The node whose output PyTorch holds: the subgraph's last op that is not a reshape.
    ops = [op for op in pattern.subgraph.split("+") if op]
    held = max((i for i, op in enumerate(ops) if op == entry_op(pattern.subgraph)), default=len(ops) - 1)
    chosen: set[str] = set()
    for occurrence in pattern.occurrences:
        node = occurrence.nodes[held] if len(occurrence.nodes) == len(ops) else occurrence.entry
        scope = module_path(node)
        if scope is not None:
            module = module_pattern(scope)
            rows = [row for row in candidates if row.plan.module == module]
        elif occurrence.module:
            module = module_pattern(occurrence.module)
            rows = [row for row in candidates if row.plan.module == module]
            rows = rows or _in_nearest_layer_module(candidates, module)
        else:
            rows = []
        chosen.update(str(row.plan) for row in rows)
    return tuple(row for row in candidates if str(row.plan) in chosen)


def _in_nearest_layer_module(rows: Sequence[TorchPlanRow], module: str) -> list[TorchPlanRow]:
    """The rows in ``module``'s nearest ancestor (itself or below it) that holds any, among the
    ancestors within a layer (``blocks.*.mlp``, ``blocks.*``; never the model's own containers)."""
    ancestor = _parent(module)
    while ancestor is not None and "*" in ancestor.split("."):
        inside = [row for row in rows if _within(row.plan.module, ancestor)]
        if inside:
            return inside
        ancestor = _parent(ancestor)
    return []


def _within(module: str, ancestor: str) -> bool:
    return module == ancestor or module.startswith(ancestor + ".")


def _parent(module: str) -> str | None:
    return module.rpartition(".")[0] if "." in module else None


def _at_batch(fitted: Polynomial | None, measured: int, scan: TorchScan, batch: int) -> float:
    """A torch scan's figure at ``batch``: its polynomial, or where the sizes followed none, the bytes measured at
    the scan's batch grown with the batch."""
    if fitted is None:
        return measured * batch / scan.batch
    return fitted.evaluate({BATCH: batch, SEQ: scan.seq or 1})


def _bytes(polynomial: Polynomial, dims: Mapping[str, int]) -> float | None:
    try:
        return polynomial.evaluate(dims)
    except UnknownSymbolError:
        return None
