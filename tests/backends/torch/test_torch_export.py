"""``memopt export --torch``: ORT plans carried over to torch recompute plans, and the command end to end.

The mapping tests pair ORT's plans as memopt's ORT scan found them in the tiny GPT (node names,
modules and savings written out here: pure data, no ORT session) with a real torch scan of it."""

from __future__ import annotations

import json
import shlex
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from support.cli import assert_one_line_error, memopt

from memopt.backends.ort.config import ConfigEntry, OptimizationType, PlanKey
from memopt.backends.ort.scan.patterns import Occurrence, Pattern
from memopt.backends.ort.torch_counterparts import CounterpartKind, Fidelity, counterpart, entry_op
from memopt.backends.torch.gradients import gradient_differences
from memopt.backends.torch.scan import TorchScan, scan_recipe
from memopt.graph.polynomial import Polynomial
from memopt.pipeline.torch_export import TorchExport, export_config
from memopt.recipes import Recipe, load_hf_recipe, load_recipe
from memopt.recompute import RecomputePlan, RecomputePolicy

GPT_OPTIONS = {"size": "tiny", "seq_len": 16}
BATCH, SEQ = 2, 16
ORT_DIMS = {"input_ids_dim0": BATCH, "input_ids_dim1": SEQ}
_TOKENS = (("input_ids_dim0", 1), ("input_ids_dim1", 1))
_SCOPE = "/_original_module/"


def _pattern(cell: str, per_token_bytes: int, occurrences: list[tuple[str, str]]) -> Pattern:
    """An ORT plan as memopt's ORT scan reports it: (entry node, module) per occurrence, bytes per token each."""
    subgraph, kind = cell.rsplit(":", 1)
    each = Polynomial({_TOKENS: Fraction(per_token_bytes)})
    found = tuple(Occurrence(entry, module, (entry,), each, (each,), each) for entry, module in occurrences)
    total = sum((o.exact for o in found), Polynomial())
    return Pattern(PlanKey(f"{cell}:-1"), subgraph, OptimizationType(int(kind)), len(found), total, total, found)


def _layers(node: str, module: str) -> list[tuple[str, str]]:
    return [(f"{_SCOPE}{node.format(i)}", module.format(i)) for i in (1, 0)]


# The tiny GPT's ten plans under ORT 1.19.2 (memopt scan gpt --size tiny --details), bytes a token at seq 32.
GPT_PATTERNS = (
    _pattern("FusedMatMul+Add+:1", 1024, _layers("blocks.{}/mlp/fc/Add", "blocks.{}.mlp.fc")),
    _pattern("Gelu+:1", 1024, [("Gelu_token_0", "blocks.1.mlp.fc"), ("Gelu", "blocks.0.mlp.fc")]),
    _pattern(
        "FusedMatMul+Add+Split+Reshape+Transpose+:1",
        256,
        [
            (f"{_SCOPE}blocks.{i}/attn/Transpose{suffix}", f"blocks.{i}.attn")
            for i in (1, 0)
            for suffix in ("", "_1", "_2")
        ],
    ),
    _pattern(
        "LayerNormalization+:1",
        264,
        [(f"{_SCOPE}ln_f/LayerNormalization", "ln_f")]
        + [
            (f"{_SCOPE}blocks.{i}/{ln}/LayerNormalization", f"blocks.{i}.{ln}") for i in (1, 0) for ln in ("ln2", "ln1")
        ],
    ),
    _pattern("Add+:1", 256, [(f"{_SCOPE}blocks.{i}/Add{s}", f"blocks.{i}") for i in (1, 0) for s in ("_1", "")]),
    _pattern("Dropout+:1", 320, _layers("blocks.{}/attn/attn_drop/Dropout", "blocks.{}.attn.attn_drop")),
    _pattern("FusedMatMul+Where+Softmax+:1", 512, _layers("blocks.{}/attn/Softmax", "blocks.{}.attn")),
    _pattern("MatMul+Transpose+Reshape+:1", 256, _layers("blocks.{}/attn/Reshape_3", "blocks.{}.attn")),
    _pattern(
        "FusedMatMul+Add+Dropout+:1",
        64,
        _layers("blocks.{}/mlp/drop/Dropout", "blocks.{}.mlp.drop")
        + _layers("blocks.{}/attn/resid_drop/Dropout", "blocks.{}.attn.resid_drop"),
    ),
    _pattern("Range+:1", 0, [(f"{_SCOPE}Range", "")]),
)


