"""The stacks users train with, tuned as they run them: optimum's ORTTrainer
(examples/train_ortrainer.py, a tiny GPT-2 built offline) and an accelerate-launched loop
(examples/train_accelerate.py), each single-process and with two processes (gloo on CPU),
through ``memopt tune --cmd --no-tui`` to a verified config.

`make` installs both (the ``optimum`` extra, and torch-ort without its dependencies), so the
single-process tunes run in `make test` and CI and the two-process ones in `make test-all`
(marker long); elsewhere these tests skip where they are not installed (docs/ort.md,
"optimum's ORTTrainer and accelerate", says how).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import headless_tune, memopt

pytestmark = pytest.mark.ort  # real ORTModule training jobs

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2"
ACCELERATE = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"


def _needs(install: str, *modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: {install}")


OPTIMUM = _needs("pip install 'memopt[optimum]' && pip install --no-deps torch-ort==1.19.2", "optimum", "torch_ort")
ACCELERATE_INSTALLED = _needs("pip install 'memopt[accelerate]'", "accelerate")
ORTTRAINER = "examples/train_ortrainer.py --seq 512 --batch-size {batch}"
# examples/train_ddp.py's model at its own defaults, as test_command.py tunes it under torchrun.
ACCELERATED = "examples/train_accelerate.py --batch-size {batch}"
COMMANDS = [
    pytest.param(f"{sys.executable} {ORTTRAINER}", 1, id="ortrainer-single", marks=OPTIMUM),
    pytest.param(f"{TORCHRUN} {ORTTRAINER}", 2, id="ortrainer-torchrun-2", marks=[OPTIMUM, pytest.mark.long]),
    pytest.param(
        f"{ACCELERATE} launch --cpu --num_processes 1 {ACCELERATED}",
        1,
        id="accelerate-single",
        marks=ACCELERATE_INSTALLED,
    ),
    pytest.param(
        f"{ACCELERATE} launch --multi_gpu --num_processes 2 {ACCELERATED}",
        2,
        id="accelerate-2",
        marks=[ACCELERATE_INSTALLED, pytest.mark.long],
    ),
]


@pytest.mark.parametrize(("command", "ranks"), COMMANDS)
def test_headless_tune_of_the_stack_ends_verified(command: str, ranks: int, tmp_path: Path) -> None:
    baseline = memopt("trial", "--cmd", command, "--batch", "8", "--json", "--runs-dir", str(tmp_path), cwd=ROOT)
    assert baseline.returncode == 0, baseline.stderr
    measured = json.loads(baseline.stdout)
    assert len(measured["ranks"]) == ranks and measured["plans_seen"]
    # Recompute saves a few percent of these small jobs' peak: most of it is Python, torch and ORT.
    budget = int(measured["whole_run_peak_bytes"] * 0.97)
    run = headless_tune(command, 8, budget, tmp_path, "--margin", "0", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["status"] == "verified", summary["message"]
    best = summary["best"]
    assert best["plans_on"] and best["whole_run_peak_bytes"] <= budget
    verified = next(trial for trial in summary["trials"] if trial["number"] == best["trial"])
    assert len(verified["ranks"]) == ranks
    assert any(line.startswith("export ORTMODULE_MEMORY_OPT_CONFIG=") for line in summary["export"])


@pytest.mark.subprocess
@pytest.mark.parametrize("extra", ["cpu", "gpu"])
def test_make_installs_the_stacks_these_tests_run(extra: str, tmp_path: Path) -> None:
    """`make test` and CI install optimum, accelerate and torch-ort (without its dependencies,
    which would replace the ORT build), so the tests above run there instead of skipping."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # the venv exists: only the install step is planned
    dry = subprocess.run(
        ["make", "-n", f"VENV={venv}", f"EXTRA={extra}", f"{venv}/.memopt-installed-{extra}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"-e '.[{extra},hf,test,optimum]'" in dry, dry
    assert "--no-deps torch-ort==1.19.2" in dry, dry
    assert "torch-ort==1.19.2" in (ROOT / "constraints.txt").read_text().splitlines()
