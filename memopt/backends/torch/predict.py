"""The torch back end's peak models, each a ``PeakModel``: a step's peak at any batch under any policy.

``LinePeak``: a line in the batch through two runs without recompute, less what a policy's plans
take off it by the scan's figures: pure arithmetic over a scan and two measured peaks (no run, no
scipy), for targets whose steps cannot be played on fake tensors (a user's command), and checked by
``bench/gpu/check_plain_torch.py`` on a device image that has torch and little else. A recipe's
steps play on fake tensors instead (``memopt.backends.torch.simulate.SimulatedPeak``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memopt.backends.torch.scan import BATCH, SEQ, TorchPlanRow, TorchScan
from memopt.recompute import RecomputePolicy
from memopt.units import format_bytes

__all__ = ["LinePeak", "PeakLine", "PeakModel", "plan_saving", "policy_saving", "probe_batches"]


class PeakModel(Protocol):
    def predict(self, policy: RecomputePolicy, batch: int) -> float:
        """The whole run's peak at ``batch`` with ``policy``."""
        ...

    def describe(self, batch: int) -> str:
        """Where the prediction at ``batch`` without recompute comes from, in a few words."""
        ...

    def holds(self, policy: RecomputePolicy, batch: int) -> str:
        """What holds the predicted peak at ``batch`` with ``policy``, term by term, in a few words."""
        ...


def probe_batches(target_batch: int) -> tuple[int, int]:
    """A quarter and a half of the target batch: close to it, so the line's extrapolation is
    short (a CPU peak varies by tens of MiB from run to run), and distinct."""
    small, larger = max(1, target_batch // 4), max(2, target_batch // 2)
    return small, max(larger, small + 1)


@dataclass(frozen=True)
class PeakLine:
    """The peak without recompute through two measured runs: the fixed part (parameters,
    gradients, optimizer state, the runtime) and the growth per sample."""

    small: int
    small_bytes: float
    larger: int
    larger_bytes: float

    @property
    def per_sample(self) -> float:
        return (self.larger_bytes - self.small_bytes) / (self.larger - self.small)

    def at(self, batch: int) -> float:
        return self.larger_bytes + self.per_sample * (batch - self.larger)


def plan_saving(row: TorchPlanRow, scanned: TorchScan, batch: int) -> float:
    """What the plan takes off the peak at ``batch``: its saving's share the peak sees (less what
    backward holds again while it recomputes it, as the peak sits in backward)."""
    if row.saving is None:  # no formula: the measured bytes, taken as growing with the batch
        saving = row.saving_bytes * batch / scanned.batch
    else:
        saving = row.saving.evaluate({BATCH: batch, SEQ: scanned.seq or 1})
    return saving * row.peak_share


def policy_saving(policy: RecomputePolicy, scanned: TorchScan, batch: int) -> float:
    """The policy's plans' savings at ``batch``, added up (a plan the scan does not list saves nothing)."""
    rows = {row.plan: row for row in (*scanned.rows, *scanned.layers)}
    return sum(plan_saving(rows[plan], scanned, batch) for plan in policy.plans if plan in rows)


@dataclass(frozen=True)
class LinePeak:
    """The line through the probes, less the scan's savings of a policy's plans."""

    line: PeakLine
    scanned: TorchScan

    def predict(self, policy: RecomputePolicy, batch: int) -> float:
        return self.line.at(batch) - policy_saving(policy, self.scanned, batch)

    def describe(self, batch: int) -> str:
        line = self.line
        return (
            f"{format_bytes(int(line.small_bytes))} at batch {line.small}, "
            f"{format_bytes(int(line.per_sample))} a sample (the line through two runs)"
        )

    def holds(self, policy: RecomputePolicy, batch: int) -> str:
        fixed = self.line.at(0)
        return (
            f"{format_bytes(int(fixed))} whatever the batch (parameters, gradients, optimizer state, the runtime), "
            f"{format_bytes(int(self.predict(policy, batch) - fixed))} for batch {batch}'s samples after recompute"
        )
