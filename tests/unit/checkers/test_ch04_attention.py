"""Mutation suite for the attention chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


# The notebook's solutions (notebooks/04_attention.ipynb).
def solution_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1) @ v


def solution_split(t, h):
    B, S, d_model = t.shape
    return t.view(B, S, h, d_model // h).transpose(1, 2)


def solution_score_std(d_k, generator):
    q = torch.randn(10_000, d_k, generator=generator)
    k = torch.randn(10_000, d_k, generator=generator)
    return (q * k).sum(-1).std().item()


def solution_scaling_gradient(d_k, scale, generator):
    q, k = torch.randn(64, d_k, generator=generator), torch.randn(16, d_k, generator=generator)
    scores = (q @ k.T / (math.sqrt(d_k) if scale else 1.0)).requires_grad_()
    (scores.softmax(-1) * torch.randn(64, 16, generator=generator)).sum().backward()
    return scores.grad.norm(dim=-1).mean().item()


def _attention(q, k, v, divisor=None, axis=-1):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if divisor is None else divisor)
    return s.softmax(axis) @ v


def _naive_attention(q, k, v, stable=False):
    """A softmax written out, exp over its sum: without the row's max taken off, exp overflows above about 88."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    e = (s - s.amax(-1, keepdim=True) if stable else s).exp()
    return e / e.sum(-1, keepdim=True) @ v


_raises = raising(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda q, k, v: _attention(q, k, v, divisor=1.0), "unscaled"),
        (lambda q, k, v: _attention(q, k, v, divisor=q.shape[-1]), "divided-by-d_k"),
        (lambda q, k, v: _attention(q, k, v, axis=-2), "softmax-axis"),
        (lambda q, k, v: _attention(q, k, v, divisor=4.0), "fixed-d_k"),
        (lambda q, k, v: _attention(q, k, v, divisor=math.sqrt(v.shape[-1])), "scaled-by-d_v"),
        (lambda q, k, v: (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1), "weights"),
        (lambda q, k, v: tl.scaled_dot_product_attention(q, k, v)[0], "by-hand"),
        (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), "by-hand"),
        (lambda q, k, v: tl.fused_attention(q, k, v), "by-hand"),
        (_raises, "raised"),
        (lambda q, k, v: _attention(q, k, v) + 0.01, "other"),
        (_naive_attention, "overflow"),  # right on small scores, inf / inf on large ones
    ],
)
def test_attention_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_attention(wrong), mistake)


def test_attention_accepts_other_routes():
    assert ex.check_attention(solution_attention) == ex.CORRECT
    einsum = lambda q, k, v: torch.einsum("...qk,...kd->...qd", _einsum_weights(q, k), v)
    assert ex.check_attention(einsum) == ex.CORRECT
    assert ex.check_attention(lambda q, k, v: _attention(q.double(), k.double(), v.double())) == ex.CORRECT
    assert ex.check_attention(lambda q, k, v: _naive_attention(q, k, v, stable=True)) == ex.CORRECT


def _einsum_weights(q, k):
    return (torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5).softmax(-1)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda t, h: t.view(t.shape[0], h, t.shape[1], -1), "reshape"),
        (lambda t, h: t.view(t.shape[0], t.shape[1], h, -1), "head-axis"),
        (lambda t, h: t.view(t.shape[0], t.shape[1], -1, h).permute(0, 3, 1, 2), "strided-heads"),
        (lambda t, h: t.view(t.shape[0], t.shape[1], 3, -1).transpose(1, 2), "raised"),  # a fixed h=3: fails on h=4
        (lambda t, h: t, "shape"),
        (lambda t, h: t.view(t.shape[0], t.shape[1], h, -1).transpose(1, 2).flip(1), "other"),
        (_raises, "raised"),
    ],
)
def test_split_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_split(wrong), mistake)


def test_split_accepts_other_routes():
    assert ex.check_split(solution_split) == ex.CORRECT
    assert ex.check_split(lambda t, h: t.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)) == ex.CORRECT
    assert ex.check_split(lambda t, h: torch.stack(t.chunk(h, dim=-1), dim=1)) == ex.CORRECT


def _score_std(d_k, generator, variance=False, scaled=False, mean=False):
    dots = (torch.randn(10_000, d_k, generator=generator) * torch.randn(10_000, d_k, generator=generator)).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return (dots.mean() if mean else dots.var() if variance else dots.std()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda d, g: math.sqrt(d), "not-measured"),  # the closed form
        (lambda d, g: 8.0, "not-measured"),  # a constant
        (lambda d, g: _score_std(d, g, variance=True), "variance"),
        (lambda d, g: _score_std(d, g, scaled=True), "scaled"),
        (lambda d, g: _score_std(d, g, mean=True), "mean"),
        (lambda d, g: _score_std(d, torch.Generator().manual_seed(0)), "not-measured"),
        (lambda d, g: _score_std(d, g) * 1.5, "other"),
        (_raises, "raised"),
        (lambda d, g: "about 8", "not-a-number"),
    ],
)
def test_score_std_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_score_std(wrong), mistake)


def test_score_std_accepts_other_routes():
    assert ex.check_score_std(solution_score_std) == ex.CORRECT
    # another sampling route: batched matrix products of (1, d) rows with (d, 1) columns
    bmm = lambda d, g: (torch.randn(30_000, 1, d, generator=g) @ torch.randn(30_000, d, 1, generator=g)).std().item()
    assert ex.check_score_std(bmm) == ex.CORRECT


def _gradient(d_k, scale, generator, divisor=None, reduce="mean", swap=False):
    q, k = torch.randn(64, d_k, generator=generator), torch.randn(16, d_k, generator=generator)
    if swap:
        k, q = torch.randn(16, d_k, generator=generator), torch.randn(64, d_k, generator=generator)
    d = (math.sqrt(d_k) if scale else 1.0) if divisor is None else divisor(d_k)
    scores = (q @ k.T / d).requires_grad_()
    (scores.softmax(-1) * torch.randn(64, 16, generator=generator)).sum().backward()
    norms = scores.grad.norm(dim=-1)
    return (norms.mean() if reduce == "mean" else norms.sum()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda d, s, g: 0.28 if s or d < 10 else 0.08, "other"),  # constants
        (lambda d, s, g: _gradient(d, True, g), "always-scaled"),
        (lambda d, s, g: _gradient(d, False, g), "never-scaled"),
        (lambda d, s, g: _gradient(d, s, g, divisor=lambda d: d if s else 1.0), "divided-by-d_k"),
        (lambda d, s, g: _gradient(d, s, g, reduce="sum"), "sum"),
        (lambda d, s, g: _gradient(d, s, torch.Generator().manual_seed(31)), "not-measured"),
        (lambda d, s, g: 0.0, "no-gradient"),
        (_raises, "raised"),
    ],
)
def test_scaling_gradient_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_scaling_gradient(wrong), mistake)


def test_scaling_gradient_wants_the_generator_used():
    # the right recipe, but with a fresh seed of its own every call: right in spread, not reproducible
    counter = iter(range(10**6))
    feedback = ex.check_scaling_gradient(lambda d, s, g: _gradient(d, s, torch.Generator().manual_seed(next(counter))))
    rejected_as(feedback, "seed-ignored")


def test_scaling_gradient_accepts_other_routes():
    assert ex.check_scaling_gradient(solution_scaling_gradient) == ex.CORRECT
    assert ex.check_scaling_gradient(lambda d, s, g: _gradient(d, s, g, swap=True)) == ex.CORRECT
