"""The torch back end's steps played on fake tensors: the live bytes of real ones, exactly, and what
a policy takes off them; in this process with plain PyTorch."""

from __future__ import annotations

import pytest

from memopt.backends.torch.scan import NEEDS_VALUES, scan_recipe
from memopt.backends.torch.simulate import SimulatedPeak, simulate_steps
from memopt.recipes import load_recipe
from memopt.recompute import RecomputePlan, RecomputePolicy

NONE = RecomputePolicy(())


def policy(*plans: str) -> RecomputePolicy:
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in plans))


@pytest.mark.parametrize(
    ("spec", "options", "plans"),
    [
        ("gpt", {"size": "tiny", "seq_len": 32}, ()),
        ("gpt", {"size": "tiny", "seq_len": 32}, ("blocks.*: *",)),
        ("gpt", {"size": "tiny", "seq_len": 32}, ("blocks.*.mlp.act: gelu", "blocks.*.mlp.fc: addmm")),
        ("bert", {"size": "tiny"}, ("layers.*: *",)),
        ("mlp", {}, ()),
    ],
)
def test_fake_tensors_hold_the_live_bytes_of_real_ones(
    spec: str, options: dict[str, object], plans: tuple[str, ...]
) -> None:
    """The same two training steps (forward, backward, AdamW, zero_grad) on fake and on real
    tensors, with and without a policy: the same bytes before them and at their highest."""
    recipe = load_recipe(spec, options)
    assert simulate_steps(recipe, 4, policy(*plans)) == simulate_steps(recipe, 4, policy(*plans), fake=False)


def test_the_steps_hold_the_optimizers_state_and_the_last_output() -> None:
    """The second step runs with AdamW's two moments of every parameter, and the loop holds the
    first step's logits while the second forward runs: the peak is above one step's activations
    plus the parameters, their gradients and that state."""
    recipe = load_recipe("gpt", {"size": "tiny", "seq_len": 32})
    played = simulate_steps(recipe, 8, NONE)
    parameters = played.start_bytes - 8 * 33 * 8  # the start less the batch: (8, 33) int64 tokens
    logits = 8 * 32 * 256 * 4
    assert played.growth_bytes > 3 * parameters + logits


def test_a_checkpointed_step_peaks_lower_and_a_larger_batch_higher() -> None:
    recipe = load_recipe("gpt", {"size": "tiny", "seq_len": 64, "n_layer": 8})
    plain, blocks = simulate_steps(recipe, 64, NONE), simulate_steps(recipe, 64, policy("blocks.*: *"))
    assert blocks.start_bytes == plain.start_bytes and blocks.peak_bytes < plain.peak_bytes
    assert simulate_steps(recipe, 128, NONE).growth_bytes > 1.9 * plain.growth_bytes - blocks.start_bytes


@pytest.mark.slow
def test_a_model_far_larger_than_the_machine_plays_in_this_process() -> None:
    """GPT-2 XL's 1.6 billion parameters at 8 x 1024 tokens: hundreds of GiB played, none held."""
    played = simulate_steps(load_recipe("gpt", {"size": "xl", "seq_len": 1024}), 8, policy("blocks.*: *"))
    assert played.start_bytes > 5 * 2**30 and played.peak_bytes > 4 * played.start_bytes


def test_the_peak_model_adds_what_its_run_held_besides_the_tensors() -> None:
    """One run's measured peak anchors the model: what it held beyond its simulated tensors is
    added to the tensors at any batch and policy."""
    recipe = load_recipe("gpt", {"size": "tiny", "seq_len": 32})
    anchor = simulate_steps(recipe, 2, NONE).peak_bytes + 300 * 2**20
    model = SimulatedPeak(recipe, anchor_batch=2, anchor_bytes=anchor, scanned=scan_recipe(recipe, 2, timed=False))
    assert model.process_bytes == 300 * 2**20
    assert (
        model.predict(policy("blocks.*: *"), 16)
        == 300 * 2**20 + simulate_steps(recipe, 16, policy("blocks.*: *")).peak_bytes
    )


def test_a_forward_that_reads_its_values_cannot_play_on_fake_tensors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "branchy.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        y = self.lin(x)\n"
        "        return y * 2 if y.sum() > 0 else y\n"
        "def build_model():\n"
        "    return M()\n"
        "def make_batch(batch_size):\n"
        "    return torch.randn(batch_size, 4), torch.randn(batch_size, 4)\n"
    )
    with pytest.raises(NEEDS_VALUES):
        simulate_steps(load_recipe(str(tmp_path / "branchy.py")), 2, NONE)
