"""Mutation suite for the checkers of chapter 12 (modern blocks): classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("12_modern_blocks", name)


_raises = raising(RuntimeError("The size of tensor a (8) must match the size of tensor b (6)"))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_rms_norm", ex.check_rms_norm),
        ("solution_rotary", ex.check_rotary),
        ("solution_position_accuracy", ex.check_position_accuracy),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


# ---- RMSNorm ------------------------------------------------------------------------------------


def _ms(x):
    return x.pow(2).mean(-1, keepdim=True)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, w, e: x / (_ms(x).sqrt() + e) * w, "eps-outside-root"),
        (lambda x, w, e: x / _ms(x).sqrt() * w, "no-eps"),
        (lambda x, w, e: x / (_ms(x) + 1e-5).sqrt() * w, "fixed-eps"),
        (lambda x, w, e: x / (_ms(x) + 1e-6).sqrt() * w, "fixed-eps"),
        (lambda x, w, e: F.layer_norm(x, x.shape[-1:], w, None, e), "layer-norm"),
        (lambda x, w, e: (x - x.mean(-1, keepdim=True)) / (_ms(x) + e).sqrt() * w, "centred"),
        (lambda x, w, e: x / (_ms(x) + e).sqrt(), "no-weight"),
        (lambda x, w, e: x / (x.pow(2).sum(-1, keepdim=True) + e).sqrt() * w, "sum"),
        (lambda x, w, e: x / (_ms(x) + e) * w, "no-root"),
        (lambda x, w, e: x / (x.var(-1, unbiased=False, keepdim=True) + e).sqrt() * w, "std"),
        (lambda x, w, e: x / (x.pow(2).mean(0, keepdim=True) + e).sqrt() * w, "first-axis"),
        (lambda x, w, e: x / (_ms(x) + e).sqrt() + w, "weight-added"),
        (lambda x, w, e: x / (_ms(x) + e).sqrt() * w * (_ms(x) / _ms(x)), "nan"),  # 0 / 0 on the zero row
        (lambda x, w, e: x[..., :8] / (_ms(x[..., :8]) + e).sqrt() * w[:8], "shape"),
        (lambda x, w, e: (x / (_ms(x) + e).sqrt() * w).tolist(), "not-a-tensor"),
        (lambda x, w, e: x / (_ms(x) + e).sqrt() * w * 1.1, "other"),  # names no mistake it did not make
        (_raises, "raised"),
    ],
)
def test_rms_norm_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_rms_norm(wrong), mistake)


def test_rms_norm_right_only_for_one_width_fails_naming_the_input():
    feedback = ex.check_rms_norm(lambda x, w, e: x / (x.pow(2).sum(-1, keepdim=True) / 8 + e).sqrt() * w)
    rejected_as(feedback, "other")
    assert "(4, 6)" in feedback


@pytest.mark.parametrize(
    "right",
    [
        lambda x, w, e: F.rms_norm(x, x.shape[-1:], w, e),
        lambda x, w, e: (x.double() * torch.rsqrt(x.double().square().mean(-1, keepdim=True) + e) * w).float(),
        lambda x, w, e: w * x / torch.sqrt(torch.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1] + e),
    ],
)
def test_rms_norm_other_routes_pass(right):
    assert ex.check_rms_norm(right) == ex.CORRECT


# ---- RoPE ---------------------------------------------------------------------------------------


def _rope(x, positions, adjacent=False, exponent=2.0, sign=1.0, arange=False, base=10000.0):
    d = x.shape[-1]
    if arange:
        positions = torch.arange(x.shape[-2])
    rate = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = sign * positions[:, None].double() * rate
    if adjacent:
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1).flatten(-2)
    a, b = x[..., : d // 2].double(), x[..., d // 2 :].double()
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, p: _rope(x, p, adjacent=True), "adjacent-pairs"),
        (lambda x, p: _rope(x, p, sign=-1.0), "reversed"),
        (lambda x, p: _rope(x, p, exponent=4.0), "doubled-exponent"),
        (lambda x, p: _rope(x, p, exponent=1.0), "halved-exponent"),
        (lambda x, p: _rope(x, p, arange=True), "counted-positions"),
        (lambda x, p: x, "unrotated"),
        (lambda x, p: _rope(x, p, base=500.0), "angles"),
        (lambda x, p: _rope(x, p * 2), "angles"),
        (lambda x, p: _rope(x, p) * 1.1, "other"),
        (lambda x, p: tl.apply_rotary(x, p), "by-hand"),
        (lambda x, p: tl.positional.turn(x, *tl.positional.rotary_tables(p, x.shape[-1])), "by-hand"),
        (lambda x, p: _rope(x, p)[..., :-1, :], "shape"),
        (_raises, "raised"),
    ],
)
def test_rotary_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_rotary(wrong), mistake)


def test_rotary_refuses_the_library_call_however_it_was_imported():
    from transformer_lib.positional import apply_rotary

    rejected_as(ex.check_rotary(lambda x, p: apply_rotary(x, p)), "by-hand")
    assert torch.equal(tl.apply_rotary(torch.ones(1, 2, 4), torch.zeros(2)), torch.ones(1, 2, 4))  # given back


def _rope_complex(x, positions):
    d = x.shape[-1]
    rate = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions[:, None] * rate)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double()) * turn
    return torch.cat([z.real, z.imag], -1).float()


@pytest.mark.parametrize("right", [_rope, _rope_complex])
def test_rotary_other_routes_pass(right):
    assert ex.check_rotary(right) == ex.CORRECT


# ---- accuracy per position ----------------------------------------------------------------------


def _accuracy(p, t, s, offset=None):
    offset = s if offset is None else offset
    T = t.shape[1]
    return (p[:, s:] == t[:, s - offset : T - offset]).float().mean(0)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda p, t, s: (p[:, :-s] == t[:, s:]).float().mean(0), "wrong-way"),
        (lambda p, t, s: _accuracy(p, t, s, offset=0), "no-shift"),  # not called the wrong way
        (lambda p, t, s: _accuracy(p, t, s, offset=1), "off-by-one"),
        (lambda p, t, s: (p == t.roll(s, 1)).float().mean(0), "all-positions"),
        (lambda p, t, s: (p[:, s:] == t[:, :-s]).float().mean(1), "per-sequence"),
        (lambda p, t, s: (p[:, s:] == t[:, :-s]).float().sum(0), "counts"),
        (lambda p, t, s: (p[:, s:] != t[:, :-s]).float().mean(0), "error-rate"),
        (lambda p, t, s: (p[:, 3:] == t[:, :-3]).float().mean(0), "shape"),  # a fixed shift=3: fails on shift=1
        (lambda p, t, s: (p[:, s:] == t[:, :-s]).sum(0), "counts"),
        (lambda p, t, s: (p[:, s:] == t[:, :-s]).float().mean(0) + 0.01, "other"),
        (lambda p, t, s: (p[:, s:] == t[:, :-s]).float().mean().item(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_position_accuracy_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_position_accuracy(wrong), mistake)


@pytest.mark.parametrize(
    "right",
    [
        lambda p, t, s: _accuracy(p, t, s).double(),
        lambda p, t, s: torch.stack([(p[:, i] == t[:, i - s]).float().mean() for i in range(s, p.shape[1])]),
    ],
)
def test_position_accuracy_other_routes_pass(right):
    assert ex.check_position_accuracy(right) == ex.CORRECT
