"""tl.ctc, CTC written out: its losses and gradients equal torch.nn.functional.ctc_loss's in float64, its probability
equals a sum over every path on tiny cases, the best-path decoder merges and drops as it should, and bad input gets
a clear error."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.ctc import ctc_alignment_count, ctc_collapse, ctc_loss_by_hand, greedy_ctc_decode

TOL = {"rtol": 1e-10, "atol": 1e-10}


def _case(seed: int, T: int, C: int, target_lengths: list[int], input_lengths: list[int], repeat: bool = False):
    """Random logits (T, B, C) in float64 and padded targets (B, S) with labels in [1, C); padding is -1."""
    g = torch.Generator().manual_seed(seed)
    B, S = len(target_lengths), max(max(target_lengths), 1)
    logits = torch.randn(T, B, C, generator=g, dtype=torch.float64) * 2
    targets = torch.randint(1, C, (B, S), generator=g)
    if repeat:  # equal neighbours, which need a blank between them
        targets[:, 1::2] = targets[:, 0::2][:, : targets[:, 1::2].shape[1]]
    for b, n in enumerate(target_lengths):
        targets[b, n:] = -1
    return logits, targets, torch.tensor(input_lengths), torch.tensor(target_lengths)


def _needed_frames(target: list[int]) -> int:
    """The fewest frames a path to `target` needs: one per label, one more per pair of equal neighbours."""
    return len(target) + sum(a == b for a, b in itertools.pairwise(target))


CASES = [  # seed, T, C, target lengths, input lengths, repeated labels
    (0, 8, 5, [3, 1, 2], [8, 6, 3], False),
    (1, 12, 6, [4, 4, 1, 2, 3], [12, 11, 1, 5, 7], True),
    (2, 5, 3, [1, 2], [5, 4], False),
    (3, 16, 10, [6, 5, 7, 1], [16, 9, 14, 2], True),
    (4, 1, 4, [1], [1], False),
    (5, 9, 4, [2, 3, 1], [4, 6, 9], True),
]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("seed", "T", "C", "target_lengths", "input_lengths", "repeat"), CASES)
def test_the_loss_is_pytorchs(seed, T, C, target_lengths, input_lengths, repeat, reduction):
    logits, targets, il, tl_ = _case(seed, T, C, target_lengths, input_lengths, repeat)
    log_probs = logits.log_softmax(-1)
    theirs = F.ctc_loss(log_probs, targets.clamp(min=0), il, tl_, reduction=reduction)
    ours = ctc_loss_by_hand(log_probs, targets, il, tl_, reduction=reduction)
    assert ours.shape == theirs.shape
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, theirs, **TOL)


def test_repeated_labels_exactly_fitting_and_infeasible_targets():
    """[3, 3] needs 3 frames, [1, 2] needs 2: exactly fitting gives a finite loss, one frame fewer gives inf."""
    logits = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    log_probs = logits.log_softmax(-1)
    targets = torch.tensor([[3, 3, 0], [3, 3, 0], [1, 2, 0], [1, 2, 0], [2, 2, 2], [4, 1, 4]])
    target_lengths = torch.tensor([2, 2, 2, 2, 3, 3])
    input_lengths = torch.tensor([3, 2, 2, 1, 4, 3])
    assert [_needed_frames(t[:n].tolist()) for t, n in zip(targets, target_lengths, strict=True)] == [3, 3, 2, 2, 5, 3]
    for zero_infinity in (False, True):
        for reduction in ("none", "sum", "mean"):
            args = (log_probs, targets, input_lengths, target_lengths)
            ours = ctc_loss_by_hand(*args, reduction=reduction, zero_infinity=zero_infinity)
            theirs = F.ctc_loss(*args, reduction=reduction, zero_infinity=zero_infinity)
            torch.testing.assert_close(ours, theirs, **TOL)
    losses = ctc_loss_by_hand(log_probs, targets, input_lengths, target_lengths, reduction="none")
    assert torch.isinf(losses).tolist() == [False, True, False, True, True, False]
    assert (losses[~torch.isinf(losses)] > 0).all()


def test_empty_targets_and_inputs_of_no_frame():
    """An empty target costs every frame's blank; no frame at all reaches only the empty target."""
    log_probs = torch.randn(3, 3, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64).log_softmax(-1)
    targets, il, tl_ = torch.tensor([[1], [1], [2]]), torch.tensor([3, 0, 0]), torch.tensor([0, 0, 1])
    ours = ctc_loss_by_hand(log_probs, targets, il, tl_, reduction="none")
    torch.testing.assert_close(ours, F.ctc_loss(log_probs, targets, il, tl_, reduction="none"), **TOL)
    assert ours[0].item() == pytest.approx(-log_probs[:, 0, 0].sum().item(), rel=1e-12)
    assert ours[1].item() == 0.0 and math.isinf(ours[2].item())


