"""Scan a user's own training command: a training forward of its model, captured inside the job.

memopt starts the command (``{batch}`` filled in) with ``CAPTURE_FILE_ENV`` set, so that
``memopt.recompute.apply`` in the job captures what autograd keeps during the second training
forward of the model it was given (the first is a warm-up), writes it, and ends the job there:
a short run, one step trained. Three such runs (the scan's batch, one and two more) give each plan's saving as a line
in the batch, checked on the third, as a recipe's in-process scan does. The command's loss, if
computed outside the model, is not captured: what it keeps is no module's and no plan's.
"""

from __future__ import annotations

from memopt.backends.torch.scan import TorchScan, plans_of
from memopt.core import BackendName, Command
from memopt.errors import MemoptError
from memopt.recompute import POLICY_ENV
from memopt.recompute.capture import CAPTURE_FILE_ENV, CapturedModel
from memopt.run.command import run_target
from memopt.run.launch import RunRequest, new_run_dir
from memopt.run.settings import RunSettings

__all__ = ["CAPTURE_FILE", "scan_command"]

CAPTURE_FILE = "capture.json"


def scan_command(settings: RunSettings, batch: int) -> TorchScan:
    """The plans of ``settings``' command at ``batch``, from three capturing runs of it."""
    if settings.target.fixed_batch:
        raise MemoptError(
            f"{settings.target}: --backend torch varies the batch, so the command needs {{batch}} "
            "where its batch size goes (e.g. --cmd 'python train.py --batch-size {batch}')"
        )
    points: list[tuple[int, int | None]] = [(batch, None), (batch + 1, None)]
    check: tuple[int, int | None] = (batch + 2, None)
    captured = {point: _capture_run(settings, point[0]) for point in [*points, check]}
    first = captured[points[0]]
    steps = {point: model.step for point, model in captured.items()}
    return plans_of(steps, points, check, first.modules, set(first.batch_norm))


def _capture_run(settings: RunSettings, batch: int) -> CapturedModel:
    assert isinstance(settings.target, Command)
    run_dir = new_run_dir(settings.runs_dir, f"torch-scan-{settings.target.label}-b{batch}")
    captured = (run_dir / CAPTURE_FILE).resolve()
    # A policy exported in the user's shell would be applied before the capture: the scan is of the model as it is.
    request = RunRequest(
        settings, batch, env={CAPTURE_FILE_ENV: str(captured)}, unset_env=(POLICY_ENV,), backend=BackendName.TORCH
    )
    run = run_target(request, run_dir)
    if not captured.is_file():
        why = run.error or str(run.status)
        raise MemoptError(
            f"the job at batch {batch} ended before memopt could capture its model's second training forward "
            f"({why}; log: {run.log_path}): does the script pass its model to memopt.recompute.apply?"
        )
    return CapturedModel.from_json(captured.read_text())