ORT_STASHED = sum((pattern.exact for pattern in GPT_PATTERNS), Polynomial())


@pytest.fixture(scope="module")
def gpt() -> Recipe:
    return load_recipe("gpt", GPT_OPTIONS)


@pytest.fixture(scope="module")
def torch_scan(gpt: Recipe) -> TorchScan:
    return scan_recipe(gpt, BATCH)


def _entries(*cells: str) -> tuple[ConfigEntry, ...]:
    parsed = []
    for cell in cells:
        subgraph, kind, count = (cell if cell.count(":") == 2 else f"{cell}:1:-1").split(":")
        parsed.append(ConfigEntry(subgraph, OptimizationType(int(kind)), int(count)))
    return tuple(parsed)


def _export(torch_scan: TorchScan, *cells: str, patterns: tuple[Pattern, ...] = GPT_PATTERNS) -> TorchExport:
    return export_config(
        _entries(*cells), patterns, torch_scan, batch=BATCH, ort_dims=ORT_DIMS, ort_stashed=ORT_STASHED
    )


def _carried(exported: TorchExport) -> dict[str, list[str]]:
    return {plan.entry.subgraph: [str(row.plan) for row in plan.rows] for plan in exported.plans}


def test_each_plan_of_the_gpt_carries_over_to_the_ops_that_hold_its_tensor_or_says_why_not(
    torch_scan: TorchScan,
) -> None:
    every = [str(pattern.key) for pattern in GPT_PATTERNS]
    exported = _export(torch_scan, *every)
    assert len(exported.plans) == len(every)  # none dropped silently
    assert _carried(exported) == {
        "FusedMatMul+Add+": ["blocks.*.mlp.fc: addmm"],
        # ORT fused the GELU node and lost its scope; the op is in the sibling module mlp.act.
        "Gelu+": ["blocks.*.mlp.act: gelu"],
        "FusedMatMul+Add+Split+Reshape+Transpose+": [],
        "LayerNormalization+": [
            "blocks.*.ln1: native_layer_norm",
            "blocks.*.ln2: native_layer_norm",
            "ln_f: native_layer_norm",
        ],
        "Add+": [],
        "Dropout+": ["blocks.*.attn.attn_drop: *"],
        "FusedMatMul+Where+Softmax+": [],
        "MatMul+Transpose+Reshape+": [],
        "FusedMatMul+Add+Dropout+": ["blocks.*.attn.resid_drop: *", "blocks.*.mlp.drop: *"],
        "Range+": [],
    }
    fidelity = {plan.entry.subgraph: plan.fidelity for plan in exported.plans}
    assert fidelity["Gelu+"] is fidelity["FusedMatMul+Add+"] is Fidelity.EXACT
    assert fidelity["LayerNormalization+"] is fidelity["Dropout+"] is Fidelity.APPROXIMATE
    reasons = {plan.entry.subgraph: plan.reason for plan in exported.left_out}
    assert "views" in reasons["FusedMatMul+Add+Split+Reshape+Transpose+"]
    assert "views" in reasons["MatMul+Transpose+Reshape+"]
    assert "SDPA" in reasons["FusedMatMul+Where+Softmax+"]
    assert "no saved output of aten.add in blocks.*" in reasons["Add+"]
    assert "outside any submodule" in reasons["Range+"]
    assert RecomputePlan.parse("blocks.*.mlp.act: gelu") in exported.policy.plans
    assert len(exported.policy.plans) == 8


