"""Checkers for the exercises of chapter 08 the full Transformer."""

from __future__ import annotations

import torch

from ._common import _TODO, CORRECT, _shape

__all__ = ["check_shift", "check_greedy", "check_loss_positions"]


def check_shift(fn) -> str:
    """fn(tgt (B, T)) must return (decoder_input, labels) = (tgt[:, :-1], tgt[:, 1:])."""
    tgt = torch.tensor([[1, 7, 8, 2, 0], [1, 9, 2, 0, 0]])
    result = fn(tgt)
    if result is None:
        return _TODO
    inp, lab = result
    if torch.equal(inp, tgt) or torch.equal(lab, tgt):
        return "One side is not shifted: the decoder input drops the last token, the labels drop the first."
    if torch.equal(inp, tgt[:, 1:]) and torch.equal(lab, tgt[:, :-1]):
        return "Swapped: the decoder sees <bos> first, so its input is tgt[:, :-1]."
    ok = torch.equal(inp, tgt[:, :-1]) and torch.equal(lab, tgt[:, 1:])
    return CORRECT if ok else "Not quite: decoder input tgt[:, :-1], labels tgt[:, 1:]."


def check_greedy(fn, model, src_tok, tgt_tok, numbers=("00008", "00305", "61718")) -> str:
    """fn(model, src (1, S), bos_id, eos_id, max_new_tokens) must match model.greedy_decode."""
    device = next(model.parameters()).device
    for number in numbers:
        src = torch.tensor([src_tok.encode(number)], device=device)
        with torch.no_grad():
            result = fn(model, src, tgt_tok.bos_id, tgt_tok.eos_id, 60)
            if result is None:
                return _TODO
            want = model.greedy_decode(src, tgt_tok.bos_id, tgt_tok.eos_id, 60)
        if result[0, 0].item() != tgt_tok.bos_id:
            return "Start the output with <bos>."
        if tgt_tok.decode(result[0]) != tgt_tok.decode(want[0]):
            return f"For {number}: expected {tgt_tok.decode(want[0])!r}, got {tgt_tok.decode(result[0])!r}."
        if tgt_tok.eos_id in result[0, :-1].tolist():
            return "Stop as soon as <eos> is produced."
    return CORRECT


def check_loss_positions(fn) -> str:
    """fn(labels (B, T), pad_id) must return the bool mask of positions the loss counts."""
    labels = torch.tensor([[7, 8, 2, 0, 0], [9, 2, 0, 0, 0]])
    result = fn(labels, 0)
    if result is None:
        return _TODO
    want = labels != 0
    if not isinstance(result, torch.Tensor) or result.shape != labels.shape or result.dtype != torch.bool:
        return f"Expected a bool tensor of shape {tuple(labels.shape)}, got {_shape(result)}."
    if torch.equal(result, ~want):
        return "Reversed: the loss counts the real tokens (True), not the padding."
    if torch.equal(result, want & (labels != 2)):
        return "The <eos> label is counted too: the model must learn when to stop."
    return CORRECT if torch.equal(result, want) else "Not quite: every position whose label is not pad_id."
