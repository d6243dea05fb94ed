"""The tuner screen's widgets, one area each."""

from memopt.tui.widgets.header import InfoHeader
from memopt.tui.widgets.memory import MemoryPanel
from memopt.tui.widgets.plans import PlansTable
from memopt.tui.widgets.result import ResultBar
from memopt.tui.widgets.trials import TrialsPanel

__all__ = ["InfoHeader", "MemoryPanel", "PlansTable", "ResultBar", "TrialsPanel"]