def test_savings_side_by_side_at_the_batch(torch_scan: TorchScan) -> None:
    """ORT's figure is memopt's ORT model at the graph's dims; the torch one the torch scan's at the same batch."""
    exported = _export(torch_scan, "Gelu+", "FusedMatMul+Add+")
    gelu_output = BATCH * SEQ * 256 * 4  # 4·d_model floats a token, in each of 2 blocks
    for plan in exported.plans:
        assert plan.ort_bytes == 2 * gelu_output
        assert plan.torch_bytes == 2 * gelu_output
    assert exported.ort_bytes == exported.torch_bytes == 4 * gelu_output
    assert exported.ort_kept_bytes == ORT_STASHED.evaluate(ORT_DIMS)
    assert exported.torch_kept_bytes == torch_scan.saved_bytes  # the scan's own batch


def test_a_torch_plan_two_ort_plans_carry_over_to_saves_once(torch_scan: TorchScan) -> None:
    same_module = _pattern(
        "BitmaskDropout+:1", 320, _layers("blocks.{}/attn/attn_drop/Dropout", "blocks.{}.attn.attn_drop")
    )
    exported = _export(torch_scan, "Dropout+", "BitmaskDropout+", patterns=(*GPT_PATTERNS, same_module))
    assert [str(p) for p in exported.policy.plans] == ["blocks.*.attn.attn_drop: *"]
    assert exported.torch_bytes == exported.plans[0].torch_bytes


def test_a_node_that_kept_its_scope_is_not_looked_for_in_sibling_modules(torch_scan: TorchScan) -> None:
    scoped = _pattern("Gelu+:1", 1024, _layers("blocks.{}/mlp/fc/Gelu", "blocks.{}.mlp.fc"))
    (plan,) = _export(torch_scan, "Gelu+", patterns=(scoped,)).plans
    assert not plan.carried
    assert "no saved output of aten.gelu in blocks.*.mlp.fc" in plan.reason


def test_the_op_before_a_trailing_reshape_is_looked_for_where_it_ran(torch_scan: TorchScan) -> None:
    """``FastGelu+Reshape+`` (Hugging Face GPT-2): ORT stashes the reshape, scoped to the next linear;
    PyTorch holds the GELU's output, which ran unscoped in a sibling module."""
    each = Polynomial({_TOKENS: Fraction(1024)})
    reshaped = tuple(
        Occurrence(
            f"{_SCOPE}blocks.{i}/mlp/proj/Reshape",
            f"blocks.{i}.mlp.proj",
            (f"Gelu_token_{i}", f"{_SCOPE}blocks.{i}/mlp/proj/Reshape"),
            each,
            (each,),
            each,
        )
        for i in (1, 0)
    )
    pattern = Pattern(
        PlanKey("Gelu+Reshape+:1:-1"), "Gelu+Reshape+", OptimizationType.RECOMPUTE, 2, each, each, reshaped
    )
    (plan,) = _export(torch_scan, "Gelu+Reshape+", patterns=(pattern,)).plans
    assert [str(row.plan) for row in plan.rows] == ["blocks.*.mlp.act: gelu"]


def test_a_fused_node_is_found_in_the_layer_that_runs_its_op() -> None:
    """The built-in BERT calls F.gelu in its layer's own forward: ORT's unscoped GELU, named after
    ``layers.N.fc``, is the layer's ``gelu``."""
    bert = load_recipe("bert", {"size": "tiny", "seq_len": SEQ})
    pattern = _pattern("Gelu+:1", 1024, [("Gelu_token_0", "layers.1.fc"), ("Gelu", "layers.0.fc")])
    (plan,) = _export(scan_recipe(bert, BATCH), "Gelu+", patterns=(pattern,)).plans
    assert [str(row.plan) for row in plan.rows] == ["layers.*: gelu"]


def _llama_layers(node: str, module: str) -> list[tuple[str, str]]:
    return [(f"{_SCOPE}model/{node.format(i)}", f"model.{module.format(i)}") for i in (1, 0)]