def test_concatenated_targets_and_one_unbatched_sequence():
    logits, targets, il, tl_ = _case(8, 10, 6, [3, 1, 4], [10, 7, 9], True)
    log_probs = logits.log_softmax(-1)
    flat = torch.cat([t[:n] for t, n in zip(targets, tl_, strict=True)])  # (sum of lengths,)
    padded = ctc_loss_by_hand(log_probs, targets, il, tl_, reduction="none")
    torch.testing.assert_close(ctc_loss_by_hand(log_probs, flat, il, tl_, reduction="none"), padded, **TOL)
    torch.testing.assert_close(
        ctc_loss_by_hand(log_probs, flat, il.tolist(), tl_.tolist(), reduction="none"),
        F.ctc_loss(log_probs, flat, il, tl_, reduction="none"),
        **TOL,
    )
    one = ctc_loss_by_hand(log_probs[:, 2], targets[2, :4], 9, 4, reduction="none")  # (T, C), (S,), ints
    assert one.shape == () and one.item() == pytest.approx(padded[2].item(), rel=1e-12)
    theirs = F.ctc_loss(log_probs[:, 2], targets[2, :4], torch.tensor(9), torch.tensor(4), reduction="none")
    assert one.item() == pytest.approx(theirs.item(), rel=1e-12)


def test_another_blank_index():
    logits, targets, il, tl_ = _case(9, 9, 5, [2, 3], [9, 8], True)
    log_probs = logits.log_softmax(-1)
    targets = torch.where(targets >= 0, targets - 1, targets)  # labels in [0, 4): class 4 is the blank
    ours = ctc_loss_by_hand(log_probs, targets, il, tl_, blank=4, reduction="none")
    theirs = F.ctc_loss(log_probs, targets.clamp(min=0), il, tl_, blank=4, reduction="none")
    torch.testing.assert_close(ours, theirs, **TOL)
    assert not torch.allclose(ours, ctc_loss_by_hand(log_probs, targets + 1, il, tl_, reduction="none"))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("seed", "T", "C", "target_lengths", "input_lengths", "repeat"), CASES[:4])
def test_the_gradients_are_pytorchs(seed, T, C, target_lengths, input_lengths, repeat, reduction):
    """Through log_softmax, where PyTorch's extra exp(log_probs) in its gradient cancels (see the docstring)."""
    logits, targets, il, tl_ = _case(seed, T, C, target_lengths, input_lengths, repeat)
    weights = torch.rand(len(target_lengths), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)

    def grad(loss_fn):
        x = logits.clone().requires_grad_(True)
        loss = loss_fn(x.log_softmax(-1), targets.clamp(min=0), il, tl_, reduction=reduction)
        (loss * weights).sum().backward() if reduction == "none" else loss.backward()
        return x.grad

    ours, theirs = grad(ctc_loss_by_hand), grad(F.ctc_loss)
    assert torch.isfinite(ours).all() and ours.abs().max() > 1e-3
    torch.testing.assert_close(ours, theirs, **TOL)
    beyond = torch.arange(T)[:, None] >= il[None, :]  # (T, B): frames past a sequence's end get no gradient
    assert (ours[beyond] == 0).all()


def test_zero_infinity_zeroes_the_infeasible_losses_and_their_gradients():
    logits, targets, il, tl_ = _case(10, 6, 4, [2, 5, 3], [6, 4, 2], False)  # sequences 1 and 2 are infeasible
    grads = []
    for loss_fn in (ctc_loss_by_hand, F.ctc_loss):
        x = logits.clone().requires_grad_(True)
        loss = loss_fn(x.log_softmax(-1), targets.clamp(min=0), il, tl_, zero_infinity=True)
        assert torch.isfinite(loss)
        loss.backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], **TOL)
    assert (grads[0][:, 1:] == 0).all() and (grads[0][:, 0] != 0).any()
    x = logits.clone().requires_grad_(True)  # without zero_infinity: an infinite loss and a gradient of 0, not NaN
    losses = ctc_loss_by_hand(x.log_softmax(-1), targets, il, tl_, reduction="none")
    assert torch.isinf(losses).tolist() == [False, True, True]
    losses.sum().backward()  # an infinite total, yet a finite gradient: 0 for the infeasible sequences
    assert torch.isfinite(x.grad).all() and (x.grad[:, 1:] == 0).all()
    y = logits.clone().requires_grad_(True)
    F.ctc_loss(y.log_softmax(-1), targets.clamp(min=0), il, tl_, reduction="sum", zero_infinity=True).backward()
    torch.testing.assert_close(x.grad, y.grad, **TOL)


