"""Mutation suite for the feed-forward and norm chapter's checkers: classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as
from torch import nn

import transformer_lib as tl
from transformer_lib import exercises as ex

_raises = raising(IndexError("Dimension out of range"))


# The notebook's solutions (notebooks/06_feed_forward_and_norm.ipynb).
def solution_layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def solution_pre_ln(x, sublayer, norm):
    return x + sublayer(norm(x))


def solution_batch_norm_mean(x):
    return x.mean(dim=(0, 1))


def solution_depth_growth(num_layers, seed):
    tl.set_seed(seed)
    stack = tl.Encoder(
        d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, dropout=0.0, norm_first=True, final_norm=False
    ).eval()
    with torch.no_grad():
        return stack(torch.randn(4, 10, 32)).std().item()


def _ln(x, w, b, e, unbiased=False, outside=False, axis=-1, centre=True):
    c = x - x.mean(axis, keepdim=True) if centre else x
    var = x.var(axis, unbiased=unbiased, keepdim=True) if centre else x.pow(2).mean(axis, keepdim=True)
    return c / (var.sqrt() + e if outside else (var + e).sqrt()) * w + b


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, w, b, e: _ln(x, w, b, e, unbiased=True), "unbiased"),
        (lambda x, w, b, e: _ln(x, w, b, e, outside=True), "eps-outside"),
        (lambda x, w, b, e: _ln(x, w, b, 1e-5), "eps-ignored"),
        (lambda x, w, b, e: _ln(x, 1.0, 0.0, e), "no-affine"),
        (lambda x, w, b, e: _ln(x, w, 0.0, e), "no-bias"),
        (lambda x, w, b, e: _ln(x, 1.0, b, e), "no-gain"),
        (lambda x, w, b, e: _ln(x, w, b, e, centre=False), "not-centred"),
        (lambda x, w, b, e: _ln(x, w, b, e, axis=0), "first-axis"),
        (lambda x, w, b, e: _ln(x, w, b, e, axis=-2), "positions"),  # over the positions of (3, 4, 10)
        (lambda x, w, b, e: (x - x.mean(-1, keepdim=True)) / (x.var(-1, False, keepdim=True) + e) * w + b, "variance"),
        (lambda x, w, b, e: x.mean(-1), "shape"),
        (lambda x, w, b, e: x.tolist(), "not-a-tensor"),
        (lambda x, w, b, e: F.layer_norm(x, x.shape[-1:], w, b, e), "by-hand"),
        (lambda x, w, b, e: torch.layer_norm(x, x.shape[-1:], w, b, e), "by-hand"),
        (lambda x, w, b, e: tl.LayerNorm(x.shape[-1], e)(x), "by-hand"),
        (lambda x, w, b, e: _ln(x.view(3, 4, 10), w, b, e), "raised"),  # fails on (5, 7)
        (_raises, "raised"),
    ],
)
def test_layer_norm_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_layer_norm(wrong), mistake)


def test_layer_norm_accepts_other_routes():
    assert ex.check_layer_norm(solution_layer_norm) == ex.CORRECT
    rsqrt = lambda x, w, b, e: torch.addcmul(b, (x - x.mean(-1, True)) * torch.rsqrt(x.var(-1, False, True) + e), w)
    assert ex.check_layer_norm(rsqrt) == ex.CORRECT
    float64 = lambda x, w, b, e: solution_layer_norm(x.double(), w.double(), b.double(), e)
    assert ex.check_layer_norm(float64) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, s, n: n(x + s(x)), "post-ln"),
        (lambda x, s, n: s(n(x)), "no-residual"),
        (lambda x, s, n: n(x) + s(n(x)), "normalised-residual"),
        (lambda x, s, n: x + n(s(x)), "normalised-output"),
        (lambda x, s, n: n(x + s(n(x))), "normalised-sum"),
        (lambda x, s, n: x + s(x), "no-norm"),
        (lambda x, s, n: x + s(nn.LayerNorm(x.shape[-1])(x)), "new-norm"),
        (lambda x, s, n: x + s(n(x)) * 0.5, "other"),
        (lambda x, s, n: (x + s(n(x)))[..., :-1], "shape"),
        (_raises, "raised"),
    ],
)
def test_pre_ln_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_pre_ln(wrong), mistake)


def test_pre_ln_accepts_other_routes():
    assert ex.check_pre_ln(solution_pre_ln) == ex.CORRECT
    assert ex.check_pre_ln(lambda x, s, n: torch.add(s(n(x)), x)) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x: x.mean(-1), "features"),
        (lambda x: x.mean(0), "batch-only"),
        (lambda x: x.mean(1), "positions-only"),
        (lambda x: x.mean(), "one-mean"),
        (lambda x: x.var(dim=(0, 1)), "variance"),
        (lambda x: x[0].mean(0), "other"),
        (lambda x: x.mean(dim=(0, 1))[:6], "shape"),  # right only for d = 6
        (_raises, "raised"),
        (lambda x: x.mean(dim=(0, 1)).tolist(), "not-a-tensor"),
    ],
)
def test_batch_norm_mean_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_batch_norm_mean(wrong), mistake)


def test_batch_norm_mean_accepts_other_routes():
    assert ex.check_batch_norm_mean(solution_batch_norm_mean) == ex.CORRECT
    assert ex.check_batch_norm_mean(lambda x: x.reshape(-1, x.shape[-1]).mean(0)) == ex.CORRECT
    assert ex.check_batch_norm_mean(lambda x: x.mean(dim=(0, 1), keepdim=True)) == ex.CORRECT
    assert ex.check_batch_norm_mean(lambda x: x.sum((0, 1)) / (x.shape[0] * x.shape[1])) == ex.CORRECT


def _depth(num_layers, seed, final_norm=False, norm_first=True, variance=False, reseed=True):
    if reseed:
        tl.set_seed(seed)
    stack = tl.Encoder(
        d_model=32,
        num_heads=4,
        num_layers=num_layers,
        d_ff=64,
        dropout=0.0,
        norm_first=norm_first,
        final_norm=final_norm,
    ).eval()
    with torch.no_grad():
        out = stack(torch.randn(4, 10, 32))
    return (out.var() if variance else out.std()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n, s: 1.1 if n == 1 else 1.9, "other"),  # constants
        (lambda n, s: (1 + 0.03 * n) ** 0.5, "other"),  # a formula of the depth, not a measurement
        (lambda n, s: _depth(n, s, final_norm=True), "normalised"),
        (lambda n, s: _depth(n, s, norm_first=False), "normalised"),
        (lambda n, s: _depth(n, s, variance=True), "variance"),
        (lambda n, s: _depth(n, 0), "other"),  # measures on its own seed
        (_raises, "raised"),
        (lambda n, s: "about 2", "not-a-number"),
    ],
)
def test_depth_growth_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_depth_growth(wrong), mistake)


def test_depth_growth_accepts_the_notebook_solution():
    assert ex.check_depth_growth(solution_depth_growth) == ex.CORRECT
