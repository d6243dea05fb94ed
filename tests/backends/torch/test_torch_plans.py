"""The torch back end's plans layer by layer and the chunked loss: what the scan offers, what the
exact cover chooses, what the steps played on fake tensors hold with them, and that training under
them computes what it computes without; in this process with plain PyTorch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support.torch_steps import assert_bitwise_equal, policy
from torch import nn

from memopt.backends.torch.predict import LinePeak, PeakLine, plan_saving
from memopt.backends.torch.scan import scan_recipe
from memopt.backends.torch.simulate import simulate_steps
from memopt.backends.torch.tune import TorchPlan, _choose
from memopt.predict.choice import cheapest_cover
from memopt.recipes import Recipe, load_hf_recipe
from memopt.units import format_bytes

NONE = policy()
MiB = 2**20


@pytest.fixture(scope="module")
def llama() -> Recipe:
    """A four-layer Llama at a 32k vocabulary: the logits outweigh a layer's activations."""
    return load_hf_recipe("hf:llama", {"size": "tiny", "seq_len": 32, "num_hidden_layers": 4, "vocab_size": 32000})


def test_the_scan_offers_each_layer_and_the_chunked_loss(llama: Recipe) -> None:
    scanned = scan_recipe(llama, 2, timed=False)
    layers = {str(row.plan): row for row in scanned.layers}
    # The last layer's checkpoint saves nothing at the peak: backward reruns it at its start.
    assert [layers[f"model.layers.{i}: *"].peak_share for i in range(4)] == [1.0, 1.0, 1.0, 0.0]
    assert layers["model.layers.0: *"].saving_bytes == layers["model.layers.2: *"].saving_bytes > 0
    assert layers["model.layers.0: *"].peak_share == 1.0
    loss = layers["lm_head: chunked-loss"]
    # At least the log-softmax the loss keeps: 2 × 31 tokens × 32,000 floats.
    assert loss.saving_bytes >= 2 * 31 * 32000 * 4 and loss.recompute_seconds == 0.0


def test_tune_checkpoints_only_the_layers_a_need_takes_the_first_ones(llama: Recipe) -> None:
    scanned = scan_recipe(llama, 2, timed=False)
    rows = {str(row.plan): row for row in scanned.layers}
    loss = plan_saving(rows["lm_head: chunked-loss"], scanned, 4)
    layer = plan_saving(rows["model.layers.0: *"], scanned, 4)
    chosen, saving = _choose(scanned, 4, loss + 1.5 * layer)
    plans = {str(plan) for plan in chosen.plans}
    assert "lm_head: chunked-loss" in plans and saving >= loss + 1.5 * layer
    assert "model.layers.3: *" not in plans
    whole = sorted(p for p in plans if p.endswith(": *") and p.count(".") == 2)
    assert len(whole) < 3 and whole == [f"model.layers.{i}: *" for i in range(len(whole))]
    everything, most = _choose(scanned, 4, float("inf"))
    assert most > saving and {f"model.layers.{i}: *" for i in range(3)} <= {str(p) for p in everything.plans}


def test_a_checkpoint_excludes_the_plans_inside_it() -> None:
    """Plan 0 is a layer's checkpoint, 1 and 2 plans inside it, 3 another layer's checkpoint."""
    savings, costs = [10.0, 6.0, 5.0, 10.0], [4.0, 1.0, 1.0, 4.0]
    excludes = {0: [1, 2], 3: []}
    assert cheapest_cover(savings, costs, 11.0, excludes)[0] == [1, 2]  # cheaper than a checkpoint
    assert sorted(cheapest_cover(savings, costs, 20.0, excludes)[0]) in ([0, 3], [1, 2, 3])
    # Out of reach (the inner plans add nothing to their checkpoint): the most that goes together.
    chosen, _ = cheapest_cover(savings, costs, 100.0, excludes)
    assert sum(savings[i] for i in chosen) == 21.0 and 0 not in chosen


def test_the_played_steps_see_what_a_subset_of_layers_and_the_chunked_loss_take_off(llama: Recipe) -> None:
    peak = {
        plans: simulate_steps(llama, 4, policy(*plans)).peak_bytes
        for plans in [
            (),
            ("model.layers.0: *",),
            ("model.layers.0: *", "model.layers.1: *", "model.layers.2: *"),
            ("model.layers.*: *",),
            ("lm_head: chunked-loss",),
        ]
    }
    assert (
        peak[()] > peak[("model.layers.0: *",)] > peak[("model.layers.0: *", "model.layers.1: *", "model.layers.2: *")]
    )
    # Three of four layers hold the peak every layer does (to its last layer's output, which a
    # checkpoint of it would not keep): the last one's rerun sits at the peak.
    three = peak[("model.layers.0: *", "model.layers.1: *", "model.layers.2: *")]
    assert 0 <= three - peak[("model.layers.*: *",)] < 0.01 * peak[()]
    # The logits (4 × 32 × 32,000 floats, 16 MiB) in several copies go.
    assert peak[()] - peak[("lm_head: chunked-loss",)] > 2 * 4 * 32 * 32000 * 4


