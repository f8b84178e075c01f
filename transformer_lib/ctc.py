"""Connectionist temporal classification (CTC, Graves et al., 2006), written out: the loss that lets a model read a
label sequence from frames without knowing which frame holds which label, as wav2vec 2.0's fine-tuning does.

- A model gives one distribution per frame over C symbols, one of them the **blank** ("no label here"). A **path**
  picks one symbol per frame; it **collapses** to a label sequence by merging repeated symbols, then dropping
  blanks (`ctc_collapse`): "aa-ab-" becomes "aab". So two equal labels in a row need a blank between them.
- The CTC probability of a target is the sum of the probabilities of all the paths that collapse to it. There are
  too many paths to list, so `ctc_loss_by_hand` sums them with the forward (alpha) recursion over the **extended
  target**: the labels with a blank before each and one at the end, 2S + 1 states for S labels. A path at state s
  moves on to s (stay), s + 1 (next state) or s + 2 (skip a blank), the skip only when it lands on a label that
  differs from the one two states back. The recursion runs in log space, a logsumexp where the formula has a sum.
- `ctc_loss_by_hand` takes `torch.nn.functional.ctc_loss`'s arguments and conventions: log_probs (T, B, C), padded
  or concatenated targets, per-sequence lengths, the same three reductions ("mean" divides each sequence's loss by
  its target length, at least 1, before the batch mean), inf for a target no path reaches (it needs one frame per
  label plus one per pair of equal neighbours), and `zero_infinity`. `tests/unit/test_ctc.py` checks values and
  gradients against PyTorch's and the probability against a sum over every path on small cases.
- `greedy_ctc_decode` is the best-path decoder: the most likely symbol per frame, then the collapse.
- `ctc_alignment_count` counts the paths that collapse to a target, with exact integers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ctc_collapse", "ctc_alignment_count", "ctc_loss_by_hand", "greedy_ctc_decode"]

_REDUCTIONS = ("mean", "sum", "none")


# ---- paths and their labels ----------------------------------------------------------------------


def ctc_collapse(path: Sequence[int], blank: int = 0) -> list[int]:
    """The label sequence a path of symbols stands for: merge runs of one symbol, then drop the blanks."""
    labels, previous = [], None
    for symbol in (int(s) for s in path):
        if symbol != previous and symbol != blank:
            labels.append(symbol)
        previous = symbol
    return labels


def ctc_alignment_count(target: Sequence[int], num_frames: int) -> int:
    """How many paths of `num_frames` symbols collapse to `target` (0 when none fits), counted exactly.

    The alpha recursion of `ctc_loss_by_hand` with every probability 1 and Python's integers in place of
    log-probabilities. Only which neighbouring labels are equal matters, not which symbol is the blank.
    """
    target = [int(label) for label in target]
    if not isinstance(num_frames, int) or num_frames < 0:
        raise ValueError(f"num_frames must be an int >= 0, got {num_frames!r}")
    extended = [None]  # the blank states are None: the labels with a blank before each and one at the end
    for label in target:
        extended += [label, None]
    counts = [1] + [0] * (len(extended) - 1)  # before the first frame: only the start of state 0
    for _ in range(num_frames):
        counts = [
            counts[s]
            + (counts[s - 1] if s >= 1 else 0)
            + (counts[s - 2] if s >= 2 and extended[s] is not None and extended[s] != extended[s - 2] else 0)
            for s in range(len(extended))
        ]
    return counts[-1] + (counts[-2] if target else 0)


# ---- the loss ------------------------------------------------------------------------------------


def _lengths(lengths, name: str, batch: int, unbatched: bool, device: torch.device) -> torch.Tensor:
    """Lengths as a (B,) int64 tensor, from a tensor, a sequence or (unbatched) one int."""
    if isinstance(lengths, torch.Tensor):
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {lengths.dtype}")
        lengths = lengths.to(device=device, dtype=torch.long).reshape(-1)  # (B,)
    else:
        items = [lengths] if unbatched and not isinstance(lengths, Sequence) else list(lengths)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in items):
            raise TypeError(f"{name} must hold ints, got {items!r}")
        lengths = torch.tensor(items, dtype=torch.long, device=device)  # (B,)
    if lengths.numel() != batch:
        raise ValueError(f"{name} must have one length per sequence, {batch}, got {lengths.numel()}")
    if bool((lengths < 0).any()):
        raise ValueError(f"{name} must be >= 0, got {lengths.tolist()}")
    return lengths


def _padded_targets(targets: torch.Tensor, target_lengths: torch.Tensor, unbatched: bool) -> torch.Tensor:
    """Targets as a (B, S) tensor of labels, from the padded (B, S) form or the concatenated (sum of lengths,) one."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a torch.Tensor of labels, got {type(targets).__name__}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer labels, got dtype {targets.dtype}")
    targets = targets.to(device=target_lengths.device, dtype=torch.long)
    B = target_lengths.numel()
    if unbatched:
        if targets.dim() != 1:
            raise ValueError(f"unbatched log_probs (T, C) take targets of shape (S,), got {tuple(targets.shape)}")
        targets = targets.unsqueeze(0)  # (1, S)
    elif targets.dim() == 1:  # concatenated: sequence b is the next target_lengths[b] entries
        total = int(target_lengths.sum())
        if targets.numel() != total:
            raise ValueError(
                f"concatenated targets must have sum(target_lengths) = {total} entries, got {targets.numel()}"
            )
        S = int(target_lengths.max()) if B else 0
        padded = targets.new_zeros(B, S)  # (B, S)
        for b, piece in enumerate(torch.split(targets, target_lengths.tolist())):
            padded[b, : piece.numel()] = piece
        return padded
    elif targets.dim() != 2 or targets.shape[0] != B:
        raise ValueError(f"targets must have shape (B, S) = ({B}, S) or (sum of lengths,), got {tuple(targets.shape)}")
    if bool((target_lengths > targets.shape[1]).any()):
        raise ValueError(
            f"target_lengths must be at most the targets' width S = {targets.shape[1]}, got {target_lengths.tolist()}"
        )
    return targets


