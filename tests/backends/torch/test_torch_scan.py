"""The torch back end's scan: saved activations by op and module, exact byte formulas, and plans
that apply. In this process with plain PyTorch; the command line in a process with ORT blocked."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from support.cli import memopt
from support.torch_steps import assert_bitwise_equal, without_onnxruntime

from memopt.backends.torch.scan import BATCH, SEQ, TorchScan, capture_recipe, plans_of, scan_recipe, scan_sizes
from memopt.child.memory import proc_status_bytes, reset_rss_peak
from memopt.graph.polynomial import Polynomial
from memopt.recipes import Recipe, load_recipe
from memopt.recompute.policy import RecomputePolicy


def test_gpt_plans_and_their_exact_bytes() -> None:
    """gelu's output is 4·d_model floats a token per block: 2 blocks x 256 x 4 bytes = 2048·batch·seq."""
    scanned = scan_recipe(load_recipe("gpt", {"size": "tiny", "seq_len": 32}), 4)
    rows = {str(row.plan): row for row in scanned.rows}
    gelu = rows["blocks.*.mlp.act: gelu"]
    assert gelu.saving == Polynomial({((BATCH, 1), (SEQ, 1)): Fraction(2048)})
    assert (gelu.tensors, gelu.modules, gelu.saving_bytes) == (2, 2, 2048 * 4 * 32)
    # Whole blocks: every activation inside, the attention's seq² terms included.
    assert rows["blocks.*: *"].saving is not None and ((BATCH, 1), (SEQ, 2)) in rows["blocks.*: *"].saving.terms
    # Dropout's noise is written in place (bernoulli_): no op plan names it, a region over the dropout does.
    assert not any("bernoulli" in plan or "div_" in plan for plan in rows)
    assert "blocks.*.attn.attn_drop: *" in rows


def _scan_with_real_tensors(recipe: Recipe, batch: int) -> TorchScan:
    """The scan with every size captured in real tensors: the reference the fake-tensor bytes must equal."""
    points, check = scan_sizes(recipe, batch)
    captures = {point: capture_recipe(recipe, *point) for point in [*points, check]}
    paths = [path for path, _ in recipe.model().named_modules() if path]
    return plans_of(captures, points, check, paths, batch_norm=())  # neither recipe holds batch norm


@pytest.mark.parametrize(("spec", "options"), [("gpt", {"size": "tiny", "seq_len": 32}), ("bert", {"size": "tiny"})])
def test_the_scan_counts_with_fake_tensors_the_bytes_of_real_ones(spec: str, options: dict[str, object]) -> None:
    """The scan's bytes come from fake tensors (no memory, no arithmetic): the same plans, counts
    and byte polynomials as steps captured in real tensors at the same sizes."""
    recipe = load_recipe(spec, options)
    real, scanned = _scan_with_real_tensors(recipe, 2), scan_recipe(recipe, 2)
    assert (scanned.saved_bytes, scanned.saved) == (real.saved_bytes, real.saved)
    assert [(str(r.plan), r.tensors, r.modules, r.saving_bytes, r.saving) for r in scanned.rows] == [
        (str(r.plan), r.tensors, r.modules, r.saving_bytes, r.saving) for r in real.rows
    ]
    assert all(row.recompute_seconds > 0 for row in scanned.rows)  # from the one real step


def test_the_scan_runs_one_small_real_step_not_the_activations_it_counts() -> None:
    """At batch 128 the step keeps over 256 MiB for backward; the scan counts them with fake tensors
    and runs one real step at batch 1 for its times, so this process's peak rises by a fraction of that."""
    recipe = load_recipe("gpt", {"size": "tiny", "seq_len": 64, "n_layer": 8})
    reset_rss_peak()
    start = proc_status_bytes("VmHWM")
    assert start - proc_status_bytes("VmRSS") < 2**24  # the peak restarted here
    scanned = scan_recipe(recipe, 128)
    rise = proc_status_bytes("VmHWM") - start
    assert scanned.saved_bytes > 256 * 2**20
    assert rise < scanned.saved_bytes / 4, (rise, scanned.saved_bytes)


@pytest.mark.slow
def test_a_model_larger_than_the_machine_scans_with_fake_tensors() -> None:
    """GPT-2 XL at batch 64 x 1024 tokens keeps terabytes for backward: scanned without any of it."""
    scanned = scan_recipe(load_recipe("gpt", {"size": "xl", "seq_len": 1024}), 64, timed=False)
    assert scanned.saved_bytes > 2**40
    rows = {str(row.plan): row for row in scanned.rows}
    # 48 blocks' GELU outputs: 4 x 1600 floats a token each.
    assert rows["blocks.*.mlp.act: gelu"].saving_bytes == 48 * 64 * 1024 * 4 * 1600 * 4


