"""Checkers for the exercises of the encoder-decoder chapter."""

from __future__ import annotations

import torch

from ._common import _TODO, CORRECT, _measured, _shape

__all__ = ["check_shift", "check_greedy", "check_loss_positions", "check_memory_ablation"]


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


@torch.no_grad()
def _teacher_forced_accuracy(model, src: torch.Tensor, tgt: torch.Tensor, ablate: bool) -> float:
    """Fraction of non-pad target tokens predicted right under teacher forcing; ablate zeroes the encoder output."""
    src_mask = model.make_src_mask(src)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    if ablate:
        memory = torch.zeros_like(memory)
    logits = model.decode(tgt[:, :-1], memory, src_mask)  # (B, T-1, V)
    labels = tgt[:, 1:]  # (B, T-1)
    real = labels != model.pad_id
    return float((logits.argmax(-1) == labels)[real].float().mean())


def check_memory_ablation(fn, model, src: torch.Tensor, tgt: torch.Tensor) -> str:
    """Experiment: fn(model, src, tgt, ablate) measures teacher-forced token accuracy.

    With ablate=True the encoder output (memory) is replaced by zeros.

    The checker measures both itself and compares.
    """
    device = next(model.parameters()).device
    src, tgt = src.to(device), tgt.to(device)
    model.eval()
    for ablate in (False, True):
        measured = _measured("the accuracy", fn(model, src, tgt, ablate))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = _teacher_forced_accuracy(model, src, tgt, ablate)
        if abs(value - want) > 1e-6:
            if ablate and abs(value - _teacher_forced_accuracy(model, src, tgt, False)) < 1e-6:
                return "With ablate=True nothing changed: replace the encoder's output (memory) by zeros."
            return (
                f"With ablate={ablate} expected a token accuracy of {want:.4f}, got {value:.4f}. Feed tgt[:, :-1], "
                "compare the argmax with tgt[:, 1:], and count only positions that are not padding."
            )
    return CORRECT