def test_layers_checkpointed_and_op_plans_on_others_train_bitwise_equal(llama: Recipe) -> None:
    assert_bitwise_equal(
        llama, policy("model.layers.0: *", "model.layers.1: * except mm", "model.layers.2.mlp.act_fn: silu")
    )


def test_below_the_floor_tune_says_the_floor_what_holds_it_and_the_batch_that_fits(llama: Recipe) -> None:
    """The plan's peak model here is a hand-made line (a fake for pure logic): 300 MiB fixed and
    40 MiB a sample before recompute, less the real scan's savings of the policy that saves most."""
    scanned = scan_recipe(llama, 2, timed=False)
    line = LinePeak(PeakLine(small=1, small_bytes=340 * MiB, larger=2, larger_bytes=380 * MiB), scanned)
    strongest, _ = _choose(scanned, 8, float("inf"))
    floor_at = {batch: line.predict(_choose(scanned, batch, float("inf"))[0], batch) for batch in range(1, 9)}
    limit = (floor_at[5] + floor_at[6]) / 2  # batch 5 fits at the most, batch 8 cannot
    plan = TorchPlan(8, int(limit / 0.98), limit, scanned, line, NONE, line.predict(NONE, 8), ())
    assert plan.largest_fitting_batch() == 5
    said = plan.floor_line
    assert said.startswith(f"the floor at batch 8 is {format_bytes(int(floor_at[8]))} with the policy that saves most")
    assert "whatever the batch (parameters, gradients, optimizer state, the runtime)" in said
    assert said.endswith("batch 5 is predicted to fit")
    # The samples bind (the line's 300 MiB fixed part is under the limit); the logits and the loss
    # are named with what chunking them takes off, as the policy that saves most chunks them.
    fixed = 2 * floor_at[1] - floor_at[2]
    per_sample = format_bytes(int(floor_at[2] - floor_at[1]))
    assert (
        f"what binds is what the samples add ({per_sample} a sample after recompute, over the "
        f"{format_bytes(int(fixed))} no batch changes): a smaller batch lowers it"
    ) in said
    held = plan_saving(next(row for row in scanned.layers if row.plan.chunked_loss), scanned, 8)
    assert held > 0 and "lm_head: chunked-loss" in {str(p) for p in strongest.plans}
    assert (
        f"the logits and the loss at batch 8 would hold {format_bytes(int(held))} more, which chunking the loss "
        f"(`lm_head: chunked-loss`, in that policy) takes off: the floor without it is "
        f"{format_bytes(int(floor_at[8] + held))}"
    ) in said
    low = replace(plan, limit_bytes=floor_at[1] - 1)
    assert low.largest_fitting_batch() == 0 and low.floor_line.endswith("not even batch 1 is predicted to fit")
    # Below what no batch changes, that part binds and recompute cannot lower it.
    lowest = replace(plan, limit_bytes=fixed - 1)
    assert (
        f"what binds is the {format_bytes(int(fixed))} no batch changes (parameters, their gradients, the "
        "optimizer's state, the runtime), over the limit alone: recompute cannot lower it"
    ) in lowest.floor_line
    assert abs(fixed - 300 * MiB) < 1 * MiB  # the line's own fixed part: the floors are the line less savings


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(width, width), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class _Staged(nn.Module):
    """Two stages of two blocks, as a ResNet's: each stage has a last block of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.middle, self.head = nn.Linear(16, 256), nn.Linear(256, 256), nn.Linear(256, 10)
        self.first = nn.Sequential(_Block(256), _Block(256))
        self.second = nn.Sequential(_Block(256), _Block(256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.second(self.middle(self.first(self.stem(x)))))


def _staged_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 16), torch.randint(0, 10, (batch_size,))


def test_a_stages_last_block_saves_at_the_peak_the_networks_last_does_not() -> None:
    """Backward reruns the first stage's last block after the second stage freed its tensors, and
    the network's last block at its start: the scan's share at the peak says so, as do the steps
    played on fake tensors (at a batch where the activations outweigh the weights and AdamW's state)."""
    recipe = Recipe("staged", _Staged, _staged_batch)
    scanned = scan_recipe(recipe, 2, timed=False)
    rows = {str(row.plan): row for row in scanned.layers}
    assert [rows[f"{stage}.{i}: *"].peak_share for stage in ("first", "second") for i in (0, 1)] == [1, 1, 1, 0]
    assert rows["first.1.act: gelu"].peak_share == 1.0 and rows["second.1.act: gelu"].peak_share == 0.0
    batch = 1024
    peak = {plans: simulate_steps(recipe, batch, policy(*plans)).peak_bytes for plans in [(), ("first.1: *",)]}
    first_last = rows["first.1: *"]
    assert peak[()] - peak[("first.1: *",)] >= 0.9 * plan_saving(first_last, scanned, batch) > 0
