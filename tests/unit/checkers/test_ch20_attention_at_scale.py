"""Mutation suite for the checkers of chapter 20 (attention at scale): classic mistakes are named, other valid routes
pass."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

from transformer_lib import flash, speculative
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch20_attention_at_scale as ex20


# The notebook's solutions (notebooks/20_attention_at_scale.ipynb).
def online_softmax(scores, block):
    N, T = scores.shape
    m = torch.full((N, 1), float("-inf"), dtype=scores.dtype)  # (N, 1): the running maximum
    total = torch.zeros(N, 1, dtype=scores.dtype)  # (N, 1): the running sum of e^(s - m)
    for start in range(0, T, block):
        chunk = scores[:, start : start + block]  # (N, <= block)
        new_m = torch.maximum(m, chunk.max(-1, keepdim=True).values)
        total = total * torch.exp(m - new_m) + torch.exp(chunk - new_m).sum(-1, keepdim=True)
        m = new_m
    return torch.exp(scores - m) / total  # (N, T)


def acceptance_and_residual(p, q):
    keep = torch.where(q > 0, torch.minimum(p / q.clamp_min(1e-300), torch.ones_like(p)), torch.ones_like(p))
    left = (p - q).clamp_min(0)
    total = left.sum(-1, keepdim=True)
    residual = torch.where(total > 0, left / torch.where(total > 0, total, torch.ones_like(total)), p)
    return keep, residual


def position_losses(model, ids, length, windows):
    starts = torch.linspace(0, len(ids) - length - 1, windows).long()
    batch = torch.stack([ids[s : s + length + 1] for s in starts])  # (windows, length + 1)
    model.eval()
    with torch.no_grad():
        logits = model(batch[:, :-1])  # (windows, length, V)
    losses = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")  # (windows, length)
    return losses.mean(0)  # (length,)


SOLUTIONS = [
    (online_softmax, ex20.check_online_softmax),
    (acceptance_and_residual, ex20.check_acceptance_and_residual),
    (position_losses, ex20.check_position_losses),
]


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_the_notebook_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", [check for _, check in SOLUTIONS])
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    rejected_as(check(raising(IndexError("index 7 is out of bounds"))), "raised")
    assert "index 7" in check(raising(IndexError("index 7 is out of bounds")))


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_a_check_leaves_torchs_random_state_as_it_was_and_takes_little_time(solution, check):
    state = torch.random.get_rng_state()
    start = time.perf_counter()
    assert check(solution) == CORRECT
    assert time.perf_counter() - start < 20  # a generous net against hangs; well under a second on a laptop core
    assert torch.equal(torch.random.get_rng_state(), state)


# ---- the online softmax ------------------------------------------------------------------------------------------


def _two_pass(scores, block):
    """Another valid route: the maximum in one pass, then the sum, then the weights (no running rescale needed)."""
    m = torch.stack([scores[:, i : i + block].max(-1).values for i in range(0, scores.shape[1], block)], -1)
    m = m.max(-1, keepdim=True).values  # (N, 1)
    e = torch.exp(scores - m)
    return e / e.sum(-1, keepdim=True)


def _logsumexp_by_hand(scores, block):
    """Another route: the running log-sum-exp, l = log(e^l + e^lse(block)), kept in the log domain."""
    lse = torch.full((scores.shape[0], 1), float("-inf"), dtype=scores.dtype)
    for i in range(0, scores.shape[1], block):
        chunk = scores[:, i : i + block]
        top = torch.maximum(lse, chunk.max(-1, keepdim=True).values)
        lse = top + torch.log(torch.exp(lse - top) + torch.exp(chunk - top).sum(-1, keepdim=True))
    return torch.exp(scores - lse)


def _no_max(scores, block):
    e = torch.exp(scores)
    return e / e.sum(-1, keepdim=True)


def _no_rescale(scores, block):
    m = torch.full((scores.shape[0], 1), float("-inf"), dtype=scores.dtype)
    total = torch.zeros(scores.shape[0], 1, dtype=scores.dtype)
    for i in range(0, scores.shape[1], block):
        chunk = scores[:, i : i + block]
        m = torch.maximum(m, chunk.max(-1, keepdim=True).values)
        total = total + torch.exp(chunk - m).sum(-1, keepdim=True)  # the old terms never shrink
    return torch.exp(scores - m) / total


def _inverted(scores, block):
    m = torch.full((scores.shape[0], 1), float("-inf"), dtype=scores.dtype)
    total = torch.zeros(scores.shape[0], 1, dtype=scores.dtype)
    for i in range(0, scores.shape[1], block):
        chunk = scores[:, i : i + block]
        new_m = torch.maximum(m, chunk.max(-1, keepdim=True).values)
        shrink = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(new_m - m))  # the wrong way round
        total = total * shrink + torch.exp(chunk - new_m).sum(-1, keepdim=True)
        m = new_m
    return torch.exp(scores - m) / total


def _first_max(scores, block):
    m = scores[:, :block].max(-1, keepdim=True).values  # never updated
    return torch.exp(scores - m) / torch.exp(scores - m).sum(-1, keepdim=True)


def _per_block(scores, block):
    out = []
    for i in range(0, scores.shape[1], block):
        e = torch.exp(scores[:, i : i + block] - scores[:, i : i + block].max(-1, keepdim=True).values)
        out.append(e / e.sum(-1, keepdim=True))
    return torch.cat(out, -1)


def _columns(scores, block):
    e = torch.exp(scores - scores.max(0, keepdim=True).values)
    return e / e.sum(0, keepdim=True)


@pytest.mark.parametrize("route", [_two_pass, _logsumexp_by_hand])
def test_the_online_softmax_accepts_other_routes(route):
    assert ex20.check_online_softmax(route) == CORRECT


@pytest.mark.parametrize(
    "wrong, mistake",
    [
        (_no_max, "no-max"),
        (_no_rescale, "no-rescale"),
        (_inverted, "rescale-inverted"),
        (_first_max, "first-block-max"),
        (_per_block, "per-block"),
        (_columns, "wrong-axis"),
        (lambda s, b: online_softmax(s, b).T, "shape"),
        (lambda s, b: online_softmax(s, b).tolist(), "not-a-tensor"),
        (lambda s, b: online_softmax(s, b) * 1.01, "other"),
    ],
)
def test_the_online_softmax_names_the_mistake(wrong, mistake):
    rejected_as(ex20.check_online_softmax(wrong), mistake)


@pytest.mark.parametrize(
    "library",
    [
        lambda s, b: torch.softmax(s, -1),
        lambda s, b: F.softmax(s, dim=-1),
        lambda s, b: s.softmax(-1),
        lambda s, b: torch.exp(s - torch.logsumexp(s, -1, keepdim=True)),
        lambda s, b: flash.online_softmax(s, b),
        lambda s, b: torch.nn.Softmax(dim=-1)(s),
        lambda s, b: F.log_softmax(s, -1).exp(),
    ],
)
def test_the_online_softmax_refuses_the_library_in_every_spelling(library):
    rejected_as(ex20.check_online_softmax(library), "by-hand")


def test_the_online_softmax_notices_an_answer_that_changes_its_input():
    def in_place(scores, block):
        out = online_softmax(scores, block)
        scores.zero_()
        return out

    rejected_as(ex20.check_online_softmax(in_place), "in-place")


# ---- speculative decoding's rule ---------------------------------------------------------------------------------


def _rule_other_route(p, q):
    """Another valid route: min(p, q) / q for the acceptance, and the residual normalised by 1 - sum(min(p, q))."""
    keep = torch.where(q > 0, torch.minimum(p, q) / torch.where(q > 0, q, torch.ones_like(q)), torch.ones_like(q))
    mass = 1 - torch.minimum(p, q).sum(-1, keepdim=True)
    left = (p - torch.minimum(p, q)) / torch.where(mass > 0, mass, torch.ones_like(mass))
    return keep, torch.where(mass > 1e-12, left, p)


def _rule_with(keep=None, left=None):
    def answer(p, q):
        k, r = acceptance_and_residual(p, q)
        return (k if keep is None else keep(p, q)), (r if left is None else left(p, q))

    return answer


def _normalised(x):
    return x / x.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "wrong, mistake",
    [
        (
            _rule_with(
                keep=lambda p, q: torch.where(p > 0, (q / p).clamp(max=1), torch.ones_like(p)).where(
                    q > 0, torch.ones_like(p)
                )
            ),
            "inverted",
        ),  # fmt: skip
        (_rule_with(keep=lambda p, q: torch.where(q > 0, p / q.clamp_min(1e-300), torch.ones_like(p))), "uncapped"),
        (_rule_with(left=lambda p, q: p), "residual-is-p"),
        (_rule_with(left=lambda p, q: (p - q).clamp_min(0)), "residual-unnormalised"),
        (
            _rule_with(
                left=lambda p, q: torch.nan_to_num(_normalised((q - p).clamp_min(0)), nan=0.0).where(
                    (q - p).clamp_min(0).sum(-1, keepdim=True) > 0, p
                )
            ),
            "residual-flipped",
        ),  # fmt: skip
        (
            _rule_with(
                left=lambda p, q: torch.nan_to_num(_normalised((p - q).abs()), nan=0.0).where(
                    (p - q).abs().sum(-1, keepdim=True) > 0, p
                )
            ),
            "residual-abs",
        ),  # fmt: skip
        (_rule_with(keep=lambda p, q: torch.minimum(p / q, torch.ones_like(p))), "zero-q"),
        (_rule_with(left=lambda p, q: _normalised((p - q).clamp_min(0))), "no-fallback"),
        (lambda p, q: acceptance_and_residual(p, q)[0], "not-a-pair"),
        (lambda p, q: (p[..., :-1], q), "shape"),
    ],
)
def test_the_rule_names_the_mistake(wrong, mistake):
    rejected_as(ex20.check_acceptance_and_residual(wrong), mistake)


def test_the_rule_accepts_another_route_and_refuses_the_library():
    assert ex20.check_acceptance_and_residual(_rule_other_route) == CORRECT
    library = lambda p, q: (speculative.acceptance(p, q), speculative.residual(p, q))  # noqa: E731
    rejected_as(ex20.check_acceptance_and_residual(library), "by-hand")


# ---- the loss at each position -----------------------------------------------------------------------------------


def _losses_with(*, shift=1, spread="even", reduce="mean", log_base=None, train=False, random_starts=False):
    def answer(model, ids, length, windows):
        if random_starts:
            starts = torch.randint(0, len(ids) - length - 1, (windows,))
        elif spread == "even":
            starts = torch.linspace(0, len(ids) - length - 1, windows).long()
        else:
            starts = torch.arange(windows) * length
        batch = torch.stack([ids[s : s + length + 1] for s in starts])
        model.train(train)
        with torch.no_grad():
            logits = model(batch[:, :-1])
        targets = batch[:, 1:] if shift else batch[:, :-1]
        losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        if log_base:
            losses = losses / math.log(log_base)
        return losses.sum(0) if reduce == "sum" else losses.mean(0)

    return answer


def _losses_by_loop(model, ids, length, windows):
    """Another valid route: one window at a time, log-softmax and gather by hand, in float64."""
    model.eval()
    rows = []
    for s in torch.linspace(0, len(ids) - length - 1, windows).long().tolist():
        window = ids[s : s + length + 1]
        with torch.no_grad():
            logp = model(window[None, :-1])[0].double().log_softmax(-1)  # (length, V)
        rows.append(-logp.gather(-1, window[1:, None])[:, 0])
    return torch.stack(rows).mean(0)


def test_the_position_losses_accept_another_route():
    assert ex20.check_position_losses(_losses_by_loop) == CORRECT


@pytest.mark.parametrize(
    "wrong, mistake",
    [
        (_losses_with(shift=0), "unshifted"),
        (_losses_with(reduce="sum"), "summed"),
        (_losses_with(spread="side"), "side-by-side"),
        (_losses_with(log_base=2.0), "bits"),
        (_losses_with(train=True), "irreproducible"),
        (_losses_with(random_starts=True), "irreproducible"),
        (lambda m, ids, length, w: _losses_with()(m, ids, length, w).mean(), "shape"),
        (lambda m, ids, length, w: torch.full((length,), 3.0), "constant"),
        (lambda m, ids, length, w: _losses_with()(m, ids, length, w) + 0.1, "other"),
    ],
)
def test_the_position_losses_name_the_mistake(wrong, mistake):
    rejected_as(ex20.check_position_losses(wrong), mistake)


# ---- answers right for one input only ----------------------------------------------------------------------------


def _residual_down_the_first_axis(p, q):
    """Right for one distribution (V,) only: the residual normalised over axis 0, not the vocabulary."""
    keep, _ = acceptance_and_residual(p, q)
    left = (p - q).clamp_min(0)
    total = left.sum(0, keepdim=True)
    return keep, torch.where(total > 0, left / torch.where(total > 0, total, torch.ones_like(total)), p)


def test_answers_right_for_one_input_only_are_rejected():
    rejected_as(ex20.check_acceptance_and_residual(_residual_down_the_first_axis), "other")
    five_windows = lambda m, ids, length, windows: position_losses(m, ids, length, 5)  # noqa: E731
    rejected_as(ex20.check_position_losses(five_windows), "other")
    whole_row = lambda s, b: _two_pass(s, s.shape[1])  # one block, the whole row: still the softmax  # noqa: E731
    assert ex20.check_online_softmax(whole_row) == CORRECT  # block is how to read, not what comes out
    first_block_only = lambda s, b: _two_pass(s[:, :b], b).expand_as(s) if s.shape[1] <= b else _no_rescale(s, b)  # noqa: E731
    rejected_as(ex20.check_online_softmax(first_block_only), "no-rescale")  # right only where one block is the row
