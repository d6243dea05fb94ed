"""The ORT back end (``memopt.backends.base.Backend``): ORTModule's recompute plans, found in its
training graph, predicted by the memory model played over it, verified by trials.

Its modules are imported inside the methods: choosing a back end loads only ORT's stack check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memopt.backends.base import PlanRequest, Progress, ScanRequest, TrialRequest
from memopt.core.backend import BackendName
from memopt.errors import MemoptError

if TYPE_CHECKING:
    from memopt.backends.ort.child import OrtSteps
    from memopt.backends.ort.commands import OrtPlanReport, OrtScanReport, OrtTrialReport
    from memopt.backends.ort.tune.tuner import Tuner
    from memopt.tune.events import TuneEvent
    from memopt.tune.settings import TuneSettings

__all__ = ["BACKEND", "OrtBackend"]


class OrtBackend:
    name = BackendName.ORT
    label = "ORTModule"

    def problem_here(self) -> str | None:
        from memopt.backends.ort.stack import StackError, check_stack, inspect_stack

        try:
            check_stack(inspect_stack())
        except StackError as err:
            return str(err)
        return None

    def prepare(self) -> None:
        return None  # the parent process builds nothing of ORT's before the options are checked

    def child_steps(self) -> OrtSteps:
        from memopt.backends.ort.child import OrtSteps

        return OrtSteps()

    def scan(self, request: ScanRequest, progress: Progress) -> OrtScanReport:
        from memopt.backends.ort.commands import ort_scan

        return ort_scan(request, progress)

    def plan(self, request: PlanRequest, progress: Progress) -> OrtPlanReport:
        from memopt.backends.ort.commands import ort_plan

        return ort_plan(request, progress)

    def trial(self, request: TrialRequest, progress: Progress) -> OrtTrialReport:
        from memopt.backends.ort.commands import ort_trial

        return ort_trial(request, progress)

    def tuning_session(
        self, settings: TuneSettings, progress: Progress, on_event: Callable[[TuneEvent], None] | None = None
    ) -> Tuner:
        from memopt.backends.ort.trials import stack_versions
        from memopt.backends.ort.tune.tuner import Tuner
        from memopt.run.budget import require_budget

        versions = stack_versions(settings.run.python, settings.run.timeout_s)
        if versions.ort_version is None:
            raise MemoptError("the ORT training stack cannot run: onnxruntime-training is not installed")
        require_budget(settings.budget, settings.run.device, versions.cuda)
        progress.checked()
        return Tuner(settings, on_event, versions=versions)


BACKEND = OrtBackend()
