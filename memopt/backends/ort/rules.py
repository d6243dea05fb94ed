"""What each ORT release family considers recomputable, and how its search behaves.

Sources: ORT's recompute_analysis.cc, checked against real runs of 1.15.1–1.19.2.
Families: "1.16" (1.14–1.16), "1.17", "1.18", "1.19".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from memopt.backends.ort.version import OrtVersion
from memopt.errors import MemoptError

if TYPE_CHECKING:  # only annotations: the child process imports this package without onnx
    from memopt.backends.ort.graph.training_graph import Node

__all__ = [
    "FAMILIES",
    "AnalysisOrder",
    "ProbeLevel",
    "ReleaseRules",
    "SMALL_STATIC_LIMIT",
    "StaticEdgeFilter",
    "UnknownReleaseError",
    "family_of",
    "rules_for",
]

FAMILIES = ("1.16", "1.17", "1.18", "1.19")


class UnknownReleaseError(MemoptError):
    """No rules for that ORT release."""


class ProbeLevel(Enum):
    BASIC = 0
    ADVANCED = 1


class AnalysisOrder(Enum):
    """The topological order a release's memory optimizer walks."""

    FILE = "file"  # <= 1.16: ORT's default order, the one the saved graph is written in
    PRIORITY_BASED = "priority based"  # 1.17
    MEMORY_EFFICIENT = "memory efficient"  # 1.18: forward = the YieldOp's ancestors, in file order
    MEMORY_EFFICIENT_DEEPEST_FIRST = "memory efficient, deepest first"  # 1.19


class StaticEdgeFilter(Enum):
    """Which producer outputs with fully static shapes the search does not follow."""

    NONE = "none"  # <= 1.17
    ALL_STATIC = "all static"  # 1.18.0: any fully static shape (its element count is never computed)
    SMALL_STATIC = "small static"  # 1.19.2: fully static and under 1,048,576 elements


SMALL_STATIC_LIMIT = 1024 * 1024

# <= 1.17: op type -> the input indices the search may follow.
_ALLOWED_1_16_BASIC = {
    "Add": {0, 1},
    "BiasGelu": {0, 1},
    "Div": {0, 1},
    "Mul": {0, 1},
    "Sub": {0, 1},
    "Reshape": {0},
    "Squeeze": {0},
    "Unsqueeze": {0},
    "BitmaskDropout": {0},
    "CumSum": {0},
    "Dropout": {0},
    "Gelu": {0},
    "FastGelu": {0},
    "Where": {0, 1, 2},
    "Tile": {0},
    "Cast": {0},
}
_ALLOWED_1_16_ADVANCED = {
    "MatMul": {0, 1},
    "FusedMatMul": {0, 1},
    "Softmax": {0},
    "BiasSoftmax": {0, 1},
    "BiasSoftmaxDropout": {0, 1},
}
_ALLOWED_1_17_BASIC = {
    **_ALLOWED_1_16_BASIC,
    "Equal": {0, 1},
    "Shape": {0},
    "Transpose": {0},
    "Expand": {0},
    "ConcatTraining": {0, 1},
    "Slice": {0},
    "Split": {0},
    "Gather": {0},
    "QuickGelu": {0},
}
_ALLOWED_1_17_ADVANCED = {**_ALLOWED_1_16_ADVANCED, "LayerNormalization": {0, 1, 2}}

# 1.18+: "domain::OpType" -> {since_version: input indices the search ignores}.
_ONNX, _MS = "ai.onnx", "com.microsoft"


def _entry(domain: str, op: str, ignorable: dict[int, frozenset[int]]) -> tuple[str, dict[int, frozenset[int]]]:
    return f"{domain}::{op}", ignorable


def _same(versions: tuple[int, ...], ignorable: tuple[int, ...] = ()) -> dict[int, frozenset[int]]:
    return {v: frozenset(ignorable) for v in versions}


