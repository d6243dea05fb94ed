"""Seeded plain-PyTorch training steps, with and without a recompute policy (the torch back end's tests)."""

from __future__ import annotations

from pathlib import Path

import torch

from memopt import recompute
from memopt.child.steps import default_loss
from memopt.recipes import Recipe
from memopt.recompute import RecomputePlan, RecomputePolicy


def policy(*plans: str) -> RecomputePolicy:
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in plans))


def train_step(recipe: Recipe, plans: RecomputePolicy | None, batch: int = 3) -> dict[str, torch.Tensor]:
    """One seeded training step (dropout on): every gradient and buffer after it."""
    torch.manual_seed(0)
    model = recipe.model().train()
    torch.manual_seed(1)
    inputs, target = recipe.batch(batch)
    if plans is not None:
        recompute.apply(model, plans)
    torch.manual_seed(2)
    output = (
        model(**inputs) if isinstance(inputs, dict) else model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    )
    loss = (recipe.loss or default_loss)(output, target)
    loss.backward()
    state = {f"grad {name}": p.grad for name, p in model.named_parameters() if p.grad is not None}
    return {**state, **{f"buffer {name}": b for name, b in model.named_buffers()}}


def assert_bitwise_equal(recipe: Recipe, plans: RecomputePolicy) -> None:
    plain, recomputed = train_step(recipe, None), train_step(recipe, plans)
    assert plain.keys() == recomputed.keys()
    differ = [name for name in plain if not torch.equal(plain[name], recomputed[name])]
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
