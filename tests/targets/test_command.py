"""The user's own training command (examples/train_ddp.py), run as is: torchrun with two gloo
ranks on CPU and the single-process form, trial, scan and a headless tune."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.cli import headless_tune, memopt
from support.processes import assert_gone

pytestmark = pytest.mark.ort  # real ORTModule training jobs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/train_ddp.py --batch-size {batch}"
TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 {EXAMPLE}"
SINGLE = f"{sys.executable} {EXAMPLE}"


@pytest.fixture(scope="module")
def command_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("command-runs")


@pytest.fixture(scope="module")
def plan_table(command_runs: Path) -> list[dict]:
    """The plans of the job's own graph (a probe of the single-process form)."""
    run = memopt("scan", "--cmd", SINGLE, "--json", "--runs-dir", str(command_runs), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["plans"]


@pytest.mark.long
def test_scan_of_a_command_lists_the_jobs_plans(plan_table: list[dict]) -> None:
    keys = {plan["config"] for plan in plan_table}
    assert "FusedMatMul+Add+:1:-1" in keys and "Gelu+:1:-1" in keys


@pytest.mark.long
def test_torchrun_trial_measures_every_rank_and_leaves_nothing_running(command_runs: Path, tmp_path: Path) -> None:
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps(["FusedMatMul+Add+:1:-1"]))
    run = memopt(
        "trial",
        "--cmd",
        TORCHRUN,
        "--batch",
        "4",
        "--config",
        str(config),
        "--json",
        "--runs-dir",
        str(command_runs),
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["outcome"] == "ok" and record["peak_bytes"] > 0
    assert [rank["rank"] for rank in record["ranks"]] == [0, 1]
    assert all(rank["peak_bytes"] > 0 for rank in record["ranks"])
    assert record["peak_bytes"] == max(rank["peak_bytes"] for rank in record["ranks"])
    assert record["plans_seen"] and "FusedMatMul+Add+:1:-1" in record["plans_on"]
    assert record["recomputed_nodes"] and record["recomputed_nodes"] > 0
    for rank in record["ranks"]:
        assert_gone(rank["pid"])
    log = (Path(record["run_dir"]) / "ort.log").read_text()
    assert "--batch-size 4" in log


@pytest.mark.long
def test_single_process_trial_replaces_an_inherited_config(command_runs: Path) -> None:
    run = memopt(
        "trial",
        "--batch",
        "2",
        "--json",
        "--runs-dir",
        str(command_runs),
        "--",
        sys.executable,
        "examples/train_ddp.py",
        "--batch-size",
        "2",
        cwd=ROOT,
        env={"ORTMODULE_MEMORY_OPT_LEVEL": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert "ORTMODULE_MEMORY_OPT_LEVEL=1 from your environment is not used" in run.stderr
    record = json.loads(run.stdout)
    assert record["outcome"] == "ok" and len(record["ranks"]) == 1
    assert record["plans_on"] == [] and record["recomputed_nodes"] == 0


# Under torchrun in `make test`; the single process is `long`: test_stacks.py's single-process
# tunes of ORTTrainer and accelerate jobs already run a command in `make test`.
@pytest.mark.parametrize(
    "command", [TORCHRUN, pytest.param(SINGLE, marks=pytest.mark.long)], ids=["torchrun", "single"]
)
def test_headless_tune_of_a_command_ends_verified(command: str, tmp_path: Path) -> None:
    baseline = memopt("trial", "--cmd", command, "--batch", "8", "--json", "--runs-dir", str(tmp_path), cwd=ROOT)
    assert baseline.returncode == 0, baseline.stderr
    budget = int(json.loads(baseline.stdout)["peak_bytes"] * 0.9)
    run = headless_tune(command, 8, budget, tmp_path, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["status"] == "verified", summary
    assert any(line.startswith("export ORTMODULE_MEMORY_OPT_CONFIG=") for line in summary["export"])
    # memopt adds no profiled steps to a user's job: its costs come from the graph's work.
    assert "recompute costs: the graph's FLOPs and bytes" in run.stderr


# What ORT's logger prints as the session is built, with every plan ON: a job that prints it
# itself has not changed the config its session runs.
FAKE_PLAN_TABLE = """\
2026-11-27 19:44:27,511 orttraining [WARNING] -
***** ONNX Runtime Training (ORTModule) is accelerating your model *****

ORTModule is enabled with following features ON/OFF for [training] mode:

Memory Optimizer     :  ON   :  User config: ORTMODULE_MEMORY_OPT_CONFIG=fake.json, probe level: 0, layer boundary op: none
                                Configs                 Freq  Max Saving(Bytes)  Saving Symbolic(Bytes)
 - Plan 1            :  ON   :  Gelu+:1:-1              2     131,072            2048.0*x_dim0
 - Plan 2            :  ON   :  FusedMatMul+Add+:1:-1   2     131,072            2048.0*x_dim0

Versions: ONNX Runtime - 1.19.2, ONNX - 1.23.2
"""

# A small ORTModule job that prints the table above before it trains, after its first step, or both.
PRINTS_A_PLAN_TABLE = """\
import sys
import torch
from onnxruntime.training.ortmodule import ORTModule

fake = open(sys.argv[2]).read()
if "before" in sys.argv[3]:
    print(fake, flush=True)
model = ORTModule(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(int(sys.argv[1]), 16)
for step in range(10):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 0 and "after" in sys.argv[3]:
        print(fake, flush=True)
"""


@pytest.mark.parametrize("when", ["before", "after", "before+after"])
def test_a_plan_table_the_job_prints_itself_is_not_orts(tmp_path: Path, when: str) -> None:
    """ORT prints its Plan table as it builds the session, in the warm-up step; a table the job
    prints before training or after that step is the job's text: the trial reports ORT's own."""
    (tmp_path / "fake_table.txt").write_text(FAKE_PLAN_TABLE)
    (tmp_path / "job.py").write_text(PRINTS_A_PLAN_TABLE)
    command = f"{sys.executable} {tmp_path / 'job.py'} {{batch}} {tmp_path / 'fake_table.txt'} {when}"
    run = memopt("trial", "--cmd", command, "--batch", "2", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["plans_on"] == [] and record["recomputed_nodes"] == 0, record
    log = Path(record["run_dir"], "ort.log").read_text()
    assert log.count("Memory Optimizer     :  ON") == when.count("+") + 1  # the fake is in the log, once or twice
    assert log.count("Memory Optimizer     :  OFF") == 1  # ORT's own