_IGNORABLE_1_18_BASIC = dict(
    [
        _entry(_ONNX, "Add", _same((1, 6, 7, 13, 14))),
        _entry(_ONNX, "BatchNormalization", _same((1, 6, 7, 9, 14, 15))),
        _entry(_ONNX, "Cast", _same((1, 6, 9, 13, 19))),
        _entry(_ONNX, "ConstantOfShape", _same((9, 20), (0,))),
        _entry(_ONNX, "Cos", _same((7,))),
        _entry(_ONNX, "CumSum", _same((11, 14), (1,))),
        _entry(_ONNX, "Dropout", _same((12, 13), (1, 2))),
        _entry(_ONNX, "Div", _same((1, 6, 7, 13, 14))),
        _entry(_ONNX, "Einsum", _same((12,))),
        _entry(_ONNX, "Equal", _same((1, 7, 11, 13, 19))),
        _entry(_ONNX, "Expand", _same((8, 13), (1,))),
        _entry(_ONNX, "Gather", _same((1, 11, 13), (1,))),
        _entry(_ONNX, "Gelu", _same((20,))),
        _entry(_ONNX, "Less", _same((1, 7, 9, 13))),
        _entry(_ONNX, "Mul", _same((1, 6, 7, 13, 14))),
        _entry(_ONNX, "Neg", _same((1, 6, 13))),
        # Not in the reference doc's table, but 1.18.0 prints a Reshape+Sub+NonZero+Squeeze+
        # plan: the valid-label filter ORT puts before a loss inside its graph (BERT, masked LM).
        _entry(_ONNX, "NonZero", _same((9, 13))),
        _entry(_ONNX, "Range", _same((11,), (0, 1, 2))),
        _entry(_ONNX, "Reshape", _same((1, 5, 13, 14, 19))),
        _entry(_ONNX, "Sin", _same((7,))),
        _entry(_ONNX, "Slice", {1: frozenset(), **_same((10, 11, 13), (1, 2, 3, 4))}),
        _entry(
            _ONNX, "Split", {1: frozenset({1}), 2: frozenset(), 11: frozenset(), 13: frozenset({1}), 18: frozenset({1})}
        ),
        _entry(_ONNX, "Squeeze", {1: frozenset(), 11: frozenset(), 13: frozenset({1})}),
        _entry(_ONNX, "Sub", _same((1, 6, 7, 13, 14))),
        _entry(_ONNX, "Tile", {1: frozenset({1, 2}), 6: frozenset({1}), 13: frozenset({1})}),
        _entry(_ONNX, "Transpose", _same((1, 13))),
        _entry(_ONNX, "Trilu", _same((14,), (1,))),
        _entry(_ONNX, "Unsqueeze", {1: frozenset(), 11: frozenset(), 13: frozenset({1})}),
        _entry(_ONNX, "Where", _same((9, 16))),
        _entry(_MS, "BiasGelu", _same((1,))),
        _entry(_MS, "BiasDropout", _same((1,), (3, 4))),
        _entry(_MS, "BitmaskBiasDropout", _same((1,), (3, 4))),
        _entry(_MS, "BitmaskDropout", _same((1,), (1, 2))),
        _entry(_MS, "ConcatTraining", _same((1,))),
        _entry(_MS, "FastGelu", _same((1,))),
        _entry(_MS, "FlattenAndUnpad", _same((1,), (1,))),
        _entry(_MS, "Gelu", _same((1,))),
        _entry(_MS, "PadAndUnflatten", _same((1,), (1, 2))),
        _entry(_MS, "QuickGelu", _same((1,))),
    ]
)
_IGNORABLE_1_18_ADVANCED = dict(
    [
        _entry(_MS, "BiasSoftmax", _same((1,))),
        _entry(_MS, "BiasSoftmaxDropout", _same((1,), (2,))),
        # Gemm is not in the reference doc's table, but 1.18.0 and 1.19.2 print Gemm+ plans for
        # an MLP, and 1.19.2's VERBOSE search log lists Gemm nodes "in recompute op list".
        _entry(_ONNX, "Gemm", _same((1, 6, 7, 9, 11, 13))),
        _entry(_ONNX, "LayerNormalization", _same((1, 17))),
        _entry(_ONNX, "MatMul", _same((1, 9, 13))),
        _entry(_MS, "FusedMatMul", _same((1,))),
        _entry(_ONNX, "SimplifiedLayerNormalization", _same((1,))),
        _entry(_MS, "SkipLayerNormalization", _same((1,))),
        _entry(_MS, "SkipSimplifiedLayerNormalization", _same((1,))),
        _entry(_ONNX, "Softmax", _same((1, 11, 13))),
    ]
)
# 1.19 also recomputes flash-attention PythonOps (which inputs it follows is unverified:
# all of them, as for every other 1.18+ op without ignorable indices).
_FLASH_ATTENTION_FUNCS = frozenset(
    {
        "flash_attn.bert_padding.IndexFirstAxis",
        "flash_attn.bert_padding.IndexPutFirstAxis",
        "flash_attn.flash_attn_interface.FlashAttnFunc",
        "flash_attn.flash_attn_interface.FlashAttnVarlenFunc",
    }
)
_FLASH_ATTENTION_BOUNDARY_FUNCS = frozenset(
    {
        "flash_attn.flash_attn_interface.FlashAttnFunc",
        "flash_attn.flash_attn_interface.FlashAttnVarlenFunc",
    }
)