def _brute_force_probability(probs: torch.Tensor, target: list[int], blank: int) -> tuple[float, int]:
    """Sum over every path of T symbols the probabilities of those that collapse to `target`, and count them."""
    T, C = probs.shape
    total, count = 0.0, 0
    for path in itertools.product(range(C), repeat=T):
        merged = [s for i, s in enumerate(path) if i == 0 or s != path[i - 1]]
        if [s for s in merged if s != blank] == target:
            total += math.prod(probs[t, s].item() for t, s in enumerate(path))
            count += 1
    return total, count


@pytest.mark.parametrize(
    ("T", "C", "target", "blank"),
    [(5, 3, [1, 2], 0), (5, 3, [1, 1], 0), (6, 3, [2, 1, 2], 0), (4, 4, [3], 0), (5, 3, [0, 0], 2), (3, 3, [1, 1], 0),
     (2, 3, [1, 1], 0), (4, 2, [], 0)],
)  # fmt: skip
def test_the_probability_is_the_sum_over_every_path(T, C, target, blank):
    log_probs = torch.randn(T, C, generator=torch.Generator().manual_seed(T * C), dtype=torch.float64).log_softmax(-1)
    probability, count = _brute_force_probability(log_probs.exp(), target, blank)
    loss = ctc_loss_by_hand(log_probs, torch.tensor(target, dtype=torch.long), T, len(target), blank, "none")
    assert math.exp(-loss.item()) == pytest.approx(probability, rel=1e-10, abs=1e-300)
    assert ctc_alignment_count(target, T) == count
    assert (count == 0) == (_needed_frames(target) > T)