def _logsumexp(*terms: torch.Tensor) -> torch.Tensor:
    """log(sum(exp(terms))) elementwise, -inf where every term is -inf, with gradients that stay finite there.

    torch.logsumexp gives NaN gradients where all its inputs are -inf (states no path has reached yet), even
    when the upstream gradient is 0, so both the shift and the sum are made safe before they are used.
    """
    x = torch.stack(terms)  # (k, ...)
    top = x.amax(dim=0).detach()  # (...): the shift changes no value, so no gradient goes through it
    alive = torch.isfinite(top)
    shift = torch.where(alive, top, torch.zeros_like(top))
    total = torch.exp(x - shift).sum(dim=0)  # (...)
    total = torch.where(alive, total, torch.ones_like(total))  # log(1) = 0 where nothing is alive, never log(0)
    return torch.where(alive, shift + torch.log(total), torch.full_like(total, float("-inf")))


def ctc_loss_by_hand(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> torch.Tensor:
    """CTC's negative log-likelihood by the forward recursion, as `torch.nn.functional.ctc_loss` computes it.

    log_probs (T, B, C) log-probabilities (log_softmax over C), or (T, C) for one sequence; targets (B, S) labels
    padded at the end, or every sequence's labels concatenated, (sum of target_lengths,); input_lengths and
    target_lengths (B,) tensors or sequences of ints (one int each when unbatched). Labels lie in [0, C) and are
    never `blank`; what lies past a target's length is ignored. Returns the (B,) losses for reduction="none"
    (() when unbatched), else a scalar: "sum" adds them, "mean" divides each by its target length (at least 1)
    and averages. A target that no path of its input length can produce has loss inf; `zero_infinity=True` gives
    0 there, with zero gradients. Gradients reach log_probs through ordinary autograd: they equal PyTorch's once
    both go through log_softmax (PyTorch's own gradient with respect to log_probs adds exp(log_probs), which
    log_softmax removes), and where PyTorch's gradient of an infinite loss is NaN this one is 0.
    """
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        got = log_probs.dtype if isinstance(log_probs, torch.Tensor) else type(log_probs).__name__
        raise TypeError(f"log_probs must be a float tensor of log-probabilities, got {got}")
    if log_probs.dim() not in (2, 3):
        raise ValueError(f"log_probs must have shape (T, B, C) or (T, C), got {tuple(log_probs.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)  # (T, 1, C)
    T, B, C = log_probs.shape
    if not isinstance(blank, int) or isinstance(blank, bool) or not 0 <= blank < C:
        raise ValueError(f"blank must be a class index in [0, C) = [0, {C}), got {blank!r}")
    device = log_probs.device
    input_lengths = _lengths(input_lengths, "input_lengths", B, unbatched, device)  # (B,)
    target_lengths = _lengths(target_lengths, "target_lengths", B, unbatched, device)  # (B,)
    if bool((input_lengths > T).any()):
        raise ValueError(f"input_lengths must be at most log_probs' T = {T}, got {input_lengths.tolist()}")
    targets = _padded_targets(targets, target_lengths, unbatched)  # (B, S)
    S = targets.shape[1]
    inside = torch.arange(S, device=device) < target_lengths[:, None]  # (B, S): the labels, not the padding
    labels = targets[inside]
    if labels.numel() and bool(((labels < 0) | (labels >= C)).any()):
        raise ValueError(f"target labels must lie in [0, C) = [0, {C}), got {sorted(set(labels.tolist()))}")
    if bool((labels == blank).any()):
        raise ValueError(f"target labels must not be the blank ({blank}); the blank is no label")
    targets = torch.where(inside, targets, torch.full_like(targets, blank))  # (B, S): padding read as blanks

    # the extended target: a blank, then each label followed by a blank: 2S + 1 states
    extended = torch.full((B, 2 * S + 1), blank, dtype=torch.long, device=device)  # (B, 2S+1)
    extended[:, 1::2] = targets
    # the skip s-2 -> s: only onto a label, and only when it differs from the label two states back
    skip = torch.zeros_like(extended, dtype=torch.bool)  # (B, 2S+1)
    skip[:, 2:] = (extended[:, 2:] != blank) & (extended[:, 2:] != extended[:, :-2])
    # each frame's log-probability of each state's symbol
    emit = log_probs.gather(2, extended.unsqueeze(0).expand(T, B, 2 * S + 1))  # (T, B, 2S+1)

    neg_inf = torch.tensor(float("-inf"), dtype=log_probs.dtype, device=device)
    # alpha before the first frame: the path stands at the start of state 0, log 1 = 0; every other state -inf
    alpha = torch.full((B, 2 * S + 1), float("-inf"), dtype=log_probs.dtype, device=device)  # (B, 2S+1)
    alpha[:, 0] = 0.0
    for t in range(T):
        stay = alpha
        shifted = torch.cat([neg_inf.expand(B, 2), alpha], dim=1)  # (B, 2S+3): two -inf states in front
        step = shifted[:, 1:-1]  # (B, 2S+1): alpha of s - 1
        jump = shifted[:, :-2]  # (B, 2S+1): alpha of s - 2
        jump = torch.where(skip, jump, neg_inf)
        new = _logsumexp(stay, step, jump) + emit[t]  # (B, 2S+1)
        running = (t < input_lengths)[:, None]  # (B, 1): a sequence's alpha stops at its last frame
        alpha = torch.where(running, new, alpha)

    # a path ends on the last label or on the blank after it: states 2L - 1 and 2L
    last = alpha.gather(1, (2 * target_lengths)[:, None]).squeeze(1)  # (B,)
    before = alpha.gather(1, (2 * target_lengths - 1).clamp(min=0)[:, None]).squeeze(1)  # (B,)
    before = torch.where(target_lengths > 0, before, neg_inf)  # an empty target has only the one state
    # (with no frame at all alpha is still its start: the empty target has loss 0, any other inf)
    losses = -_logsumexp(last, before)  # (B,)
    if zero_infinity:
        losses = torch.where(torch.isinf(losses), torch.zeros_like(losses), losses)

    if reduction == "none":
        return losses.squeeze(0) if unbatched else losses  # (B,), or () unbatched
    if reduction == "sum":
        return losses.sum()
    return (losses / target_lengths.clamp(min=1).to(losses.dtype)).mean()


# ---- decoding ------------------------------------------------------------------------------------


def greedy_ctc_decode(log_probs: torch.Tensor, input_lengths=None, blank: int = 0) -> list[list[int]]:
    """Best-path decoding: the most likely symbol in each frame, repeats merged, blanks dropped.

    log_probs (T, B, C) (probabilities or logits give the same answer); input_lengths (B,) frames to read per
    sequence, all T when None. Returns B label lists. The best path need not be the most likely label sequence,
    which sums over many paths; it is the usual cheap approximation.
    """
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        got = log_probs.dtype if isinstance(log_probs, torch.Tensor) else type(log_probs).__name__
        raise TypeError(f"log_probs must be a float tensor of shape (T, B, C), got {got}")
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must have shape (T, B, C), got {tuple(log_probs.shape)}")
    T, B, C = log_probs.shape
    if not isinstance(blank, int) or isinstance(blank, bool) or not 0 <= blank < C:
        raise ValueError(f"blank must be a class index in [0, C) = [0, {C}), got {blank!r}")
    if input_lengths is None:
        input_lengths = [T] * B
    lengths = _lengths(input_lengths, "input_lengths", B, False, torch.device("cpu")).tolist()
    if any(n > T for n in lengths):
        raise ValueError(f"input_lengths must be at most log_probs' T = {T}, got {lengths}")
    best = log_probs.argmax(dim=2).T.cpu()  # (B, T)
    return [ctc_collapse(best[b, : lengths[b]].tolist(), blank) for b in range(B)]