@dataclass(frozen=True)
class ReleaseRules:
    """The memory optimizer's analysis as one release family does it."""

    family: str
    max_subgraph_nodes: int
    stashed_needs_forward_use: bool  # <= 1.18: a candidate must be used in forward and backward
    static_edge_filter: StaticEdgeFilter
    ignorable_indices: bool  # 1.18+: tables list the inputs to skip, not those to follow
    has_compromise_type: bool  # 1.17+: compromise is config type 2 (<= 1.16: its own section)
    has_layer_boundary: bool  # 1.17+: ORTMODULE_MEMORY_OPT_LEVEL=1/2 probe "1:1"
    # 1.19: the search stops at (reuses) a producer with *any* output used in backward,
    # not only the output it came through. Seen in 1.19.2's VERBOSE search log: a
    # Dropout whose mask is stashed ends the search although its data output is not.
    backward_use_by_node: bool = False
    # 1.17+: the Plan table is built from the session's execution plan, so a plan whose
    # stashed output aliases another node's buffer is listed combined with that node's plans.
    combines_shared_buffers: bool = False
    # The node order the analysis walks (memopt.backends.ort.graph.topology): the order of each subgraph
    # string's nodes, and which nodes count as forward.
    analysis_order: AnalysisOrder = AnalysisOrder.FILE

    def is_recomputable(self, node: Node, level: ProbeLevel) -> bool:
        return self.followed_inputs(node, level) is not None

    def followed_inputs(self, node: Node, level: ProbeLevel) -> frozenset[int] | None:
        """Input indices the search follows from ``node``; None when it is not recomputable."""
        if not self.ignorable_indices:
            table = dict(_ALLOWED_1_16_BASIC if self.family == "1.16" else _ALLOWED_1_17_BASIC)
            if level is ProbeLevel.ADVANCED:
                table.update(_ALLOWED_1_16_ADVANCED if self.family == "1.16" else _ALLOWED_1_17_ADVANCED)
            allowed = table.get(node.op_type)
            return frozenset(allowed) if allowed is not None else None
        if self.family == "1.19" and node.op_type == "PythonOp" and node.func_name in _FLASH_ATTENTION_FUNCS:
            return _all_but(node, frozenset())
        versions = _IGNORABLE_1_18_BASIC.get(node.qualified_op)
        if versions is None and level is ProbeLevel.ADVANCED:
            versions = _IGNORABLE_1_18_ADVANCED.get(node.qualified_op)
        if versions is None or node.since_version not in versions:
            return None
        return _all_but(node, versions[node.since_version])

    def is_attention(self, node: Node) -> bool:
        """What the layer-boundary search stops at: softmax (and, on 1.19, flash attention)."""
        if node.op_type in ("Softmax", "BiasSoftmax"):
            return True
        return (
            self.family == "1.19" and node.op_type == "PythonOp" and node.func_name in _FLASH_ATTENTION_BOUNDARY_FUNCS
        )


def _all_but(node: Node, ignorable: frozenset[int]) -> frozenset[int]:
    return frozenset(i for i in range(len(node.inputs)) if i not in ignorable)


_RULES = {
    "1.16": ReleaseRules("1.16", 15, True, StaticEdgeFilter.NONE, False, False, False),
    "1.17": ReleaseRules(
        "1.17", 15, True, StaticEdgeFilter.NONE, False, True, True, False, True, AnalysisOrder.PRIORITY_BASED
    ),
    "1.18": ReleaseRules(
        "1.18", 50, True, StaticEdgeFilter.ALL_STATIC, True, True, True, False, True, AnalysisOrder.MEMORY_EFFICIENT
    ),
    "1.19": ReleaseRules(
        "1.19",
        50,
        False,
        StaticEdgeFilter.SMALL_STATIC,
        True,
        True,
        True,
        True,
        True,
        AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST,
    ),
}


def family_of(version: str) -> str:
    """The rule family of an ORT version such as ``1.19.2`` or ``1.17``."""
    match = re.match(r"^\s*(\d+)\.(\d+)", version)
    if match is None:
        raise UnknownReleaseError(f"{version!r} is not an ORT version (expected e.g. 1.19.2)")
    release = (int(match.group(1)), int(match.group(2)))
    if (1, 14) <= release <= (1, 16):
        return "1.16"
    if release in ((1, 17), (1, 18), (1, 19)):
        return f"{release[0]}.{release[1]}"
    raise UnknownReleaseError(f"no memory-optimizer rules for ORT {version}: memopt knows 1.14 to 1.19")


def rules_for(version: OrtVersion | str) -> ReleaseRules:
    """The rules of a release, or of a version as given on the command line."""
    return _RULES[family_of(str(version))]