def test_alignment_counts_in_closed_form():
    """One label in T frames: choose where its run starts and ends, T(T+1)/2 paths; the empty target: one path."""
    assert [ctc_alignment_count([5], T) for T in range(1, 7)] == [T * (T + 1) // 2 for T in range(1, 7)]
    assert ctc_alignment_count([], 7) == 1 and ctc_alignment_count([], 0) == 1 and ctc_alignment_count([1], 0) == 0
    assert ctc_alignment_count([1, 1], 3) == 1 and ctc_alignment_count([1, 1], 2) == 0
    assert ctc_alignment_count([1, 2], 2) == 1


def test_collapse_merges_runs_then_drops_blanks():
    assert ctc_collapse([1, 1, 0, 1, 2, 2, 0, 0]) == [1, 1, 2]
    assert ctc_collapse([0, 0, 0]) == [] and ctc_collapse([]) == []
    assert ctc_collapse([3, 3, 3], blank=3) == [] and ctc_collapse([0, 3, 0], blank=3) == [0, 0]


def _one_hot_log_probs(paths: list[list[int]], C: int) -> torch.Tensor:
    """Log-probabilities (T, B, C) whose best symbol at frame t of sequence b is paths[b][t]."""
    T = max(len(p) for p in paths)
    scores = torch.full((T, len(paths), C), -5.0)
    for b, path in enumerate(paths):
        for t, symbol in enumerate(path):
            scores[t, b, symbol] = -0.1
    return scores


def test_greedy_decoding_merges_repeats_and_keeps_labels_split_by_a_blank():
    paths = [[1, 1, 0, 1, 2, 2], [2, 2, 2, 2, 2, 2], [0, 0, 3, 0, 3, 3], [1, 2, 1, 0, 0, 0]]
    log_probs = _one_hot_log_probs(paths, 4)
    assert greedy_ctc_decode(log_probs, torch.tensor([6, 6, 6, 6])) == [[1, 1, 2], [2], [3, 3], [1, 2, 1]]
    assert greedy_ctc_decode(log_probs, [3, 1, 2, 0]) == [[1], [2], [], []]  # only the frames within each length
    assert greedy_ctc_decode(log_probs) == greedy_ctc_decode(log_probs, [6, 6, 6, 6])
    assert greedy_ctc_decode(log_probs, None, blank=1) == [[0, 2], [2], [0, 3, 0, 3], [2, 0]]


def test_greedy_decoding_of_a_trained_looking_output_matches_the_loss_target():
    """The best path collapses to the target, and its probability is part of the target's CTC probability."""
    log_probs = _one_hot_log_probs([[0, 4, 4, 0, 4, 2, 0]], 5).double().log_softmax(-1)
    assert greedy_ctc_decode(log_probs, [7]) == [[4, 4, 2]]
    best_path = sum(log_probs[t, 0, s].item() for t, s in enumerate([0, 4, 4, 0, 4, 2, 0]))
    loss = ctc_loss_by_hand(log_probs, torch.tensor([[4, 4, 2]]), [7], [3], reduction="none")
    assert -loss.item() > best_path


def test_the_package_root_reaches_the_module():
    assert tl.ctc.ctc_loss_by_hand is ctc_loss_by_hand and "ctc" in tl.__all__


BAD_LOSS_INPUTS = [  # (what to change, the error type, words the message must contain)
    ({"log_probs": torch.zeros(4, 2, 3, 5)}, ValueError, "(T, B, C) or (T, C)"),
    ({"log_probs": torch.zeros(4, 2, 5, dtype=torch.long)}, TypeError, "float tensor"),
    ({"blank": 5}, ValueError, "blank must be a class index in [0, C) = [0, 5)"),
    ({"blank": -1}, ValueError, "blank must be a class index"),
    ({"reduction": "avg"}, ValueError, "reduction must be one of"),
    ({"input_lengths": torch.tensor([4, 5])}, ValueError, "at most log_probs' T = 4, got [4, 5]"),
    ({"input_lengths": torch.tensor([4, 3, 2])}, ValueError, "one length per sequence, 2, got 3"),
    ({"input_lengths": torch.tensor([4.0, 3.0])}, TypeError, "input_lengths must hold integers"),
    ({"input_lengths": [4, -1]}, ValueError, "input_lengths must be >= 0"),
    ({"target_lengths": torch.tensor([2, 3])}, ValueError, "at most the targets' width S = 2, got [2, 3]"),
    ({"targets": torch.tensor([[1, 0], [2, 3]])}, ValueError, "must not be the blank (0)"),
    ({"targets": torch.tensor([[1, 5], [2, 3]])}, ValueError, "in [0, C) = [0, 5), got [1, 2, 3, 5]"),
    ({"targets": torch.tensor([[1.0, 2.0], [2.0, 3.0]])}, TypeError, "integer labels"),
    ({"targets": torch.tensor([[1, 2]])}, ValueError, "(B, S) = (2, S)"),
    ({"targets": torch.tensor([1, 2, 3])}, ValueError, "sum(target_lengths) = 4 entries, got 3"),
]


@pytest.mark.parametrize(("change", "error", "words"), BAD_LOSS_INPUTS)
def test_bad_input_gets_a_clear_error(change, error, words):
    args = {
        "log_probs": torch.zeros(4, 2, 5).log_softmax(-1),
        "targets": torch.tensor([[1, 2], [3, 4]]),
        "input_lengths": torch.tensor([4, 3]),
        "target_lengths": torch.tensor([2, 2]),
    } | change
    with pytest.raises(error) as raised:
        ctc_loss_by_hand(**args)
    assert words in str(raised.value)


def test_padding_past_a_target_is_ignored_even_when_out_of_range():
    log_probs = torch.randn(5, 2, 4, generator=torch.Generator().manual_seed(11), dtype=torch.float64).log_softmax(-1)
    a = ctc_loss_by_hand(log_probs, torch.tensor([[1, -7, 99], [2, 3, 0]]), [5, 5], [1, 2], reduction="none")
    b = ctc_loss_by_hand(log_probs, torch.tensor([[1, 1, 1], [2, 3, 3]]), [5, 5], [1, 2], reduction="none")
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((torch.zeros(4, 5),), ValueError, "shape (T, B, C), got (4, 5)"),
        ((torch.zeros(4, 2, 5, dtype=torch.long),), TypeError, "float tensor"),
        ((torch.zeros(4, 2, 5), [4, 5]), ValueError, "at most log_probs' T = 4"),
        ((torch.zeros(4, 2, 5), [4]), ValueError, "one length per sequence, 2, got 1"),
        ((torch.zeros(4, 2, 5), None, 5), ValueError, "[0, C) = [0, 5), got 5"),
    ],
)
def test_greedy_decoding_rejects_bad_input(args, error, words):
    with pytest.raises(error) as raised:
        greedy_ctc_decode(*args)
    assert words in str(raised.value)


def test_pytorchs_gradient_with_respect_to_log_probs_adds_exp_log_probs():
    """What the docstring says: PyTorch returns exp(log_probs) minus the state occupancies, this module the true
    derivative, minus the occupancies alone; the two agree after log_softmax, whose gradient drops exp(log_probs)."""
    logits, targets, il, tl_ = _case(12, 7, 5, [2, 3], [7, 5], True)
    grads = []
    for loss_fn in (ctc_loss_by_hand, F.ctc_loss):
        log_probs = logits.log_softmax(-1).requires_grad_(True)
        loss_fn(log_probs, targets.clamp(min=0), il, tl_, reduction="sum").backward()
        grads.append(log_probs.grad)
    ours, theirs = grads
    within = (torch.arange(7)[:, None] < il[None, :])[..., None]  # (T, B, 1)
    torch.testing.assert_close(theirs, ours + logits.log_softmax(-1).exp() * within, **TOL)
    torch.testing.assert_close(ours.sum(-1), -within.squeeze(-1).double(), **TOL)  # the occupancies sum to 1 a frame
