"""Checkers for the exercises of the chapter "From 2017 to today, part two"."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .. import hf, moe, positional, quantization
from ..config import TransformerConfig
from ..models import DecoderOnlyLM
from ._common import CORRECT, Wrong, _seeded, aten_ops, checker, no, refusing, run
from ._match import expect_tensor, same, spot

__all__ = ["check_rotary_rows", "check_top_k_gates", "check_int8_rows", "check_expert_use"]

_HINTS = {  # by id, the mistakes named whatever the input, in the order of the checkers
    "interleaved": "The classic mistake: the rows are still interleaved. A rotate-half model then pairs row i with "
    "row i + rotary_dim/2, which were not a pair, and gives other logits without any error.",
    "inverse": "That is the inverse order (rotate-half to interleaved): new row j of a head should be its old "
    "row order[j], with order = the even rows 0, 2, 4, ..., then the odd rows 1, 3, 5, ...",
    "whole-matrix": "You reordered the whole matrix as one block: reorder within each head, whose d_k rows pair up.",
    "past-rotary-dim": "Only the first rotary_dim rows of each head turn: rows past rotary_dim stay where they are.",
    "first-head-only": "Only the first head was reordered: every head's block of d_k rows needs the same reordering.",
    "columns": "You reordered the columns (input features): the pairs are rows, the projections' output features.",
    "not-renormalised": "The gates do not sum to 1: divide the top k probabilities by their sum, as Mixtral does.",
    "softmax-axis": "The softmax ran over the tokens (dim 0): take it over each token's experts (the last dimension).",
    "raw-logits": "Those gates are raw logits: turn them into probabilities with a softmax first.",
    "least-likely": "You kept the k least likely experts: topk's default (largest=True) gives the likeliest.",
    "all-experts": "Every expert got a gate: keep only each token's k likeliest experts and set the rest to 0.",
    "per-column": "Those are scales per column (input feature): per channel means one per row, max over dim 1.",
    "no-127": "The scale is the row's largest magnitude: divide it by 127, so the row uses -127..127.",
    "by-255": "Divide by 127, not 255: symmetric int8 uses -127..127, so 127 is the largest step count.",
    "by-128": "Divide by 127, not 128: with 128 the largest weight would round to 128, past int8.",
    "not-absolute": "Use the largest *absolute* value: max misses large negative weights.",
    "per-tensor": "One scale for the whole matrix is per-tensor: per channel means one per row (output feature).",
    "truncated": "The values were truncated towards zero: round them to the nearest integer first (torch.round).",
    "floor": "The values were rounded down (floor): round them to the nearest integer (torch.round).",
    "first-choice": "You counted only each token's first choice: with top-k routing each of its k slots counts.",
    "mean-probability": "That is the router's mean probability per expert (P in the balancing loss), not the share of "
    "routing slots each expert got (f): count the experts each token was sent to.",
    "counts": "Those are counts: divide each layer's counts by its number of slots (tokens x k).",
    "per-token": "Each layer's shares should sum to 1: divide by the number of slots (tokens x k), not of tokens.",
    "reversed-layers": "The layers are in reverse order: row i is layer i, from the input up.",
    "uniform": "Your answer gives every expert 1/E, the balanced ideal: measure what the model's routers do.",
}


def _reorder(weight: torch.Tensor, num_heads: int, order: torch.Tensor) -> torch.Tensor:
    """Each head's block of d_k rows reordered by `order` (d_k,): new row j of a head is its old row order[j]."""
    return weight.unflatten(0, (num_heads, -1))[:, order].flatten(0, 1)  # (num_heads, d_k, d_in), then back


def _to_half(d_k: int, r: int) -> torch.Tensor:
    """(d_k,): the even rotary rows, then the odd ones, then the rows past r (the closed form, written here again)."""
    return torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, d_k)))


