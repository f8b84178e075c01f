"""Checkers for the exercises of the encoder chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..masks import padding_mask
from ..training import classification_accuracy
from ._common import _TODO, CORRECT, _close, _measured, _shape

__all__ = ["check_mean_pool", "check_pre_ln_layer", "check_first_pool", "check_head_ablation"]


def check_mean_pool(fn) -> str:
    """fn(hidden (B, S, d), mask (B, 1, 1, S)) must average the real positions, (B, d)."""
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(3))
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]), 0)
    result = fn(hidden, mask)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4):
        return f"Expected shape (B, d) = (3, 4), got {_shape(result)}."
    if _close(result, hidden.mean(1)):
        return "The padding is averaged in: weight positions by the mask."
    if _close(result, (hidden * mask[:, 0, 0, :, None]).sum(1) / 5):
        return "Almost: divide by the number of real tokens, not by S."
    want = torch.stack([hidden[0].mean(0), hidden[1, :2].mean(0), hidden[2, 0]])
    return CORRECT if _close(result, want) else "Not quite: sum the real positions and divide by their count."


def check_pre_ln_layer(fn, make_layer: Callable[[int, int, int], torch.nn.Module]) -> str:
    """fn(layer, x, mask) must run a layer's parts in pre-LN order; make_layer builds the learner's layer class."""
    with torch.random.fork_rng():  # building layers draws weights from torch's global generator:
        torch.manual_seed(4)  # seed it for a repeatable check, then give the learner's state back
        mine = make_layer(16, 2, 32).eval()
        reference = EncoderLayer(d_model=16, num_heads=2, d_ff=32, dropout=0.0, norm_first=True).eval()
    reference.load_state_dict(mine.state_dict())  # the same names: self_attn, norm1, feed_forward, norm2
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4))
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), 0)
    with torch.no_grad():
        result = fn(mine, x, mask)
        if result is None:
            return _TODO
        if _close(result, mine(x, mask)):
            return "That is the post-LN order: normalise before each sublayer instead."
        if _close(result, reference(x, mask)):
            return CORRECT
    return "Not quite: z = x + attn(norm1(x)); out = z + ff(norm2(z))."


def check_first_pool(fn) -> str:
    """fn(hidden (B, S, d)) must return the vector at position 0 of each sequence, (B, d)."""
    hidden = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(8))
    result = fn(hidden)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4):
        return f"Expected shape (B, d) = (3, 4), got {_shape(result)}."
    if _close(result, hidden[:, -1]):
        return "That is the last position. The <bos> / [CLS] token sits at position 0."
    if _close(result, hidden.mean(1)):
        return "That is mean pooling. Take position 0 only."
    return CORRECT if _close(result, hidden[:, 0]) else "Not quite: index hidden[:, 0]."


def _accuracy_without_head(model, x, y, layer: int, head: int) -> float:
    """Accuracy of an encoder-only model with one self-attention head's output zeroed."""
    attn = model.encoder.layers[layer].self_attn
    d_k = attn.d_model // attn.num_heads
    weight = attn.out_proj.weight  # (d_model, d_model): column block `head` reads that head's output
    saved = weight.detach().clone()
    with torch.no_grad():
        weight[:, head * d_k : (head + 1) * d_k] = 0.0
        accuracy = classification_accuracy(model, x, y)
        weight.copy_(saved)
    return accuracy


def check_head_ablation(fn, model, x: torch.Tensor, y: torch.Tensor) -> str:
    """Experiment: fn(model, x, y, layer, head) measures the accuracy with that head switched off.

    The checker switches the same heads off itself, compares the accuracies, and checks that the
    model is left as it was found.
    """
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    before = [p.detach().clone() for p in model.parameters()]
    model.eval()
    for layer, head in ((0, 0), (len(model.encoder.layers) - 1, model.encoder.layers[-1].self_attn.num_heads - 1)):
        got = fn(model, x, y, layer, head)
        if got is None:
            return _TODO
        if any(not torch.equal(a, b) for a, b in zip(before, model.parameters())):
            for p, b in zip(model.parameters(), before):
                with torch.no_grad():
                    p.copy_(b)
            return "Your experiment changed the model's weights: put the head back after measuring."
        measured = _measured("the accuracy", got)
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = _accuracy_without_head(model, x, y, layer, head)
        if abs(value - want) > 1.5 / len(y):  # one borderline example may round the other way
            full = classification_accuracy(model, x, y)
            if abs(value - full) < 1e-9:
                return f"That is the accuracy with every head on ({full:.4f}): zero the head's output first."
            return (
                f"Layer {layer}, head {head}: expected accuracy {want:.4f} with the head off, got {value:.4f}. "
                "Zero the head's d_k columns of out_proj.weight, the part that reads its output."
            )
    return CORRECT
