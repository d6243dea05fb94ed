"""Training back ends, each one package implementing ``base.Backend``: ``ort`` (ORTModule, its
recompute plans, ``memopt.backends.ort``) and ``torch`` (plain PyTorch with ``memopt.recompute``'s
policy, ``memopt.backends.torch``). No back end imports another.

``backend_for`` gives a back end by its ``BackendName``; ``choose_backend`` picks one for a
command: the one asked for, else ORT where ORTModule can train here and plain PyTorch otherwise, with the
reason said in the command's first line. A third back end is a package with a ``backend`` module
whose ``BACKEND`` implements ``Backend``, a ``BackendName`` member and a line in ``_PACKAGES``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import cast

from memopt.backends.base import Backend
from memopt.core.backend import BackendName
from memopt.errors import MemoptError

__all__ = ["Backend", "BackendName", "ChosenBackend", "backend_for", "choose_backend"]

# Each back end's implementation, imported on first use.
_PACKAGES = {
    BackendName.ORT: "memopt.backends.ort.backend",
    BackendName.TORCH: "memopt.backends.torch.backend",
}


def backend_for(name: BackendName) -> Backend:
    """The back end called ``name``."""
    return cast(Backend, importlib.import_module(_PACKAGES[name]).BACKEND)


@dataclass(frozen=True)
class ChosenBackend:
    name: BackendName
    reason: str

    @property
    def backend(self) -> Backend:
        return backend_for(self.name)

    def line(self) -> str:
        return f"backend: {self.name.value} ({self.reason})"


def choose_backend(requested: str | None) -> ChosenBackend:
    """The back end named by ``--backend`` (``ort``, ``torch``; None: ORT where ORTModule can train here)."""
    if requested is not None:
        try:
            return ChosenBackend(BackendName(requested), "--backend")
        except ValueError:
            choices = " or ".join(name.value for name in BackendName)
            raise MemoptError(f"--backend {requested!r}: choose {choices}") from None
    ort, torch = backend_for(BackendName.ORT), backend_for(BackendName.TORCH)
    problem = ort.problem_here()
    if problem is None:
        return ChosenBackend(ort.name, f"{ort.label} can run here; --backend {torch.name.value} for {torch.label}")
    return ChosenBackend(torch.name, f"{ort.label} cannot run here: {problem}")