@checker
def check_rotary_rows(fn: Callable[[torch.Tensor, int, int], torch.Tensor]) -> str:
    """fn(weight (num_heads * d_k, d_in), num_heads, rotary_dim) -> weight, each head's rows in rotate-half order."""
    g = _seeded(14)
    forbidden = (positional.rotary_permutation, hf.with_rotary_layout)  # written by hand: these refuse
    names = "tl.rotary_permutation or tl.hf.with_rotary_layout"
    for num_heads, d_k, r, d_in in ((2, 8, 8, 6), (3, 6, 4, 5), (1, 12, 12, 7), (4, 10, 6, 3)):
        weight = torch.randn(num_heads * d_k, d_in, generator=g)
        case = f"a weight of shape {tuple(weight.shape)} with num_heads={num_heads}, rotary_dim={r}"
        want = _reorder(weight, num_heads, _to_half(d_k, r))
        got = run(fn, weight.clone(), num_heads, r, case=case, forbidden=forbidden, names=names)
        expect_tensor(got, want, case)
        if same(got, want, atol=0, rtol=0):
            continue
        mistakes = [
            (weight, "interleaved"),
            (_reorder(weight, num_heads, torch.argsort(_to_half(d_k, r))), "inverse"),
            (weight[_to_half(num_heads * d_k, num_heads * d_k)], "whole-matrix"),  # all heads' rows as one block
            (_reorder(weight, num_heads, _to_half(d_k, d_k)), "past-rotary-dim"),
            (torch.cat((weight[:d_k][_to_half(d_k, r)], weight[d_k:])), "first-head-only"),
            (weight[:, _to_half(d_in, d_in)], "columns"),
        ]
        spot(got, want, [(wrong, mistake, _HINTS[mistake]) for wrong, mistake in mistakes], atol=0)
        if sorted(got[:, 0].tolist()) == sorted(weight[:, 0].tolist()):
            return no("row-order", f"On {case} the rows are in another order: per head, the even rows, then the odd.")
        return no("other", f"Not the reordered rows on {case}: each head's rows in the rotate-half order.")
    return CORRECT


def _gates(probs: torch.Tensor, k: int, largest: bool = True, renormalise: bool = True) -> torch.Tensor:
    """probs (N, E) -> (N, E): each row's k largest (or smallest) probabilities, divided by their sum, 0 elsewhere."""
    top, chosen = probs.topk(k, dim=-1, largest=largest)  # (N, k)
    return torch.zeros_like(probs).scatter(1, chosen, top / top.sum(-1, keepdim=True) if renormalise else top)


