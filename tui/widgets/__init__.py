"""The tuner screen's widgets, one area each."""

from .header import InfoHeader
from .memory import MemoryPanel
from .plans import PlansTable
from .result import ResultBar
from .trials import TrialsPanel

__all__ = ["InfoHeader", "MemoryPanel", "PlansTable", "ResultBar", "TrialsPanel"]
