"""The torch back end's command line says what went wrong in one line that speaks of plain
PyTorch, names the file at fault, and keeps its tables copyable. Real ``memopt`` processes,
real recipes, real files."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pytest
from support import RECIPES
from support.cli import CliRun, memopt
from support.mounts import tmpfs


def assert_error_line(run: CliRun, *fragments: str) -> str:
    """Exit 2, no traceback, and one ``error:`` line, the last on stderr, holding every fragment.
    (Lines before it are notices: the ``backend:`` line, torch's own start-up notices.)"""
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and run.stderr.strip().splitlines()[-1] == errors[0], run.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def torch_command(*args: str, tmp_path: Path) -> CliRun:
    return memopt(*args, "--backend", "torch", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        ("scan", "gpt", "--size", "tiny", "--seq", "65"),
        ("plan", "gpt", "--size", "tiny", "--seq", "65", "--target-batch", "2", "--budget", "1GiB"),
        ("tune", "gpt", "--size", "tiny", "--seq", "65", "--target-batch", "2", "--budget", "1GiB", "--no-tui"),
    ],
)
@pytest.mark.subprocess
def test_a_recipe_that_raises_in_this_process_is_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    """scan, plan and tune capture a recipe's step in memopt's own process: what the recipe
    raises there is said as a trial says it, not as a traceback."""
    run = torch_command(*args, tmp_path=tmp_path)
    assert_error_line(run, "make_batch() failed: ValueError: seq_len 65 exceeds the model's 64 positions")


@pytest.mark.subprocess
def test_scan_refuses_a_loss_that_is_not_a_scalar_as_trial_does(tmp_path: Path) -> None:
    run = torch_command("scan", str(RECIPES / "vector_loss.py"), tmp_path=tmp_path)
    assert_error_line(run, "loss() returned [2]; expected a scalar tensor")


@pytest.mark.subprocess
def test_the_scan_table_keeps_plans_whole_when_piped_narrow(tmp_path: Path) -> None:
    """A plan is what the user copies into --config: each stays on one line at any width."""
    run = memopt("scan", "gpt", "--size", "tiny", "--fake", "--backend", "torch", cwd=tmp_path, env={"COLUMNS": "40"})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for plan in ("blocks.*.attn.resid_drop: *", "blocks.*.ln1: native_layer_norm", "blocks.*.mlp.act: gelu"):
        assert any(line.split()[: len(plan.split())] == plan.split() for line in lines), run.stdout


@pytest.mark.parametrize(
    ("recipe", "extra", "said"),
    [
        ("vector_loss.py", (), "the recipe is broken: loss() returned [2]; expected a scalar tensor"),
        ("crashes_in_step.py", (), "the training step failed: ValueError: labels are missing"),
        ("vector_loss.py", ("--timeout", "1"), "the run timed out: killed after 1 s"),
    ],
)
@pytest.mark.torch
def test_a_failed_trial_says_what_failed_in_words(
    tmp_path: Path, recipe: str, extra: tuple[str, ...], said: str
) -> None:
    """Not the status's code word (recipe_error, step_error, timed_out)."""
    run = torch_command("trial", str(RECIPES / recipe), "-b", "2", *extra, tmp_path=tmp_path)
    line = assert_error_line(run, said)
    assert not any(word in line for word in ("recipe_error", "step_error", "timed_out"))


NEVER_APPLIES = """\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters())
for _ in range(5):
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
print("trained without memopt")
"""


@pytest.mark.torch
def test_a_command_that_never_calls_apply_is_told_so(tmp_path: Path) -> None:
    """The torch back end counts steps from a model passed to memopt.recompute.apply: a job that
    trains without one is told that, not about ORTModule."""
    (tmp_path / "train.py").write_text(NEVER_APPLIES)
    run = torch_command("trial", "--cmd", f"{sys.executable} train.py", "-b", "2", tmp_path=tmp_path)
    line = assert_error_line(
        run,
        "no training step of a model passed to memopt.recompute.apply seen",
        "the script must pass the model it trains to memopt.recompute.apply",
        "its last output: ",
        "trained without memopt",
    )
    assert "ORTModule" not in line


APPLIES = NEVER_APPLIES.replace("import torch\n", "import torch\nimport memopt.recompute\n").replace(
    "model = torch.nn.Linear(4, 2)", "model = memopt.recompute.apply(torch.nn.Linear(4, 2))"
)


