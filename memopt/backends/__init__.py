"""Training back ends: ``ort`` (ORTModule, the first) and ``torch`` (plain PyTorch, ``memopt.backends.torch``).

``choose_backend`` picks one for a command: the one asked for, else ORT where ORTModule can run
here and plain PyTorch otherwise, with the reason said in the command's first line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memopt.errors import MemoptError

__all__ = ["Backend", "ChosenBackend", "choose_backend"]


class Backend(str, Enum):
    ORT = "ort"
    TORCH = "torch"


@dataclass(frozen=True)
class ChosenBackend:
    backend: Backend
    reason: str

    def line(self) -> str:
        return f"backend: {self.backend.value} ({self.reason})"


def choose_backend(requested: str | None) -> ChosenBackend:
    """The back end named by ``--backend`` (``ort``, ``torch``; None: ort where ORTModule can run)."""
    if requested is not None:
        try:
            return ChosenBackend(Backend(requested), "--backend")
        except ValueError:
            raise MemoptError(f"--backend {requested!r}: choose ort or torch") from None
    # Imported here: asking for the torch back end loads nothing of ORT's path.
    from memopt.backends.ort.stack import StackError, check_stack, inspect_stack

    try:
        check_stack(inspect_stack())
    except StackError as err:
        return ChosenBackend(Backend.TORCH, f"ORTModule cannot run here: {err}")
    return ChosenBackend(Backend.ORT, "ORTModule can run here; --backend torch for plain PyTorch")
