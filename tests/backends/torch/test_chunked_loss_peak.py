"""The chunked loss's peak: what a real process holds for it against what the steps played on fake
tensors count, for the loss alone and for a whole tiny Hugging Face causal LM's training run.

A play on fake tensors sees the tensors ops return, never a kernel's scratch inside an op; the
chunked loss makes none (its logits are the one tensor of a chunk's size, worked on in place), so
the play holds what the process holds.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from support.torch_steps import bytes_measured_in_a_child, policy
from torch._subclasses.fake_tensor import FakeTensorMode

from memopt.backends.torch.scan import scan_recipe
from memopt.backends.torch.simulate import LiveBytes, SimulatedPeak
from memopt.backends.torch.trial import run_torch_trial
from memopt.core import parse_runnable
from memopt.recipes import load_hf_recipe
from memopt.recompute.loss import chunked_cross_entropy
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings

# 1,024 tokens over a 32k vocabulary: four chunks of 32 MiB of logits, beside a head of 7.8 MiB.
_TOKENS, _WIDTH, _VOCAB = 1024, 64, 32000
_CHUNKED = "lm_head: chunked-loss"

# The measured side: a real process, glibc's mmap threshold pinned as memopt's runs pin it, so a freed
# tensor leaves RSS at once; the peak RSS (VmHWM) over the loss's forward and backward less the RSS
# before them. A first call loads the code they run (its kernels' buffers too).
_MEASURE = textwrap.dedent(
    f"""
    import json, torch
    from memopt.child.memory import proc_status_bytes, reset_rss_peak
    from memopt.recompute.loss import chunked_cross_entropy

    def inputs(tokens):
        hidden = torch.randn(1, tokens, {_WIDTH}, requires_grad=True)
        weight = torch.randn({_VOCAB}, {_WIDTH}, requires_grad=True)
        return hidden, weight, torch.randint(0, {_VOCAB}, (1, tokens))

    chunked_cross_entropy(*inputs({_TOKENS}), shift=True).backward()
    hidden, weight, labels = inputs({_TOKENS})
    reset_rss_peak()
    before = proc_status_bytes("VmRSS")
    chunked_cross_entropy(hidden, weight, labels, shift=True).backward()
    print(json.dumps(proc_status_bytes("VmHWM") - before))
    """
)


def _played_loss_bytes() -> int:
    """The loss's forward and backward on fake tensors: the most they hold beyond their inputs."""
    counter = LiveBytes()
    with FakeTensorMode(), counter:  # type: ignore[no-untyped-call]
        hidden = torch.randn(1, _TOKENS, _WIDTH, requires_grad=True)
        weight = torch.randn(_VOCAB, _WIDTH, requires_grad=True)
        labels = torch.randint(0, _VOCAB, (1, _TOKENS))
        start = counter.peak = counter.now
        chunked_cross_entropy(hidden, weight, labels, shift=True).backward()  # type: ignore[no-untyped-call]
    return counter.peak - start


@pytest.mark.subprocess
def test_the_chunked_loss_holds_what_its_play_on_fake_tensors_counts() -> None:
    """One chunk's logits and the head's gradient, nothing hidden: a loss that ran ``logsumexp``
    over a chunk (a copy of it inside the kernel) and kept the last chunk's logits while making the
    next held 32 MiB more than the play counted, and 64 MiB more than now."""
    played = _played_loss_bytes()
    measured = bytes_measured_in_a_child(_MEASURE)
    assert abs(played - measured) / measured < 0.03, (played, measured)
    assert played < 1.5 * _VOCAB * _WIDTH * 4 + 32 * 2**20  # the head's gradient and one chunk's logits


@pytest.mark.torch
def test_a_tiny_causal_lm_under_the_chunked_loss_peaks_where_its_play_predicts(tmp_path: Path) -> None:
    """A real run without recompute at batch 2 anchors the play; the real run at batch 8 with the
    chunked loss then peaks within 2% of the prediction (the loss's four chunks at the peak: a
    chunk's scratch the play missed was 4% of this peak)."""
    options = {"size": "tiny", "seq_len": 128, "vocab_size": _VOCAB, "num_hidden_layers": 2}
    settings = RunSettings(target=parse_runnable("hf:llama"), options=options, device="cpu", steps=2, runs_dir=tmp_path)
    journal = Journal.in_folder(tmp_path)
    anchor = run_torch_trial(settings, 2, policy(), journal=journal)
    chunked = run_torch_trial(settings, 8, policy(_CHUNKED), journal=journal)
    recipe = load_hf_recipe("hf:llama", options)
    anchored = float(anchor.memory.device_peak or 0)
    model = SimulatedPeak(recipe, anchor_batch=2, anchor_bytes=anchored, scanned=scan_recipe(recipe, 2, timed=False))
    measured = float(chunked.memory.device_peak or 0)
    predicted = model.predict(policy(_CHUNKED), 8)
    assert abs(predicted - measured) / measured < 0.02, (predicted, measured)