@pytest.mark.torch
def test_a_torch_job_s_first_training_forward_and_log_are_named_for_its_back_end(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(APPLIES)
    run = torch_command("trial", "--cmd", f"{sys.executable} train.py", "-b", "2", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    policy = Path(run.stdout.split("MEMOPT_RECOMPUTE_POLICY=")[1].split()[0])
    events = [json.loads(line)["event"] for line in (policy.parent / "steps.jsonl").read_text().splitlines()]
    assert events[0] == "recompute.apply" and "ortmodule" not in events, events
    # What the job printed is kept in a log named for the back end too.
    assert "[memopt] $ " in (policy.parent / "torch.log").read_text()
    assert not (policy.parent / "ort.log").exists()


@pytest.mark.torch
def test_a_recipe_s_torch_run_keeps_a_torch_log(tmp_path: Path) -> None:
    run = torch_command("trial", str(RECIPES / "vector_loss.py"), "-b", "2", tmp_path=tmp_path)
    line = assert_error_line(run, "/torch.log)")
    assert "Traceback" in Path(line.rsplit("(log: ", 1)[1].rstrip(")")).read_text()  # the detail is kept there


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
@pytest.mark.subprocess
def test_a_config_naming_no_policy_file_names_the_file(tmp_path: Path, kind: str) -> None:
    """Not ``plan '…' is not 'MODULE: OP'``: the file the user meant, and what is wrong with it."""
    config = tmp_path / "policy.json"
    if kind == "folder":
        config.mkdir()
    elif kind == "fifo":
        os.mkfifo(config)
    run = torch_command("trial", "gpt", "--size", "tiny", "-b", "2", "--config", str(config), tmp_path=tmp_path)
    said = {"missing": "does not exist", "folder": "is a folder", "fifo": "is a FIFO (named pipe)"}[kind]
    line = assert_error_line(run, f"the config file {config} {said}" if kind == "missing" else f"{config} {said}")
    assert "MODULE: OP" not in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("backend", ["torch", "ort"])
@pytest.mark.subprocess
def test_an_empty_config_is_refused_not_run_without_recompute(tmp_path: Path, backend: str) -> None:
    run = memopt("trial", "gpt", "-b", "2", "--config", "", "--backend", backend, "--runs-dir", str(tmp_path / "runs"))
    assert_error_line(run, "--config is empty", "--config none for no recompute")
    assert not (tmp_path / "runs").exists()


@pytest.mark.subprocess
def test_manual_without_the_tui_is_refused(tmp_path: Path) -> None:
    args = ("tune", "gpt", "--target-batch", "2", "--budget", "1GiB", "--no-tui", "--manual")
    assert_error_line(torch_command(*args, tmp_path=tmp_path), "--manual", "--no-tui")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("trial", "gpt", "-b", "2", "--budget", "80", "--backend", "torch"),
        ("plan", "gpt", "--target-batch", "2", "--budget", "80", "--backend", "torch"),
        ("tune", "gpt", "--target-batch", "2", "--budget", "80", "--no-tui", "--backend", "ort"),
    ],
)
@pytest.mark.subprocess
def test_a_budget_without_a_unit_asks_for_one(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``--budget 80`` was 80 bytes, planned against "the limit 78 B"."""
    run = memopt(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_error_line(run, "--budget 80 has no unit: write it as 80GiB, 80MiB or 80%", "or 80B for bytes")
    assert not (tmp_path / "runs").exists()


@pytest.mark.torch
def test_an_over_budget_verdict_shows_the_figures_apart(tmp_path: Path) -> None:
    """A peak a few KiB over its budget: both figures at one decimal read alike and hide the verdict."""
    first = torch_command("trial", "mlp", "--size", "tiny", "-b", "2", "--json", tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    peak = json.loads(first.stdout)["peak_bytes"]
    budget = peak - 20 * 1024
    again = ("trial", "mlp", "--size", "tiny", "-b", "2", "--resume", "--budget", f"{budget}B")
    run = torch_command(*again, tmp_path=tmp_path)
    assert run.returncode == 3, run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("over budget: "), run.stderr
    shown_peak, shown_budget = line.removeprefix("over budget: ").split(" > ")
    assert shown_peak != shown_budget, line


@pytest.mark.subprocess
def test_a_full_disk_names_the_file_it_could_not_write(tmp_path: Path) -> None:
    """A real tmpfs filled to its last byte: the trial's first file in its run folder is named."""
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        with contextlib.suppress(OSError), (disk / "filler").open("wb", buffering=0) as filler:
            while True:
                filler.write(b"\0" * 4096)
        runs = disk / "runs"
        run = memopt("trial", "mlp", "--size", "tiny", "-b", "2", "--backend", "torch", "--runs-dir", str(runs))
        line = assert_error_line(run, "the disk is full: cannot write ", str(runs))
        assert line.endswith("recompute-policy.json"), line


@pytest.mark.subprocess
def test_a_library_s_warning_is_said_once_as_the_library_s(tmp_path: Path) -> None:
    """torch's checkpoint warns of its own deprecated autocast call each time Python's warning
    filters change between two recomputes: one line, named as torch's, not several of memopt's."""
    run = memopt("scan", str(RECIPES / "torch_warns_twice.py"), "--fake", "--backend", "torch", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    warned = [line for line in run.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [f"warning: torch says: {warned[0].split('torch says: ', 1)[-1]}"], run.stderr
    assert "is deprecated" in warned[0]