def test_a_llama_configs_gated_mlp_and_rms_norms_carry_over() -> None:
    """Hugging Face Llama's largest plans under ORT 1.19.2 (node names as memopt scan --details
    lists them): the bias-free linears, the fused SiLU, the gate product and the RMS norms, which
    PyTorch runs written out."""
    llama = load_hf_recipe("hf:llama", {"size": "tiny", "seq_len": SEQ})
    fused = "MatMul/MatmulTransposeFusion/"
    patterns = (
        _pattern(
            "FusedMatMul+:1",
            1408,
            _llama_layers("layers.{}/mlp/up_proj/" + fused, "layers.{}.mlp.up_proj")
            + _llama_layers("layers.{}/mlp/gate_proj/" + fused, "layers.{}.mlp.gate_proj"),
        ),
        _pattern("Mul+:1", 704, _llama_layers("layers.{}/mlp/Mul", "layers.{}.mlp")),
        _pattern(
            "QuickGelu+:1", 704, _llama_layers("layers.{}/mlp/act_fn/Mul/QuickGeluFusion/", "layers.{}.mlp.act_fn")
        ),
        _pattern(
            "SimplifiedLayerNormalization+:1",
            256,
            [(f"{_SCOPE}model/norm/Mul_1/SimplifiedLayerNormFusion/", "model.norm")]
            + _llama_layers("layers.{}/input_layernorm/Mul_1/SimplifiedLayerNormFusion/", "layers.{}.input_layernorm"),
        ),
    )
    exported = _export(
        scan_recipe(llama, BATCH),
        "FusedMatMul+",
        "Mul+",
        "QuickGelu+",
        "SimplifiedLayerNormalization+",
        patterns=patterns,
    )
    assert _carried(exported) == {
        "FusedMatMul+": [],
        "Mul+": ["model.layers.*.mlp: mul"],
        "QuickGelu+": ["model.layers.*.mlp.act_fn: silu"],
        "SimplifiedLayerNormalization+": ["model.layers.*.input_layernorm: mul", "model.norm: mul"],
    }
    assert all(plan.torch_bytes > 0 for plan in exported.plans if plan.carried)
    fidelity = {plan.entry.subgraph: plan.fidelity for plan in exported.plans}
    assert fidelity["SimplifiedLayerNormalization+"] is Fidelity.APPROXIMATE
    assert fidelity["QuickGelu+"] is fidelity["Mul+"] is Fidelity.EXACT
    # A bias-free linear on a 3-D input is mm then a reshape: the torch scan offers no mm plan to carry it to.
    (linear,) = exported.left_out
    assert "no saved output of aten.addmm or aten.mm in model.layers.*.mlp.up_proj" in linear.reason


def test_a_plan_tied_to_another_by_a_shared_buffer_keeps_its_own_row(torch_scan: TorchScan) -> None:
    (own,) = [pattern for pattern in GPT_PATTERNS if pattern.subgraph == "LayerNormalization+"]
    tied = _pattern("LayerNormalization+:1:-1,Reshape+:1", 264, [(f"{_SCOPE}ln_f/LayerNormalization", "ln_f")])
    (plan,) = _export(torch_scan, "LayerNormalization+", patterns=(own, tied)).plans
    assert len(plan.rows) == 3


def test_entries_the_model_lacks_compromise_and_disabled_ones(torch_scan: TorchScan) -> None:
    compromise = _pattern("Cast+:2", 128, _layers("blocks.{}/Cast", "blocks.{}"))
    exported = _export(
        torch_scan, "Cast+:2:-1", "Softmax+:1:-1", "Gelu+:1:-1", "Gelu+:0:-1", patterns=(*GPT_PATTERNS, compromise)
    )
    reasons = {plan.entry.subgraph: plan.reason for plan in exported.left_out}
    assert "compromise" in reasons["Cast+"]
    assert "ORT ignores it" in reasons["Softmax+"]  # no such plan in this model
    assert "Gelu+" not in _carried(exported)  # ORT keeps the last entry: Gelu+ is disabled
    assert exported.policy.plans == ()


