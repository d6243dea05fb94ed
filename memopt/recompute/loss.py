"""Cross-entropy over a large vocabulary without its logits: the loss in chunks of tokens.

A causal LM's head makes logits of batch × sequence × vocabulary, in fp32 for the loss, and the
loss keeps several copies of that size (the log-softmax for backward, its gradient, the logits the
model returns). ``chunked_cross_entropy`` computes the head and the loss a chunk of tokens at a
time and, as Liger's fused linear cross-entropy does, each chunk's gradients with them: forward
keeps no logits, only the gradients of the head's input and weight, which backward scales. No
matmul runs twice, so it costs what the unchunked loss costs, in smaller matmuls::

    from memopt.recompute.loss import chunked_cross_entropy

    hidden = model.model(input_ids).last_hidden_state          # the decoder, without the head
    loss = chunked_cross_entropy(hidden, model.lm_head.weight, labels, shift=True)

The loss equals ``cross_entropy(hidden @ weight.T + bias, labels, ignore_index=-100)`` (mean over
the tokens not ignored) and so do its gradients, within float rounding, not bitwise: the sum
over tokens runs per chunk (the weight's gradient is a sum of chunks' products), the mean's
division comes after the matmuls rather than before, and a chunk's matmul may block its sums
differently from the whole one's (tested: fp32 gradients within 1e-5 relative of the unchunked loss's).

The policy plan ``MODULE: chunked-loss`` (``memopt.recompute.apply``) puts it on a Hugging Face
causal LM whose output head is ``MODULE``: called with ``labels``, the model runs its decoder
(``base_model``) and this loss over its head, and returns the loss and the decoder's other
outputs but no logits. Only torch and the standard library are imported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from memopt.recompute.policy import RecomputePolicyError

__all__ = [
    "CHUNK_BYTES",
    "IGNORE_INDEX",
    "CausalLMLoss",
    "causal_lm_head",
    "chunked_cross_entropy",
    "check_loss_head",
    "forward_with_chunked_loss",
]

IGNORE_INDEX = -100  # the label Hugging Face's losses skip (padding)
# One chunk's fp32 logits: small beside a large vocabulary's whole logits, large enough that each
# chunk's matmul still runs at full speed (at a 32k vocabulary, 256 tokens a chunk).
CHUNK_BYTES = 32 * 2**20
# Config fields of heads that scale or cap their logits before the loss: a plain linear head it is not.
_SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    shift: bool = False,
    ignore_index: int = IGNORE_INDEX,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """The mean cross-entropy of the logits ``hidden @ weight.T + bias`` (in fp32) against ``labels``,
    made a chunk of tokens at a time, never all at once.

    ``hidden``: ``(..., hidden_size)``; ``labels``: ``hidden``'s shape without the last dimension.
    ``shift``: a causal LM's loss, where the token at ``t`` predicts the label at ``t + 1``.
    ``num_items_in_batch``: divide the summed loss by this instead of the tokens not ignored (as
    Hugging Face's Trainer does under gradient accumulation). ``chunk_tokens``: tokens a chunk
    (default: as many as make ``CHUNK_BYTES`` of fp32 logits)."""
    if shift:
        hidden, labels = hidden[..., :-1, :], labels[..., 1:]
    tokens = hidden.reshape(-1, hidden.shape[-1])
    targets = labels.reshape(-1).to(tokens.device)
    if targets.shape[0] != tokens.shape[0]:
        raise ValueError(f"{targets.shape[0]} labels for {tokens.shape[0]} tokens")
    size = chunk_tokens or max(1, CHUNK_BYTES // (4 * weight.shape[0]))
    divisor = (targets != ignore_index).sum() if num_items_in_batch is None else num_items_in_batch
    loss: torch.Tensor = _LinearCrossEntropy.apply(tokens, weight, bias, targets, ignore_index, size)  # type: ignore[no-untyped-call]
    return loss / divisor


def _chunk(
    chunk: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    ignore_index: int,
    grad_chunk: torch.Tensor,
    grad_weight: torch.Tensor,
    grad_bias: torch.Tensor | None,
) -> torch.Tensor:
    """One chunk's summed cross-entropy; its gradients written into ``grad_chunk`` and added to
    ``grad_weight`` and ``grad_bias``. Its logits are the one tensor of a chunk's size it makes and
    every op on them runs in place, so a chunk holds its logits and nothing beside them: no kernel's
    hidden scratch (``logsumexp`` makes a copy of its input inside, which a play on fake tensors
    never sees), and, returning, none of its tensors live on while the next chunk makes its logits."""
    logits = F.linear(chunk, weight, bias).float()
    # No boolean indexing: fake tensors (memopt's simulated steps) play these ops too.
    kept = (target != ignore_index).unsqueeze(1)
    index = target.clamp(min=0).unsqueeze(1)
    picked = logits.gather(1, index)
    top = logits.amax(dim=1, keepdim=True)
    sums = logits.sub_(top).exp_().sum(dim=1, keepdim=True)
    loss = ((sums.log() + top - picked) * kept).sum()
    # d(loss)/d(logits) = softmax - one-hot, nothing on the ignored tokens.
    grad = logits.div_(sums).scatter_add_(1, index, -kept.to(logits.dtype)).mul_(kept).to(chunk.dtype)
    torch.mm(grad, weight, out=grad_chunk)
    grad_weight.addmm_(grad.t(), chunk)
    if grad_bias is not None:
        grad_bias += grad.sum(0)
    return loss


class _LinearCrossEntropy(torch.autograd.Function):
    """The summed cross-entropy of ``tokens @ weight.T + bias``, chunk by chunk, its gradients made in
    forward: each chunk's logits give its share of the gradients at once and are freed, so backward
    only scales what forward made (no logits rerun, no matmul more than without chunks)."""

    @staticmethod
    def forward(
        ctx: Any,
        tokens: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        ignore_index: int,
        size: int,
    ) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=tokens.device)
        grad_tokens = torch.empty_like(tokens)
        grad_weight = torch.zeros_like(weight)
        grad_bias = None if bias is None else torch.zeros_like(bias)
        for start in range(0, tokens.shape[0], size):
            rows = slice(start, start + size)
            total += _chunk(
                tokens[rows], weight, bias, targets[rows], ignore_index, grad_tokens[rows], grad_weight, grad_bias
            )
        ctx.save_for_backward(grad_tokens, grad_weight, grad_bias)
        return total

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_tokens, grad_weight, grad_bias = ctx.saved_tensors
        return (
            grad_tokens * grad_output.to(grad_tokens.dtype),
            grad_weight * grad_output.to(grad_weight.dtype),
            None if grad_bias is None else grad_bias * grad_output.to(grad_bias.dtype),
            None,
            None,
            None,
        )


def _keywords(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by name (``input_ids`` given by position too), ``**kwargs`` spread out."""
    named = dict(signature.bind(*args, **kwargs).arguments)
    for name, parameter in signature.parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(named.pop(name, {}))
    return named


class CausalLMLoss(dict[str, Any]):
    """What a causal LM under ``chunked-loss`` returns: its loss, no logits, the decoder's other
    outputs; read as a mapping (``out["loss"]``) or by attribute (``out.loss``), as a Hugging Face
    ``ModelOutput``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def causal_lm_head(model: nn.Module) -> str | None:
    """The path of ``model``'s output head where the chunked loss can replace its logits and loss:
    a Hugging Face causal LM (``get_output_embeddings``, ``base_model``) whose head is a plain
    linear layer (no logit scaling or capping in its config); None otherwise."""
    try:
        return _causal_lm_head(model)
    except RecomputePolicyError:
        return None


def _causal_lm_head(model: nn.Module) -> str:
    output_embeddings = getattr(model, "get_output_embeddings", None)
    head = output_embeddings() if callable(output_embeddings) else None
    base = getattr(model, "base_model", None)
    if not isinstance(head, nn.Linear) or not isinstance(base, nn.Module) or base is model:
        raise RecomputePolicyError(
            "chunked-loss goes on a Hugging Face causal LM: a model with a linear output head "
            "(get_output_embeddings) over a decoder (base_model)"
        )
    config = getattr(model, "config", None)
    scaled = [name for name in _SCALED_LOGITS if getattr(config, name, None) not in (None, 1, 1.0)]
    if scaled:
        raise RecomputePolicyError(
            f"chunked-loss: the model's head scales its logits ({scaled[0]}), which it leaves out"
        )
    return str(next(path for path, module in model.named_modules() if module is head))


def check_loss_head(model: nn.Module, path: str) -> None:
    """Refuse a chunked-loss plan anywhere but on ``model``'s causal-LM output head."""
    head_path = _causal_lm_head(model)
    if head_path != path:
        raise RecomputePolicyError(f"chunked-loss goes on the model's output head, {head_path}, not {path}")


def forward_with_chunked_loss(
    model: nn.Module, path: str, forward: Callable[..., Any], signature: inspect.Signature, args: Any, kwargs: Any
) -> Any:
    """``model``'s forward (``forward``, of ``signature``) with the chunked loss over its head at
    ``path`` where it is called with ``labels``; its own forward otherwise (generation,
    evaluation, logits asked for)."""
    head = model.get_submodule(path)
    assert isinstance(head, nn.Linear)
    named = _keywords(signature, args, kwargs)
    labels = named.pop("labels", None)
    if labels is None or named.get("return_dict") is False or named.pop("num_logits_to_keep", 0):
        return forward(*args, **kwargs)  # no loss asked for, or the logits are
    items = named.pop("num_items_in_batch", None)
    outputs = model.base_model(**named)
    loss = chunked_cross_entropy(outputs[0], head.weight, labels, head.bias, shift=True, num_items_in_batch=items)
    rest = {key: value for key, value in outputs.items() if key != "last_hidden_state"}
    return CausalLMLoss(loss=loss, logits=None, **rest)
