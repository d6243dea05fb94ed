"""Tune for plain PyTorch: the model decides, the measurement confirms.

1. Scan (in this process): each plan's saving as a polynomial in batch and sequence, from steps
   captured with fake tensors (no memory, whatever the model's size), and its recompute time
   from one real step at batch 2.
2. The peak model. A recipe's two training steps play on fake tensors at the target batch
   (``memopt.backends.torch.simulate``): the bytes its tensors hold at their highest, the
   parameters, gradients, AdamW's state, backward's rematerialised regions and the loop's last
   output included. One run without recompute at batch 2 measures what the process holds
   besides (the runtime, autograd's nodes, the allocator's slack), which on CPU, with glibc's
   mmap threshold pinned, did not grow with the batch. A user's command, or a recipe whose
   forward reads its tensors' values, cannot play on fake tensors, and on CUDA what the caching
   allocator keeps beyond the tensors is not measured yet: there two runs at a quarter and a
   half of the target batch draw the peak's line instead, less the scan's savings.
3. The plans whose savings at the target batch cover the peak's excess over the limit (the
   budget less the margin) less the room kept for the model's error and the run-to-run noise
   (``SavingRoom``; against the limit itself where no policy is predicted that low) at least
   recompute time: ``cheapest_cover``, the exact solve ORT's
   planner makes too (``memopt.predict.choice``), over the plans layer by layer (a layer's
   checkpoint, a selective set or an op plan on it) and a causal LM's chunked loss, where a
   checkpointed module excludes the plans inside it; where nothing covers it, the set that saves
   the most. The chunked loss's saving is a play with it alone (the scan sees only what its loss
   saves, not the logits returned or the gradients). The peak model predicts the choice; where it
   lands over the limit the shortfall joins the need and the choice is made again.
4. One run at the target batch with that policy answers: verified when its measured peak is
   under the limit. The model's "nothing fits" is a prediction, so the policy that saves the
   most is run once even then. Where the run is over, its miss (measured less predicted) and
   the margin once more join the need and the choice is made again, with one more verifying run;
   where it ran out of memory, the policy that saves most is that choice.

That is two training runs for a recipe on CPU (three with the second choice), three for a
command or on CUDA.
What stands between a recipe and one run is what the process holds besides its tensors: torch's
runtime, the recipe's imports and the allocator's share, which only a process of the job shows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from memopt.backends.torch.command_scan import scan_command
from memopt.backends.torch.offload import NOT_ON_CPU, host_link_bandwidth, with_offload
from memopt.backends.torch.optimizer import with_step_plans
from memopt.backends.torch.predict import LinePeak, PeakLine, PeakModel, plan_saving, probe_batches
from memopt.backends.torch.scan import BATCH, NEEDS_VALUES, TorchPlanRow, TorchScan, scan_recipe
from memopt.backends.torch.simulate import SimulatedPeak
from memopt.backends.torch.trial import (
    journaled_times,
    on_cuda,
    policy_of,
    policy_path,
    resolve_torch_budget,
    run_torch_trial,
    trial_export_line,
)
from memopt.core import RecipeTarget, RunStatus
from memopt.core.plan import plan_names
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError, one_line
from memopt.graph.polynomial import Polynomial
from memopt.predict import RunSpread
from memopt.predict.choice import budget_limit, cheapest_cover, kept_room
from memopt.recipes import Recipe
from memopt.recompute import RecomputePolicy
from memopt.run.budget import Budget
from memopt.run.journal import Journal
from memopt.run.launch import TORCH_LOG_NAME
from memopt.run.settings import RunSettings
from memopt.units import format_bytes, format_compared

__all__ = [
    "PLAYED_SAVING_ERROR",
    "SAVING_ERROR",
    "SavingRoom",
    "TorchPlan",
    "TorchTuneResult",
    "plan_torch",
    "tune_torch",
    "verify_torch",
]

_NONE = RecomputePolicy(())
# Runs at the target batch: the model's choice, and once more with what it measured above the prediction.
_VERIFYING_RUNS = 2
_TARGET = "target"  # what a run's failure calls a recipe or command (RunStatus.failure)
# Choices the peak model predicts before it settles (each one two steps played on fake tensors).
_CHOICES = 6
# What a policy takes off the peak is the scan's figure (or the fake-tensor play's), which no run
# checks before the one that judges the policy. Summed plan by plan (a `--cmd` job's line), the run
# landed below the prediction by up to 5.9% of the saving on the scripts measured (the line's own
# error in the batch included); played on fake tensors (a recipe), by up to 1.3%; repeats of one
# run spread by a few tenths of a MiB (BENCHMARKS, "Room for the model's error"). So a choice keeps
# this share of what it takes off as room, with headroom over the most measured.
SAVING_ERROR = 0.10
PLAYED_SAVING_ERROR = 0.03


@dataclass(frozen=True)
class SavingRoom:
    """The room a choice keeps under the limit (``kept_room``, as ORT's search keeps it): twice the
    run-to-run noise measured over repeats of one run (none where nothing ran twice), plus the
    savings' error, ``share`` of what the policy takes off the predicted peak (``SAVING_ERROR`` for
    the scan's savings summed, ``PLAYED_SAVING_ERROR`` for a play on fake tensors), or more where a
    run of a policy at the target batch fell further below its prediction (``learnt``)."""

    spread: RunSpread = RunSpread()
    share: float = SAVING_ERROR
    learnt: bool = False

    def bytes(self, saving: float) -> float:
        return kept_room(self.spread.noise_bytes, self.share * max(0.0, saving))

    def describe(self, saving: float) -> str:
        noise = f"2 × the {self.spread.noise_line()}" if self.spread.noise else "no run repeated: no run-to-run noise"
        source = (
            "the most a run at the target batch fell below its prediction"
            if self.learnt
            else "the savings' error allowed for"
        )
        return (
            f"{format_bytes(int(self.bytes(saving)))} of room kept under the limit ({noise}, + {self.share:.1%} "
            f"of the {format_bytes(int(max(0.0, saving)))} the policy takes off: {source})"
        )

    def learnt_from(self, model: PeakModel, batch: int, trials: Iterable[TrialResult]) -> SavingRoom:
        """The room with the noise of ``trials``' repeats and the share their runs of a policy at
        ``batch`` fell below ``model``'s prediction, each where wider than this room's."""
        # Each run once: a search that meets a policy it ran before answers with that run again.
        ran = list({t.run_dir: t for t in trials if t.ran and t.memory.device_peak is not None}.values())
        share, learnt = self.share, self.learnt
        baseline = model.predict(_NONE, batch)
        for trial in ran:
            if trial.batch_size != batch or not trial.config:
                continue
            predicted = model.predict(policy_of(trial), batch)
            missed = (float(trial.memory.device_peak or 0) - predicted) / max(baseline - predicted, 1.0)
            if missed > share:
                share, learnt = missed, True
        spread = RunSpread.of_trials(ran)
        return SavingRoom(spread if spread.noise_bytes > self.spread.noise_bytes else self.spread, share, learnt)


@dataclass(frozen=True)
class TorchTuneResult:
    target_batch: int
    budget_bytes: int
    limit_bytes: float  # the budget less the margin: what a verified peak stays under
    baseline_bytes: float  # predicted peak without recompute at the target batch
    predicted_bytes: float  # with the chosen policy
    policy: RecomputePolicy
    verify: TrialResult | None  # the last run at the target batch
    trials: tuple[TrialResult, ...]
    kept_room_bytes: float = 0.0  # the room the choice kept under the limit
    kept_room: str = ""  # where that room came from

    @property
    def verified(self) -> bool:
        return self.verify is not None and self.verify.within(int(self.limit_bytes))

    @property
    def policy_path(self) -> Path | None:
        return policy_path(self.verify) if self.verify is not None else None

    def export_lines(self) -> list[str]:
        """What the job's shell pastes: the verified policy's file in ``MEMOPT_RECOMPUTE_POLICY``."""
        if not self.verified or self.verify is None:
            return []
        return [f"# {self.policy}", trial_export_line(self.verify)]

    def summary(self, settings: RunSettings, journal: Path) -> dict[str, Any]:
        """The result for ``--json``."""
        return {
            "status": "verified" if self.verified else "does_not_fit",
            "backend": "torch",
            "recipe": settings.target.spec,
            "options": dict(settings.options),
            "target_batch": self.target_batch,
            "budget_bytes": self.budget_bytes,
            "limit_bytes": int(self.limit_bytes),
            "predicted_without_recompute_bytes": int(self.baseline_bytes),
            "predicted_bytes": int(self.predicted_bytes),
            "kept_room_bytes": int(self.kept_room_bytes),
            "kept_room": self.kept_room,
            "best": None
            if self.verify is None
            else {
                "plans": [str(plan) for plan in self.policy.plans],
                "verified": self.verified,
                "peak_bytes": self.verify.memory.device_peak,
                "median_step_s": self.verify.median_step_s,
                "policy_file": str(policy_path(self.verify).resolve()),
                "run_dir": str(self.verify.run_dir),
            },
            "export": self.export_lines(),
            "journal": str(journal),
            "trials": [
                {
                    "batch": trial.batch_size,
                    "plans": list(trial.config),
                    "status": trial.status.value,
                    "peak_bytes": trial.memory.device_peak,
                    "median_step_s": trial.median_step_s,
                    "reused": trial.reused,
                    "run_dir": str(trial.run_dir),
                }
                for trial in self.trials
            ],
        }


@dataclass(frozen=True)
class TorchPlan:
    """The model's answer before any run at the target batch: the scan, the peak model its runs
    without recompute gave and the cheapest policy predicted to bring the peak under the limit."""

    target_batch: int
    budget_bytes: int
    limit_bytes: float
    scanned: TorchScan
    model: PeakModel
    policy: RecomputePolicy
    predicted_bytes: float
    probes: tuple[TrialResult, ...]
    room: SavingRoom = SavingRoom()

    @property
    def baseline_bytes(self) -> float:
        return self.model.predict(_NONE, self.target_batch)

    @property
    def kept_room_bytes(self) -> float:
        """The room the choice keeps: under the limit by this much where it is predicted that low."""
        return self.room.bytes(self.baseline_bytes - self.predicted_bytes)

    def over_with_room(self, peak: float) -> float:
        """How far a policy predicted at ``peak``, with the room it keeps, lands over the limit
        (negative: under)."""
        return peak + self.room.bytes(self.baseline_bytes - peak) - self.limit_bytes

    @property
    def room_line(self) -> str:
        """The room kept, in words; where the choice is predicted above the limit less it, what it keeps instead."""
        line = self.room.describe(self.baseline_bytes - self.predicted_bytes)
        if self.over_with_room(self.predicted_bytes) <= 0:
            return line
        kept = format_bytes(int(max(0.0, self.limit_bytes - self.predicted_bytes)))
        return f"no policy is predicted under the limit less {line}: chosen against the limit itself, {kept} under it"

    def learnt(self, trials: Iterable[TrialResult]) -> TorchPlan:
        """The plan with its room learnt from ``trials`` (``SavingRoom.learnt_from``), its choice made again."""
        plan = replace(self, room=self.room.learnt_from(self.model, self.target_batch, trials))
        policy, predicted = plan.rechosen(0.0)
        return replace(plan, policy=policy, predicted_bytes=predicted)

    @property
    def feasible(self) -> bool:
        return self.predicted_bytes <= self.limit_bytes

    def strongest(self) -> tuple[RecomputePolicy, float]:
        """The policy that saves most, and its predicted peak: what runs after one ran out of memory."""
        policy, _ = _choose(self.scanned, self.target_batch, math.inf)
        return policy, self.model.predict(policy, self.target_batch)

    def largest_fitting_batch(self) -> int:
        """The largest batch below the target whose strongest policy is predicted under the limit (0: none)."""
        low, high = 0, self.target_batch - 1
        while low < high:  # the peak grows with the batch: the batches that fit are 1..answer
            middle = (low + high + 1) // 2
            policy, _ = _choose(self.scanned, middle, math.inf)
            if self.model.predict(policy, middle) <= self.limit_bytes:
                low = middle
            else:
                high = middle - 1
        return low

    @functools.cached_property
    def floor_line(self) -> str:
        """Why no policy fits: the floor at the target batch, what holds it, the term that binds
        and what lowers it, and the batch that fits (worked out once: the progress and the
        session's verdict both say it)."""
        policy, floor = self.strongest()
        largest = self.largest_fitting_batch()
        fits = f"batch {largest} is predicted to fit" if largest else "not even batch 1 is predicted to fit"
        return (
            f"the floor at batch {self.target_batch} is {format_bytes(int(floor))} with the policy that saves "
            f"most ({len(policy.plans)} plans): {self.model.holds(policy, self.target_batch)}; "
            f"{self._binding(policy, floor)}; the limit is {format_bytes(int(self.limit_bytes))}; {fits}"
        )

    def _binding(self, policy: RecomputePolicy, floor: float) -> str:
        """The term of the floor that binds, and what lowers it: the part no batch changes
        (parameters, their gradients, the optimizer's state, the runtime), drawn from the floors at
        batches 1 and 2, where it is over the limit alone; else what the samples add after
        recompute, with the logits and loss the chunked loss takes off where it is in the policy."""
        one, two = (self.model.predict(_choose(self.scanned, b, math.inf)[0], b) for b in (1, 2))
        fixed = max(0.0, 2 * one - two)
        if fixed > self.limit_bytes:
            return (
                f"what binds is the {format_bytes(int(fixed))} no batch changes (parameters, their gradients, the "
                "optimizer's state, the runtime), over the limit alone: recompute cannot lower it"
            )
        said = (
            f"what binds is what the samples add ({format_bytes(int(max(0.0, two - one)))} a sample after recompute, "
            f"over the {format_bytes(int(fixed))} no batch changes): a smaller batch lowers it"
        )
        loss = next((row for row in self.scanned.layers if row.plan.chunked_loss and row.plan in policy.plans), None)
        if loss is None:
            return said
        held = plan_saving(loss, self.scanned, self.target_batch)
        return (
            f"{said}; the logits and the loss at batch {self.target_batch} would hold {format_bytes(int(held))} "
            f"more, which chunking the loss (`{loss.plan}`, in that policy) takes off: the floor without it is "
            f"{format_bytes(int(floor + held))}"
        )

    def cost_s(self, plans: Iterable[str]) -> float:
        """The scan's recompute time of ``plans`` at the target batch, in seconds a step: plans over
        every layer alike and plans layer by layer (what tune chooses) alike."""
        scanned = self.scanned
        costs = {
            str(row.plan): row.seconds_at(self.target_batch, scanned.batch) for row in (*scanned.rows, *scanned.layers)
        }
        return sum(costs.get(plan, 0.0) for plan in plans)

    def at_budget(self, budget_bytes: int, margin: float, trials: Iterable[TrialResult]) -> TorchPlan:
        """The same scan, peak model and runs aimed at another budget, its room learnt from every
        run so far (``trials``) and its choice made again."""
        plan = replace(self, budget_bytes=budget_bytes, limit_bytes=budget_limit(budget_bytes, margin))
        return plan.learnt(trials)

    def rechosen(self, miss: float) -> tuple[RecomputePolicy, float]:
        """The cheapest policy predicted under the limit less the room it keeps (``SavingRoom``),
        with ``miss`` bytes more to cover, and its predicted peak (with the miss); where none is
        predicted that low, the cheapest under the limit itself; the lowest predicted where none is.

        The scan's savings choose (each plan's alone, added up); the peak model then predicts the
        choice, and where it lands over the limit less the room the shortfall joins the need and
        the choice is made again: a simulated model counts what the scan's sum cannot (plans that
        overlap, what backward holds while it recomputes)."""
        kept = self._chosen(miss, keep_room=True)
        return kept if self.over_with_room(kept[1]) <= 0 else self._chosen(miss, keep_room=False)

    def _chosen(self, miss: float, *, keep_room: bool) -> tuple[RecomputePolicy, float]:
        """``rechosen``'s choice, keeping the room or not."""

        def over(peak: float) -> float:
            """How far ``peak`` (and its room) lands over the limit, in bytes of saving: each byte more
            a policy takes off grows the room by the room's share."""
            if not keep_room:
                return peak - self.limit_bytes
            return self.over_with_room(peak) / (1 - min(self.room.share, 0.5))

        need = over(self.baseline_bytes + miss)
        predicted: dict[RecomputePolicy, float] = {}
        for _ in range(_CHOICES):
            policy, _ = _choose(self.scanned, self.target_batch, need)
            if policy in predicted:
                break
            predicted[policy] = self.model.predict(policy, self.target_batch) + miss
            if over(predicted[policy]) <= 0:
                return policy, predicted[policy]
            need += over(predicted[policy])
        best = min(predicted, key=predicted.__getitem__)
        return best, predicted[best]


def plan_torch(
    settings: RunSettings,
    target_batch: int,
    budget: Budget | None,
    *,
    margin: float,
    resume: bool,
    say: Callable[[str], None],
    run: Callable[[int], TrialResult] | None = None,
) -> TorchPlan:
    """Scan, the runs without recompute the peak model needs, and its choice: no run at the target batch.

    A recipe whose steps play on fake tensors needs one run (``SimulatedPeak``); a command, or a
    recipe whose forward reads its tensors' values, two (``LinePeak``). ``run``: a run without
    recompute at a batch (default: a torch trial journaled in the runs folder)."""
    budget_bytes = resolve_torch_budget(budget, settings.device)
    if run is None:
        journal = Journal.in_folder(settings.runs_dir)

        def run(batch: int) -> TrialResult:
            return run_torch_trial(settings, batch, _NONE, journal=journal, resume=resume)

    scan_batch = min(target_batch, 2)
    cuda = on_cuda(settings.device)
    recipe = settings.target.load(settings.options) if isinstance(settings.target, RecipeTarget) else None
    if recipe is not None:
        say(
            f"scan: capturing training steps of {settings.target} at batch {scan_batch} with fake tensors, "
            f"and one real step at batch {scan_batch} for recompute times (this process)"
        )
        scanned = with_step_plans(
            scan_recipe(recipe, scan_batch), recipe, "cuda" if cuda else "cpu", python=settings.python
        )
    else:
        batches = ", ".join(str(b) for b in range(scan_batch, scan_batch + 3))
        say(f"scan: capturing a training forward of {settings.target} at batches {batches} (short runs)")
        scanned = scan_command(settings, scan_batch)
    if cuda:
        bandwidth = host_link_bandwidth(settings.python)
        say(
            f"scan: offload plans beside the checkpoints, at the host link's {bandwidth / 1e9:.1f} GB/s measured both ways"
        )
        scanned = with_offload(scanned, bandwidth)
    else:
        say(f"scan: {NOT_ON_CPU}")
    scanned = journaled_times(scanned, settings, Journal.in_folder(settings.runs_dir), resume)
    say(f"scan: {len(scanned.rows)} plans; activations kept for backward: {scanned.saved or scanned.saved_bytes} bytes")
    simulated = _simulated(recipe, scanned, settings.device, (scan_batch, target_batch), say)
    probes: list[TrialResult] = []
    for batch in (scan_batch,) if simulated is not None else probe_batches(target_batch):
        trial = run(batch)
        say(_trial_line(trial, "probe"))
        probes.append(trial)
        if not trial.ran or trial.memory.device_peak is None:
            raise MemoptError(
                f"the run at batch {batch}: {trial.status.failure(_TARGET)}: {trial.error} (log: {Path(trial.run_dir) / TORCH_LOG_NAME})"
            )
    model: PeakModel
    if simulated is not None:
        model = replace(simulated, anchor_bytes=float(probes[0].memory.device_peak or 0))
        scanned = _loss_played(scanned, model, target_batch)
    else:
        small, larger = probes
        model = LinePeak(
            PeakLine(
                small.batch_size, small.memory.device_peak or 0, larger.batch_size, larger.memory.device_peak or 0
            ),
            scanned,
        )
    limit = budget_limit(budget_bytes, margin)
    say(
        f"model: peak without recompute at batch {target_batch} = {format_bytes(int(model.predict(_NONE, target_batch)))}: "
        f"{model.describe(target_batch)}; limit {format_bytes(int(limit))} (budget {format_bytes(budget_bytes)} less {margin:.0%})"
    )
    share = PLAYED_SAVING_ERROR if isinstance(model, SimulatedPeak) else SAVING_ERROR
    room = SavingRoom(share=share)
    plan = TorchPlan(target_batch, budget_bytes, limit, scanned, model, _NONE, 0.0, tuple(probes), room).learnt(probes)
    over = "" if plan.feasible else f", over the limit {format_bytes(int(limit))}"
    say(f"model: {plan.policy} predicted at {format_bytes(int(plan.predicted_bytes))}{over}; {plan.room_line}")
    return plan


def _loss_played(scanned: TorchScan, model: SimulatedPeak, batch: int) -> TorchScan:
    """The scan with the chunked loss's saving at ``batch`` as the played steps see it: beside the
    log-softmax the loss saves (the scan's figure), the logits the model returns and the loss's
    gradients in backward, each as large, go too; a play with the loss alone counts them."""
    rows = [row for row in scanned.layers if row.plan.chunked_loss]
    if not rows:
        return scanned
    loss = rows[0]
    played = model.predict(_NONE, batch) - model.predict(RecomputePolicy((loss.plan,)), batch)
    per_sample = Polynomial.symbol(BATCH) * Polynomial.constant(Fraction(played / batch))
    layers = tuple(replace(row, saving=per_sample) if row is loss else row for row in scanned.layers)
    return replace(scanned, layers=layers)


def _simulated(
    recipe: Recipe | None, scanned: TorchScan, device: str, batches: tuple[int, int], say: Callable[[str], None]
) -> SimulatedPeak | None:
    """The recipe's peak model on fake tensors (its run to anchor it still to come), where its
    steps play there without recompute at the anchor's and the target's batch, on CPU: on CUDA
    what the caching allocator holds beyond the tensors is not measured to stay put (the line
    through two runs is what ``bench/gpu/check_plain_torch.py`` checks there)."""
    if recipe is None:
        return None
    if on_cuda(device):
        say("model: on CUDA two runs draw the line (the fake-tensor play is checked on CPU only)")
        return None
    anchor_batch, target_batch = batches
    model = SimulatedPeak(recipe, anchor_batch=anchor_batch, anchor_bytes=0.0, scanned=scanned)
    try:
        model.steps(anchor_batch, _NONE)
        played = model.steps(target_batch, _NONE)
    except NEEDS_VALUES:
        say(
            "model: the forward reads its tensors' values, so its steps cannot play on fake tensors: two runs draw the line"
        )
        return None
    except Exception as err:  # an optimizer or op fake tensors cannot run: the line needs no play
        say(f"model: the steps cannot play on fake tensors ({one_line(err)}): two runs draw the line")
        return None
    say(
        f"model: two steps at batch {target_batch} played on fake tensors: the tensors peak at "
        f"{format_bytes(played.peak_bytes)} (this process)"
    )
    return model


def tune_torch(
    settings: RunSettings,
    target_batch: int,
    budget: Budget | None,
    *,
    margin: float,
    resume: bool,
    say: Callable[[str], None],
) -> TorchTuneResult:
    plan = plan_torch(settings, target_batch, budget, margin=margin, resume=resume, say=say)
    journal = Journal.in_folder(settings.runs_dir)
    return verify_torch(
        plan,
        lambda policy, predicted: run_torch_trial(settings, target_batch, policy, journal=journal, resume=resume),
        say=say,
    )


def verify_torch(
    plan: TorchPlan, run: Callable[[RecomputePolicy, float], TrialResult], *, say: Callable[[str], None]
) -> TorchTuneResult:
    """The plan's choice run at the target batch (``run``, given the policy and its predicted peak),
    and once more where it is over the limit."""
    limit = plan.limit_bytes
    trials = list(plan.probes)
    policy, predicted = plan.policy, plan.predicted_bytes
    miss = 0.0  # what the last verifying run measured above its prediction
    ran_out = False  # the last verifying run ran out of memory: its peak is not known
    result = None
    for attempt in range(_VERIFYING_RUNS):
        if attempt > 0:
            last = policy
            policy, predicted = plan.strongest() if ran_out else plan.rechosen(miss)
            if ran_out and policy == last:
                say(f"model: no policy saves more than {policy}, which ran out of memory at batch {plan.target_batch}")
                break
            if not ran_out and predicted > limit:
                say(
                    f"model: no policy brings batch {plan.target_batch} under {format_bytes(int(limit))} "
                    f"(best {format_bytes(int(predicted))}, with the last run's miss)"
                )
                break
            missed = "" if ran_out else " with the last run's miss"
            room = replace(plan, policy=policy, predicted_bytes=predicted).room_line
            say(f"model: {policy} predicted at {format_bytes(int(predicted))}{missed}; {room}")
        elif predicted > limit:
            say("model: the lowest-predicted policy is run once: the model's prediction is not a measurement")
        # Where the target batch is the anchor's, its run without recompute is that policy's run.
        plans = plan_names(str(p) for p in policy.plans)
        anchor = next((p for p in plan.probes if p.batch_size == plan.target_batch and p.config == plans), None)
        verify = anchor or run(policy, predicted)
        if anchor is None:
            trials.append(verify)
        say(_trial_line(verify, "verify"))
        chosen = replace(plan, policy=policy, predicted_bytes=predicted)
        result = TorchTuneResult(
            plan.target_batch,
            plan.budget_bytes,
            limit,
            plan.baseline_bytes,
            predicted,
            policy,
            verify,
            tuple(trials),
            chosen.kept_room_bytes,
            chosen.room_line,
        )
        ran_out = verify.status is RunStatus.OUT_OF_MEMORY
        if ran_out:
            say(f"measurement: out of memory at batch {plan.target_batch} with {policy}: over the limit")
            continue
        peak = verify.memory.device_peak
        if not verify.ran or peak is None:
            raise MemoptError(
                f"the run at batch {plan.target_batch}: {verify.status.failure(_TARGET)}: {verify.error} (log: {Path(verify.run_dir) / TORCH_LOG_NAME})"
            )
        error = (predicted - peak) / peak  # as every prediction error memopt prints: negative, the run peaked above it
        verdict = "verified" if result.verified else "over the limit"
        peak_shown, limit_shown = format_compared(peak, limit)
        say(
            f"measurement: {verdict}: peak {peak_shown} against the limit {limit_shown} "
            f"(predicted {format_bytes(int(predicted))}, error {error:+.1%})"
        )
        if result.verified:
            break
        # The model erred by the miss here; the second choice covers it and keeps the margin's room
        # again beyond it, as run-to-run noise on a CPU peak is tens of MiB (a plan that saves just
        # the miss would land on the limit once more).
        miss += peak - predicted + (plan.budget_bytes - limit)
    assert result is not None  # the first choice always runs
    if not result.verified:
        say(f"model: {plan.floor_line}")
    return result


def _choose(scanned: TorchScan, batch: int, need: float) -> tuple[RecomputePolicy, float]:
    """The cheapest policy whose savings at ``batch`` reach ``need`` bytes, and its saving (the policy that saves most where none does).

    It chooses layer by layer (``TorchScan.layers``: each layer's checkpoint, its selective sets and
    op plans, the chunked loss) and from the plans on modules no layer repeats, so a budget a few
    layers' checkpoints reach costs only those layers' recompute: the exact least-cost cover, where
    a checkpointed module excludes the plans inside it. Between alike plans it takes the first
    layers' checkpoints and the last layers' op plans (see ``_layer_by_layer``)."""
    if need <= 0:
        return _NONE, 0.0
    rows = [*scanned.layers, *(row for row in scanned.rows if "*" not in row.plan.module)]
    savings = [plan_saving(row, scanned, batch) for row in rows]
    # Alike layers cost alike: a thousandth of a cost apart, the first layers' checkpoints and the last
    # layers' op plans come first, so the same need always gives the same policy.
    order = [i / len(rows) if row.plan.op is None else 1 - i / len(rows) for i, row in enumerate(rows)]
    costs = [row.seconds_at(batch, scanned.batch) * (1 + 1e-3 * o) for row, o in zip(rows, order)]
    chosen, _ = cheapest_cover(savings, costs, need, _excludes(rows))
    return RecomputePolicy(tuple(rows[i].plan for i in chosen)), sum(savings[i] for i in chosen)


def _excludes(rows: list[TorchPlanRow]) -> dict[int, list[int]]:
    """Each whole-module (or chunked-loss) plan and the plans on modules inside its module: taken
    together, the inner ones would save nothing more (or, on a loss head, never run)."""

    def inside(inner: str, outer: str) -> bool:
        return inner == outer or inner.startswith(outer + ".")

    return {
        i: [j for j, other in enumerate(rows) if j != i and inside(other.plan.module, row.plan.module)]
        for i, row in enumerate(rows)
        if row.plan.op is None
    }


def _trial_line(trial: TrialResult, role: str) -> str:
    peak = format_bytes(trial.memory.device_peak) if trial.memory.device_peak is not None else "no peak"
    reused = ", from the journal" if trial.reused else ""
    step = f", step {trial.median_step_s:.3f} s" if trial.median_step_s is not None else ""
    outcome = "ok" if trial.ran else trial.status.failure(_TARGET)
    return f"run ({role}): batch {trial.batch_size}, {policy_of(trial)}: {outcome}, peak {peak}{step}{reused} ({trial.run_dir})"