def test_a_forward_that_reads_its_values_scans_with_real_tensors() -> None:
    """A branch on a tensor's value cannot run on fake tensors: the scan captures it real."""
    recipe = load_recipe(str(Path(__file__).resolve().parents[2] / "recipes" / "branches_on_values.py"), {})
    scanned = scan_recipe(recipe, 4)
    rows = {str(row.plan): row for row in scanned.rows}
    # fc1's output, 32 floats a sample, which GELU keeps for its backward.
    assert rows["fc1: addmm"].saving_bytes == 4 * 32 * 4
    assert all(row.recompute_seconds > 0 for row in scanned.rows)


def test_cnn_gets_no_region_over_batch_norm() -> None:
    scanned = scan_recipe(load_recipe("cnn", {"size": "tiny"}), 2)
    assert all(not row.plan.whole_module for row in scanned.rows)
    assert {str(row.plan) for row in scanned.rows} >= {"*: convolution", "*: max_pool2d_with_indices"}


@pytest.mark.parametrize("spec", ["gpt", "bert", "mlp", "cnn"])
def test_every_op_plan_the_scan_finds_keeps_gradients_bitwise(spec: str) -> None:
    recipe = load_recipe(spec, {"size": "tiny"})
    plans = tuple(row.plan for row in scan_recipe(recipe, 2).rows if not row.plan.whole_module)
    assert plans
    assert_bitwise_equal(recipe, RecomputePolicy(plans))


@pytest.mark.subprocess
def test_scan_backend_torch_runs_without_onnxruntime(tmp_path: Path) -> None:
    """In a process where onnxruntime cannot be imported, ``--backend torch`` scans, and without
    ``--backend`` the first line says torch was chosen because ORTModule cannot run."""
    done = memopt("scan", "gpt", "--size", "tiny", "--batch", "2", "--seq", "16", env=without_onnxruntime(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0].startswith(
        "backend: torch (ORTModule cannot run here: onnxruntime-training is not installed"
    )
    assert "blocks.*.mlp.act: gelu" in done.stdout and "2048*batch*seq" in done.stdout.replace(".0*", "*")


@pytest.mark.subprocess
def test_the_commands_load_torch_only_where_the_torch_back_end_runs() -> None:
    """An ORT trial's or tune's own process shares its job's memory cgroup: it must not carry
    torch (about 600 MiB of RSS) for a back end it does not use."""
    imports = "import sys, memopt.cli.export, memopt.cli.scan, memopt.cli.trial, memopt.cli.tune; print(sorted({'torch', 'onnxruntime'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", imports], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "modules",
    [
        "memopt.backends.torch.tune, memopt.backends.torch.simulate, memopt.backends.torch.trial",
        "memopt.backends.torch.session, memopt.tui.app",  # the torch tuning session and the TUI over it
    ],
    ids=["back-end", "session-and-tui"],
)
def test_the_torch_back_end_loads_nothing_of_orts_path(modules: str) -> None:
    """What the import contract checks module by module, held for the whole process the torch back
    end runs in (package ``__init__``s included): its scan, peak model, trials, tuning session and
    the TUI over it load none of ORT's releases, analysis, logs, training graph, memory model,
    trials, search or tuner, nor onnx."""
    ort_path = (
        "memopt.backends.ort",
        "memopt.backends.ort.scan",
        "memopt.backends.ort.logparse",
        "memopt.backends.ort.graph.training_graph",
        "memopt.backends.ort.graph.gradient",
        "memopt.backends.ort.predict.memory_model",
        "memopt.backends.ort.predict.planner",
        "memopt.backends.ort.trials",
        "memopt.backends.ort.target",
        "memopt.pipeline",
        "memopt.backends.ort.tune.tuner",
        "memopt.backends.ort.tune.policy",
        "memopt.backends.ort.tune.export",
        "memopt.child.steps",
        "onnx",
        "onnxruntime",
    )
    imports = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.startswith({ort_path!r})))"
    loaded = subprocess.run([sys.executable, "-c", imports], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


@pytest.mark.torch
@pytest.mark.long
def test_a_command_scans_to_the_plans_of_its_recipe(tmp_path: Path) -> None:
    """``examples/train_plain_torch.py`` run as the user runs it (``--cmd``), its model captured
    inside the job, gives the plans and per-plan byte formulas its in-process recipe scan gives."""
    from memopt.backends.torch.command_scan import scan_command
    from memopt.core import command_target
    from memopt.run.settings import RunSettings

    example = Path(__file__).resolve().parents[3] / "examples" / "train_plain_torch.py"
    job = command_target(f"{sys.executable} {example} --batch-size {{batch}}")
    settings = RunSettings(target=job, runs_dir=tmp_path / "runs")
    from_job = scan_command(settings, 2)
    from_recipe = scan_recipe(load_recipe(str(example)), 2)
    assert [(str(r.plan), r.saving, r.tensors, r.modules) for r in from_job.rows] == [
        (str(r.plan), r.saving, r.tensors, r.modules) for r in from_recipe.rows
    ]
    # The job's loss is computed outside the model: what it keeps is captured in the recipe's scan only.
    assert 0 < from_recipe.saved_bytes - from_job.saved_bytes < from_recipe.saved_bytes // 10
