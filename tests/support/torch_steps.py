"""Seeded plain-PyTorch training steps, with and without a recompute policy (the torch back end's tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memopt.backends.torch.gradients import gradient_differences
from memopt.recipes import Recipe
from memopt.recompute import RecomputePlan, RecomputePolicy
from memopt.run.budget import CPU_ALLOCATOR_ENV


def policy(*plans: str) -> RecomputePolicy:
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in plans))


def assert_bitwise_equal(recipe: Recipe, plans: RecomputePolicy) -> None:
    differ = gradient_differences(recipe, plans, 3)
    assert not differ, f"{plans}: {differ}"


def without_onnxruntime(folder: Path) -> dict[str, str]:
    """Environment variables under which a Python process finds no onnxruntime (a ``sitecustomize``
    in ``folder`` answers every import of it as a missing module), as in a venv without the ORT extra."""
    (folder / "sitecustomize.py").write_text(
        "import importlib.machinery, sys\n"
        "class _Absent:\n"
        "    def create_module(self, spec):\n"
        "        return None\n"
        "    def exec_module(self, module):\n"
        "        raise ModuleNotFoundError(f'No module named {module.__name__!r}', name=module.__name__)\n"
        "class _NoOrt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'onnxruntime':\n"
        "            return importlib.machinery.ModuleSpec(name, _Absent())\n"
        "sys.meta_path.insert(0, _NoOrt())\n"
    )
    return {"PYTHONPATH": str(folder)}


def bytes_measured_in_a_child(script: str, *args: str) -> float:
    """What ``script`` prints as JSON, run by Python in a fresh process under the CPU allocator
    settings memopt's runs use: a figure of RSS that no earlier test's heap disturbs."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **CPU_ALLOCATOR_ENV},
        timeout=300,
    )
    return float(json.loads(done.stdout))
