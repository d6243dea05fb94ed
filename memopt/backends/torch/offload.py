"""Activation offload as plans: ``MODULE: offload``, on CUDA only.

An offloaded module's forward runs under ``torch.autograd.graph.save_on_cpu(pin_memory=True)``
(``memopt.recompute``): what it saves for backward is copied to pinned host memory and back when
backward needs it. It saves on the device what a checkpoint of the module saves (the tensors made
and saved inside it) and reruns nothing; it costs the copies, each saved byte out in forward and
back in backward, at the host link's bandwidth measured on the device (no overlap with compute is
counted: ``save_on_cpu`` copies out synchronously). On CPU the saved tensors are in host memory
already, so no plan is offered there (``NOT_ON_CPU`` says so).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from memopt.backends.torch.scan import TorchPlanRow, TorchScan
from memopt.errors import MemoptError, one_line
from memopt.run.launch import helper_last_line

__all__ = ["NOT_ON_CPU", "host_link_bandwidth", "offload_rows", "with_offload"]

NOT_ON_CPU = (
    "offload ('MODULE: offload'): does not apply on CPU, where what backward keeps is in host memory "
    "already; tune and plan offer it where the target runs on CUDA"
)
# Bytes each measured copy moves: large enough that the link's start-up is a small share of its time.
_PROBE_BYTES = 256 << 20
_PROBE_COPIES = 4
# In a process of its own: a CUDA context in memopt's own process would hold device memory the runs measure.
_PROBE = f"""
import time, torch
n = {_PROBE_BYTES}
host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
device = torch.empty(n, dtype=torch.uint8, device="cuda")
device.copy_(host); host.copy_(device); torch.cuda.synchronize()
started = time.perf_counter()
for _ in range({_PROBE_COPIES}):
    device.copy_(host, non_blocking=True)
    host.copy_(device, non_blocking=True)
torch.cuda.synchronize()
print(2 * {_PROBE_COPIES} * n / (time.perf_counter() - started))
"""


def host_link_bandwidth(python: str | None = None) -> float:
    """Bytes a second between pinned host memory and the CUDA device, both ways, measured in a short process."""
    doing = "measuring the host link's bandwidth for offload"
    printed = helper_last_line([python or sys.executable, "-c", _PROBE], 120, doing)
    try:
        return float(printed)
    except ValueError as err:
        raise MemoptError(f"{doing} failed: {one_line(err)}") from err


def offload_rows(rows: tuple[TorchPlanRow, ...], bandwidth: float) -> tuple[TorchPlanRow, ...]:
    """An offload row beside each whole-module row: the same bytes off the device (backward brings
    one module's back at a time, as it reruns one checkpoint at a time), costing their copies out and back."""
    return tuple(
        replace(
            row,
            plan=replace(row.plan, keep=(), offload=True),
            recompute_seconds=2 * row.saving_bytes / bandwidth,
        )
        for row in rows
        if row.plan.whole_module and not row.plan.keep
    )


def with_offload(scanned: TorchScan, bandwidth: float) -> TorchScan:
    """The scan with an offload plan beside each whole-module plan, over every layer alike and layer by layer."""
    return replace(
        scanned,
        rows=(*scanned.rows, *offload_rows(scanned.rows, bandwidth)),
        layers=(*scanned.layers, *offload_rows(scanned.layers, bandwidth)),
    )
