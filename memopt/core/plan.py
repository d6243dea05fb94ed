"""A plan as every back end's stages speak of it: ``PlanName``, the text its back end names it by.

The generic stages (a trial's record, the tuning session's events, the TUI) carry plans by
this name and never look inside it; a back end whose names have parts subclasses it (ORT's
``PlanKey``: "<subgraph>:<type>:<count>" cells), and the plain-PyTorch back end's names are its
policy's plans as written (``"blocks.*.mlp: gelu"``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["PlanName", "plan_names"]


class PlanName(str):
    """A plan's name. A ``str``, so JSON, journals and logs keep the text as is."""

    __slots__ = ()

    @property
    def short(self) -> str:
        """The name as people read it; a back end with a shorter form overrides it."""
        return str(self)


def plan_names(texts: Iterable[str]) -> tuple[PlanName, ...]:
    """Names read back from text; a back end's own names (a ``PlanName`` subclass) stay as they are."""
    return tuple(text if isinstance(text, PlanName) else PlanName(text) for text in texts)