@checker
def check_top_k_gates(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """fn(router logits (N, E), k) -> gates (N, E): the k likeliest experts' probabilities renormalised, others 0."""
    g = _seeded(15)
    forbidden = (moe.MoEFeedForward.route,)  # the library's router refuses
    # the last logits sit around 800: the same softmax, but exp overflows (above about 88 in float32, 709 in float64)
    for n, e, k, shift in ((6, 4, 2, 0.0), (5, 8, 3, 0.0), (7, 3, 1, 0.0), (4, 5, 5, 0.0), (6, 7, 3, 800.0)):
        logits = torch.randn(n, e, generator=g) * 2 + shift  # (N, E)
        case = f"logits{f' around {shift:g}' if shift else ''} of shape ({n}, {e}) with k={k}"
        probs = logits.double().softmax(-1)  # (N, E)
        want = _gates(probs, k)
        got = run(fn, logits.clone(), k, case=case, forbidden=forbidden, names="the library's router")
        expect_tensor(got, want, case, kind="float")
        if same(got, want, atol=1e-5):
            continue
        if shift:  # right on every case before, and a softmax does not see the shift: exp overflowed
            what = "hold inf or NaN" if not got.isfinite().all() else "are wrong"
            hint = "on logits near 0 they were right, and moving every logit by one amount leaves a softmax as it "
            hint += "is, but exp of these is inf (above about 88 in float32, 709 in float64), and inf / inf is NaN: "
            hint += "take each row's max off the logits before exp, or call logits.softmax(-1)"
            return no("overflow", f"On {case} your gates {what}: {hint}.")
        mistakes = [
            (_gates(probs, k, renormalise=False), "not-renormalised"),
            (_gates(logits.double().softmax(0), k), "softmax-axis"),  # over the tokens, then the same steps
            (_gates(logits.double(), k, renormalise=False), "raw-logits"),
            (_gates(probs, k, largest=False), "least-likely"),
            (probs, "all-experts"),
            (_gates(probs, min(2, e)), "fixed-k"),
        ]
        hints = _HINTS | {"fixed-k": f"Your answer keeps 2 experts whatever k is ({case}): use the k it is given."}
        spot(got, want, [(wrong, mistake, hints[mistake]) for wrong, mistake in mistakes], atol=1e-5)
        if ((got != 0).sum(-1) == k).all() and ((got != 0) == (want != 0)).all():
            return no("wrong-gates", f"On {case} right experts, wrong gates: use their renormalised probabilities.")
        return no("other", f"Not the gates on {case}: softmax over experts, keep the top k, divide them by their sum.")
    return CORRECT


@checker
def check_int8_rows(fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> str:
    """fn(weight (out, in)) -> (q int8, scale (out,) or (out, 1)): per-row symmetric int8, scale = row absmax / 127."""
    g = _seeded(16)
    cases = []
    for out, inp in ((4, 6), (7, 3), (5, 9)):
        w = torch.randn(out, inp, generator=g) * torch.rand(out, 1, generator=g) * 3  # rows of different sizes
        cases.append((f"a weight of shape ({out}, {inp})", w))
    w = torch.randn(6, 5, generator=g)
    w[2] = 0.0  # a row of zeros: dividing by its absmax gives NaN; it may take any positive scale
    w[4, 1] = -4.0  # a row whose largest magnitude is negative
    cases.append(("a weight of shape (6, 5) with a row of zeros and a large negative weight", w))
    guarded = refusing(fn, torch.quantize_per_channel, ops=aten_ops("quantize_per_channel"))
    forbidden = (quantization.quantize_per_channel,)  # written by hand: this and torch's quantizer refuse
    for case, weight in cases:
        w = weight.double()
        absmax = w.abs().amax(dim=1, keepdim=True)  # (out, 1)
        scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
        want = torch.round(w / scale).clamp(-127, 127)
        got = run(guarded, weight.clone(), case=case, forbidden=forbidden, names="the library's quantizer")
        if not (isinstance(got, tuple) and len(got) == 2):
            return no("not-a-pair", f"Return (q, scale); on {case} your answer returned a {type(got).__name__}.")
        q, s = got
        expect_tensor(q, want, case)
        count = s.numel() if isinstance(s, torch.Tensor) else None
        if count != weight.shape[0]:
            if count in (1, weight.shape[1]):  # one scale for the whole matrix, or one per column
                mistake = "per-tensor" if count == 1 else "per-column"
                return no(mistake, _HINTS[mistake])
            return no("scale-count", f"Return one scale per row: {weight.shape[0]} numbers on {case}.")
        s = s.double().reshape(-1, 1)  # (out, 1)
        if not torch.isfinite(q.double()).all() or not torch.isfinite(s).all():
            return no("not-finite", f"On {case} your answer has NaN or inf: give a row of zeros scale 1, not 0 / 0.")
        if q.dtype != torch.int8:
            return no("dtype", f"q has dtype {q.dtype}: store it as torch.int8 (one byte per weight) after rounding.")
        if not (s > 0).all():
            return no("non-positive-scale", f"On {case} a scale is zero or negative: every row needs a positive scale.")
        rows = absmax.squeeze(1) > 0  # a row of zeros may take any positive scale
        if not torch.allclose(s[rows], scale[rows], rtol=1e-5, atol=0):
            wrong_scales = [
                (absmax, "no-127"),
                (absmax / 255, "by-255"),
                (absmax / 128, "by-128"),
                (w.amax(dim=1, keepdim=True) / 127, "not-absolute"),
                ((w.abs().max() / 127).expand_as(s), "per-tensor"),
            ]
            for bad, mistake in wrong_scales:
                if torch.allclose(s[rows], bad[rows], rtol=1e-5, atol=0):
                    return no(mistake, _HINTS[mistake])
            return no("wrong-scale", f"On {case} the scales are not each row's largest absolute value / 127.")
        if torch.equal(q.double()[rows], want[rows]) and (q[~rows] == 0).all():
            continue
        for rounding, mistake in ((torch.trunc, "truncated"), (torch.floor, "floor")):
            if torch.equal(q.double(), rounding(w / scale).clamp(-127, 127)):
                return no(mistake, _HINTS[mistake])
        return no("other", f"On {case} q is not round(weight / scale) for each row.")
    return CORRECT


def _moe_model(seed: int, e: int, k: int, layers: int, vocab: int = 20) -> DecoderOnlyLM:
    """A small random MoE language model (e experts, top-k); routers pushed towards one expert, so layers differ."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        base = TransformerConfig(vocab_size=vocab, d_model=16, num_heads=2, num_layers=layers, d_ff=8, max_len=32)
        # dropout is on: the measurement must run the model in eval mode to be repeatable
        model = DecoderOnlyLM(base.replace(dropout=0.1, norm_first=True, num_experts=e, experts_per_token=k))
        with torch.no_grad():
            for i, m in enumerate(x for x in model.modules() if isinstance(x, moe.MoEFeedForward)):
                m.router.weight.mul_(3.0 + 2 * i)  # sharper routers: the layers' shares differ a lot
                m.router.weight[i % e] += 0.5  # and one favourite expert per layer
    return model.train()  # handed over in training mode, as a model is after fit


@checker
def check_expert_use(fn: Callable[[nn.Module, torch.Tensor], torch.Tensor]) -> str:
    """Experiment: fn(model, ids (B, T)) -> (MoE layers, E): each layer's share of routing slots per expert."""
    forbidden = (moe.expert_use,)  # the checker's own models (other E, top-k and depths); tl.moe.expert_use refuses
    for seed, e, k, layers, (b, t) in ((0, 4, 2, 3, (3, 10)), (1, 6, 1, 2, (2, 16)), (2, 5, 3, 4, (4, 7))):
        model = _moe_model(seed, e, k, layers)
        ids = torch.randint(0, 20, (b, t), generator=_seeded(100 + seed))
        case = f"a model of {layers} MoE layers, {e} experts, top-{k}, on ids of shape {(b, t)}"
        with torch.no_grad(), moe.router_logits(model.eval()) as logits:
            model(ids)
        model.train()
        want = torch.stack([moe.expert_shares(layer, k) for layer in logits]).double()  # (L, E)
        got = run(fn, model, ids.clone(), case=case, forbidden=forbidden, names="tl.moe.expert_use")
        if isinstance(got, (list, tuple)) and got and all(isinstance(x, torch.Tensor) for x in got):
            got = torch.stack([x.detach() for x in got]) if len({x.shape for x in got}) == 1 else got
        expect_tensor(got, want, case)
        got = got.detach()
        if same(got, want, atol=1e-6):
            continue
        counts = torch.stack([torch.bincount(x.topk(k, -1).indices.flatten(), minlength=e) for x in logits]).double()
        first = torch.stack([torch.bincount(x.argmax(-1), minlength=e) for x in logits]).double()
        mistakes = [
            (first / first.sum(-1, keepdim=True), "first-choice"),
            (torch.stack([x.double().softmax(-1).mean(0) for x in logits]), "mean-probability"),
            (counts, "counts"),
            (counts / (counts.sum(-1, keepdim=True) / k), "per-token"),
            (want.flip(0), "reversed-layers"),
            (torch.full_like(want, 1 / e), "uniform"),
        ]
        spot(got, want, [(wrong, mistake, _HINTS[mistake]) for wrong, mistake in mistakes], atol=1e-6)
        try:  # a second run, in training mode again: does the answer change from run to run?
            again = run(fn, model.train(), ids.clone(), case=case, forbidden=forbidden)
        except Wrong:
            again = None
        if isinstance(again, torch.Tensor) and again.shape == got.shape and not torch.equal(again.detach(), got):
            return no("dropout", "Two runs gave two measurements: dropout is on. Measure with the model in eval mode.")
        expected, answer = [[[round(v, 3) for v in row] for row in t.double().tolist()] for t in (want, got)]
        return no("other", f"On {case} expected {expected}, got {answer}: per layer, each expert's share of the slots.")
    return CORRECT