def test_a_plan_limited_to_some_occurrences_says_the_torch_plan_covers_all(torch_scan: TorchScan) -> None:
    (plan,) = _export(torch_scan, "Gelu+:1:1").plans
    assert plan.carried and "ORT recomputes the first 1 of 2, the torch plan every one" in plan.reason


def test_the_table_knows_ort_1_19s_plan_names_and_falls_back_to_the_entry_op() -> None:
    assert entry_op("FusedMatMul+Add+Dropout+") == "Dropout" and entry_op("") == ""
    assert entry_op("FastGelu+Reshape+") == "FastGelu" and entry_op("Reshape+Transpose+") == "Transpose"
    assert counterpart("Gemm+Reshape+") == counterpart("FusedMatMul+Add+")
    assert counterpart("FusedMatMul+Add+").aten_ops == ("addmm", "mm")
    assert counterpart("Add+").aten_ops == counterpart("FusedMatMul+Add+Add+").aten_ops == ("add",)
    assert counterpart("Cast+Gelu+").aten_ops == ("gelu",)  # unknown name, known entry op
    assert counterpart("Unsqueeze+Cast+Sub+Mul+FusedMatMul+Add+Softmax+").kind is CounterpartKind.NONE
    unknown = counterpart("Tile+Expand+")
    assert unknown.kind is CounterpartKind.NONE and "Expand" in unknown.note


def test_the_exported_gpt_policy_keeps_gradients_bitwise(gpt: Recipe, torch_scan: TorchScan) -> None:
    exported = _export(torch_scan, *(str(pattern.key) for pattern in GPT_PATTERNS))
    assert gradient_differences(gpt, exported.policy, BATCH) == []


GPT_CLI = ("gpt", "--size", "tiny", "--seq", str(SEQ))
CONFIG = ["Gelu+:1:-1", "FusedMatMul+Add+:1:-1", "Dropout+:1:-1", "FusedMatMul+Where+Softmax+:1:-1"]


