"""Checkers for the exercises of the encoder chapter."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from ..masks import padding_mask
from ..training import classification_accuracy
from ._common import CORRECT, Wrong, checker, measure, no, run
from ._match import expect_tensor, same, spot

__all__ = ["check_mean_pool", "check_pre_ln_layer", "check_first_pool", "check_head_ablation"]


@checker
def check_mean_pool(fn) -> str:
    """fn(hidden (B, S, d), mask (B, 1, 1, S)) must average the real positions, (B, d)."""
    g = torch.Generator().manual_seed(3)
    # shapes, widths, pad ids and padding amounts all vary; data is random
    for B, S, d, pad, lengths in ((3, 5, 4, 0, [5, 2, 1]), (4, 7, 6, 3, [3, 7, 5, 1]), (2, 6, 10, 11, [6, 4])):
        case = f"hidden of shape ({B}, {S}, {d}) padded with pad id {pad}"
        hidden = torch.randn(B, S, d, generator=g) * 2 + 0.5
        ids = torch.randint(0, 20, (B, S), generator=g)
        ids[ids == pad] = pad + 1  # real tokens never use the pad id
        ids[torch.arange(S) >= torch.tensor(lengths)[:, None]] = pad  # sequence b is lengths[b] tokens long
        mask = padding_mask(ids, pad)
        keep, h = mask[:, 0, 0, :, None].double(), hidden.double()  # keep: (B, S, 1)
        want = (h * keep).sum(1) / keep.sum(1)
        got = run(fn, hidden.clone(), mask.clone(), case=case)
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        pads = (h * (1 - keep)).sum(1) / (1 - keep).sum(1).clamp(min=1)
        mistakes = [
            (h.mean(1), "padding-averaged", "The padding is averaged in: weight positions by the mask."),
            ((h * keep).sum(1) / S, "divided-by-S", "Almost: divide by the number of real tokens, not by S."),
            ((h * keep).sum(1), "sum", "That is the sum of the real positions: divide by how many there are."),
            (pads, "pads-only", "Upside down: you averaged the pads only."),
            (h[:, 0], "first-position", "That is the first position only: average over every real position."),
        ]
        spot(got, want, mistakes)
        return no("other", f"Not the mean over the real positions on {case}: divide their sum by their number.")
    return CORRECT


@checker
def check_pre_ln_layer(fn, make_layer: Callable[[int, int, int], torch.nn.Module]) -> str:
    """fn(layer, x, mask) must run a layer's parts in pre-LN order; make_layer builds the learner's layer class."""
    g = torch.Generator().manual_seed(4)
    for d, h, d_ff, B, S, pad in ((16, 2, 32, 2, 5, 0), (24, 3, 40, 3, 7, 2), (12, 4, 20, 2, 6, 9)):
        case = f"a layer with d_model={d}, num_heads={h}, d_ff={d_ff} on x of shape ({B}, {S}, {d})"
        try:
            with torch.random.fork_rng():  # building layers draws from torch's global generator
                torch.manual_seed(d)
                layer = make_layer(d, h, d_ff).eval()
            with torch.no_grad():  # norm1 and norm2 get different random gains and biases, so mixing them up shows
                for norm in (getattr(layer, "norm1", None), getattr(layer, "norm2", None)):
                    for p in norm.parameters() if norm is not None else ():
                        centre = 1.0 if p.ndim and p is norm.weight else 0.0  # gains around 1, biases around 0
                        p.copy_(torch.randn(p.shape, generator=g) * 0.5 + centre)
        except Exception as error:  # the learner's layer class is part of the answer
            return no("raised", f"Building your layer class raised {type(error).__name__} for {case}: {error}")
        x = torch.randn(B, S, d, generator=g) * 1.5 + 0.3
        ids = torch.randint(1, 30, (B, S), generator=g)
        ids[ids == pad] = pad + 1
        ids[-1, S - 2 :] = pad
        mask = padding_mask(ids, pad)
        A = lambda q, m=mask, attn=layer.self_attn: attn(q, q, q, m)[0]
        F_, n1, n2 = layer.feed_forward, layer.norm1, layer.norm2
        with torch.no_grad():
            a = A(n1(x))
            z = x + a
            want = z + F_(n2(z))
            got = run(fn, layer, x.clone(), mask.clone(), case=case)
            expect_tensor(got, want, case)
            if same(got, want, atol=1e-4):
                continue
            post = n1(x + A(x))
            z2, zs = x + A(n2(x)), x + A(n1(x), None)
            mistakes = [
                (n2(post + F_(post)), "post-ln", "That is the post-LN order: normalise before each sublayer instead."),
                (z + F_(n1(z)), "norm1-twice", "You used norm1 for both sublayers: the feed-forward reads norm2(z)."),
                (z2 + F_(n2(z2)), "norm2-twice", "You used norm2 for both sublayers: attention reads norm1(x)."),
                (z2 + F_(n1(z2)), "norms-swapped", "norm1 and norm2 are swapped: norm1 before attention, norm2 after."),
                (a + F_(n2(a)), "no-attention-residual", "Attention has lost its residual: z = x + attn(norm1(x))."),
                (F_(n2(z)), "no-ff-residual", "The feed-forward has lost its residual: out = z + ff(norm2(z))."),
                (n2(z + F_(n2(z))), "final-norm", "Pre-LN does not normalise the output: out = z + ff(norm2(z))."),
                (z + F_(n2(x)), "ff-reads-x", "The feed-forward reads norm2(z), z = x + attention, not norm2(x)."),
                (zs + F_(n2(zs)), "mask-ignored", "The mask is ignored: pass it to self_attn to skip the padding."),
            ]
            spot(got, want, mistakes, atol=1e-4)
        return no("other", f"Not quite the pre-LN order on {case}: z = x + attn(norm1(x)); out = z + ff(norm2(z)).")
    return CORRECT


@checker
def check_first_pool(fn) -> str:
    """fn(hidden (B, S, d)) must return the vector at position 0 of each sequence, (B, d)."""
    g = torch.Generator().manual_seed(8)
    for B, S, d in ((3, 6, 4), (5, 2, 7), (2, 9, 16)):
        case = f"hidden of shape ({B}, {S}, {d})"
        hidden = torch.randn(B, S, d, generator=g)
        want = hidden[:, 0].double()
        got = run(fn, hidden.clone(), case=case)
        if isinstance(got, torch.Tensor) and got.shape == (B, 1, d):
            return no("kept-axis", "Keep one vector per sequence, (B, d): index hidden[:, 0], not hidden[:, :1].")
        if isinstance(got, torch.Tensor) and got.shape == (S, d) != want.shape:
            return no("first-sequence", "That is the first sequence: take position 0 of every one, hidden[:, 0].")
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        mistakes = [
            (hidden[:, -1], "last-position", "That is the last position. The <bos> / [CLS] token sits at position 0."),
            (hidden.mean(1), "mean-pooling", "That is mean pooling. Take position 0 only."),
            (hidden[:, 1], "position-1", "That is position 1: Python counts from 0, the [CLS] token is hidden[:, 0]."),
            (hidden.max(1).values, "max-pooling", "That is max pooling. Take position 0 only."),
        ]
        spot(got, want, mistakes)
        return no("other", f"Not position 0 on {case}: index hidden[:, 0].")
    return CORRECT


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


@checker
def check_head_ablation(fn, model, x: torch.Tensor, y: torch.Tensor) -> str:
    """Experiment: fn(model, x, y, layer, head) measures the accuracy with that head switched off."""
    # unseen subsets, the 3 heads that matter most and 3 drawn at random (about a second): no typed number passes
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    before = [p.detach().clone() for p in model.parameters()]
    model.eval()
    n = len(y)
    g = torch.Generator().manual_seed(n)
    sizes = (min(max(2 * n // 3, 2), 240), min(max(n // 2, 2), 160))
    subsets = [(f"a random subset of {size} examples", torch.randperm(n, generator=g)[:size]) for size in sizes]
    heads = [(i, j) for i, lyr in enumerate(model.encoder.layers) for j in range(lyr.self_attn.num_heads)]
    first = subsets[0][1].to(device)
    full = classification_accuracy(model, x[first], y[first])
    effect = {h: abs(full - _accuracy_without_head(model, x[first], y[first], *h)) for h in heads}
    ranked = sorted(heads, key=lambda h: -effect[h])  # the heads whose removal matters most first
    drawn = [heads[i] for i in torch.randperm(len(heads), generator=g)[:3].tolist()]
    for where, index in subsets:
        xs, ys = x[index.to(device)], y[index.to(device)]
        half = 0.5 / len(ys)  # half an example: float32 means round 38/80 to 0.47499999
        for layer, head in dict.fromkeys(ranked[:3] + drawn):
            case = f"layer {layer}, head {head} on {where}"
            try:
                value = measure("the accuracy", run(fn, model, xs, ys, layer, head, case=case))[0]
            finally:  # changed weights are put back, and named before any other problem (even an error)
                if any(not torch.equal(a, b) for a, b in zip(before, model.parameters())):
                    with torch.no_grad():
                        for p, b in zip(model.parameters(), before):
                            p.copy_(b)
                    hint = "Your experiment changed the model's weights: put the head back after measuring."
                    raise Wrong("model-changed", hint)
            want = _accuracy_without_head(model, xs, ys, layer, head)
            if abs(value - want) <= 1.5 / len(ys):  # one borderline example may round the other way
                continue
            full = classification_accuracy(model, xs, ys)
            if abs(value - full) < half and abs(want - full) > half:
                return no(
                    "all-heads-on", f"On {case}: {full:.4f} is the accuracy with every head on: zero the head's output."
                )
            if abs(value - 100 * want) <= 150 / len(ys) and want > 0:
                return no("percentage", f"On {case}: that is a percentage ({value:.2f}): return a fraction.")
            if abs(value - (1 - want)) <= 1.5 / len(ys):
                return no("error-rate", f"On {case}: that is the error rate ({value:.4f}): return 1 - that.")
            on_all = _accuracy_without_head(model, x, y, layer, head)
            if abs(value - on_all) < half and abs(want - on_all) > half:
                return no(
                    "given-data-ignored",
                    f"On {case}: {value:.4f} is the accuracy on all the chapter's examples: measure on the {len(ys)} "
                    "examples you are given (xs, ys), as the checker runs your measurement on data of its own.",
                )
            other = next(i for w, i in subsets if w != where).to(device)
            other_want = _accuracy_without_head(model, x[other], y[other], layer, head)
            again = None
            with contextlib.suppress(Wrong):
                again = measure("", run(fn, model, x[other], y[other], layer, head, case=case))[0]
            expected = f"On {case}: expected accuracy {want:.4f} with the head off, got {value:.4f}"
            if abs(other_want - want) > half and again == value:
                return no(
                    "not-measured",
                    f"{expected}, and the same number on other examples: it must measure, not return a number.",
                )
            return no(
                "other",
                f"{expected}. Zero the head's d_k columns of out_proj.weight (the part that reads its output), "
                "measure on the examples you are given, then put the weights back.",
            )
    return CORRECT