@pytest.mark.ort
@pytest.mark.long
def test_export_writes_a_verified_policy_and_ends_with_the_export_line(tmp_path: Path) -> None:
    config = tmp_path / "ort-config.json"
    config.write_text(json.dumps(CONFIG))
    out = tmp_path / "policy.json"
    runs = str(tmp_path / "runs")
    done = memopt(
        "export", "--torch", str(config), *GPT_CLI, "--batch", str(BATCH), "--out", str(out), "--runs-dir", runs
    )
    assert done.returncode == 0, done.stderr
    assert RecomputePolicy.read(out) == RecomputePolicy(
        tuple(
            RecomputePlan.parse(p)
            for p in ("blocks.*.mlp.act: gelu", "blocks.*.mlp.fc: addmm", "blocks.*.attn.attn_drop: *")
        )
    )
    assert (
        done.stdout.splitlines()[-1] == f"export MEMOPT_RECOMPUTE_POLICY={out.resolve()} MALLOC_MMAP_THRESHOLD_=131072"
    )
    assert "1 of 4 plans left out of the policy: FusedMatMul+Where+Softmax+" in done.stdout
    assert "gradients: equal to the unwrapped model's, bitwise" in done.stderr
    assert "against ORT's" in done.stderr and "within the limit" in done.stderr and "less 2%)" in done.stderr

    missed = memopt(
        "export", "--torch", ",".join(CONFIG), *GPT_CLI, "--batch", str(BATCH), "--budget", "1MiB", "--runs-dir", runs
    )
    assert missed.returncode == 3, missed.stderr
    assert "over the limit 1003.5 KiB (budget 1.0 MiB less 2%) by" in missed.stderr
    assert missed.stdout.splitlines()[-1] == (
        f"memopt tune --backend torch gpt --seq {SEQ} --size tiny --target-batch {BATCH} --budget 1MiB --no-tui"
    )


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (("Gelu+", "gpt", "--batch", "2"), "--torch"),
        (("--torch", "Gelu+:7:-1", "gpt", "--batch", "2"), "type 7"),
        (("--torch", "none", "gpt", "--batch", "2"), "enables no plan"),
        (("--torch", "Gelu+", "gpt", "--batch", "2", "--out", "{existing}"), "--force"),
        (("--torch", "Gelu+", "{no_recipe}", "--batch", "2"), "no build_model()"),
        # After the hf: model is built in this process (before any run), where a CUDA budget is checked.
        pytest.param(
            ("--torch", "Gemm+Reshape+", "hf:gpt2", "--size", "tiny", "--batch", "2", "--device", "cuda"),
            "no CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where torch sees no CUDA"),
        ),
    ],
)
def test_bad_input_is_one_error_line(tmp_path: Path, arguments: tuple[str, ...], fragment: str) -> None:
    existing = tmp_path / "kept.json"
    existing.write_text("mine\n")
    no_recipe = tmp_path / "not_a_recipe.py"
    no_recipe.write_text("WIDTH = 64\n")
    words = (a.format(existing=existing, no_recipe=no_recipe) for a in arguments)
    done = memopt("export", *words, "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(done, fragment)
    assert existing.read_text() == "mine\n"


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (("gpt", "--backend", "torch"), "(backend: torch (--backend)) already ends with the torch policy"),
        (("gpt", "--backend", "ort", "--json"), "drop --json"),
        (("--cmd", "python train.py --batch-size {batch}", "--backend", "ort"), "tune --export-torch verifies"),
        pytest.param(
            ("gpt", "--backend", "ort", "--device", "cuda"),
            "no CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where torch sees no CUDA"),
        ),
    ],
)
def test_tune_export_torch_refuses_what_it_cannot_carry_over_before_any_run(
    tmp_path: Path, arguments: tuple[str, ...], fragment: str
) -> None:
    runs = tmp_path / "runs"
    done = memopt(
        "tune",
        *arguments,
        "--target-batch",
        "2",
        "--budget",
        "1GiB",
        "--no-tui",
        "--export-torch",
        "--runs-dir",
        str(runs),
    )
    assert_one_line_error(done, fragment)
    assert not runs.exists()


@pytest.mark.ort
@pytest.mark.long
def test_tune_export_torch_carries_the_verified_config_over(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    cli = ("gpt", "--size", "tiny", "-o", "n_layer=8", "--seq", "64")
    no_config = memopt("trial", *cli, "--batch", "128", "--config", "none", "--json", "--runs-dir", runs)
    assert no_config.returncode == 0, no_config.stderr
    budget = f"{int(json.loads(no_config.stdout)['peak_bytes'] * 0.9) // 2**20}MiB"
    tune = ("tune", *cli, "--target-batch", "128", "--budget", budget, "--no-tui", "--export-torch")
    done = memopt(*tune, "--runs-dir", runs, timeout=2400)  # a tune, then an export: minutes each
    lines = done.stdout.splitlines()
    ort_export = next(i for i, line in enumerate(lines) if line.startswith("export ORTMODULE_MEMORY_OPT_CONFIG="))
    assert "--export-torch: carrying the verified config over to plain PyTorch at batch 128" in done.stderr
    assert "ORT 1.19.2's plans carried over to plain PyTorch" in "\n".join(lines[ort_export:])
    assert "gradients: equal to the unwrapped model's, bitwise" in done.stderr
    # Eager PyTorch keeps more than ORTModule: the policy fits the ORT budget, or the torch tune is offered.
    if done.returncode == 0:
        assert lines[-1].startswith("export MEMOPT_RECOMPUTE_POLICY=")
        assert "within the limit" in done.stderr
    else:
        assert done.returncode == 3, done.stderr
        assert lines[-1] == shlex.join(
            [
                "memopt",
                "tune",
                "--backend",
                "torch",
                "gpt",
                "-o",
                "n_layer=8",
                "--seq",
                "64",
                "--size",
                "tiny",
                "--target-batch",
                "128",
                "--budget",
                budget,
                "--no-tui",
            ]
        )
