"""FlashAttention in Triton (transformer_lib.flash_triton) against F.scaled_dot_product_attention, values and
gradients. On a CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, which the repository's
conftest.py sets before anything imports triton); on a GPU, compiled. Triton is the `triton` extra: without it
these tests skip, except under CI=true, where `make test` installs it and a missing Triton is a failure."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import flash, flash_triton

if importlib.util.find_spec("triton") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("CI=true but Triton is not installed: make install installs the triton extra")
    pytest.skip("Triton is not installed (pip install -e '.[triton]')", allow_module_level=True)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(Tq, Tk, d, dv, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 3, Tq, d, generator=g, dtype=dtype), torch.randn(2, 3, Tk, d, generator=g, dtype=dtype)
    v = torch.randn(2, 3, Tk, dv, generator=g, dtype=dtype)
    return [x.to(DEVICE).requires_grad_() for x in (q, k, v)]


CASES = [  # (Tq, Tk, d, dv): lengths that are no multiple of the 32-row tiles, one token, Tq != Tk both ways,
    (37, 37, 16, 16),  # a head width that is no power of 2, dv != d
    (1, 1, 8, 8),
    (70, 70, 24, 8),
    (20, 53, 16, 12),
    (53, 20, 16, 16),
]


@pytest.mark.slow  # the interpreter runs each program in NumPy: a second or so a case
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Tq, Tk, d, dv", CASES)
def test_values_and_gradients_are_pytorchs_fused_attention(Tq, Tk, d, dv, causal, dtype, tol):
    q, k, v = _qkv(Tq, Tk, d, dv, dtype, seed=Tq + Tk)
    out = flash_triton.flash_attention_triton(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    grad = torch.randn_like(out)
    mine = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(ref, (q, k, v), grad)
    for name, a, b in zip("qkv", mine, theirs):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m, name=name: f"d{name}: {m}")


@pytest.mark.slow
def test_the_kernel_returns_the_log_sum_exp_of_the_pytorch_version():
    q, k, v = _qkv(45, 45, 16, 16, torch.float64, seed=0)
    out, lse = flash_triton.triton_forward(q.detach(), k.detach(), v.detach(), causal=True, scale=0.3)
    ref_out, ref_lse = flash.flash_forward(q.detach().cpu(), k.detach().cpu(), v.detach().cpu(), causal=True, scale=0.3)
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(lse.cpu(), ref_lse)
    scores = (q @ k.transpose(-2, -1) * 0.3).masked_fill(torch.ones(45, 45, device=DEVICE).triu(1).bool(), -torch.inf)
    torch.testing.assert_close(lse, scores.logsumexp(-1).detach())  # the closed form


def test_bad_input_gets_a_clear_error():
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="must agree"):
        flash_triton.flash_attention_triton(q, torch.randn(1, 4, 6), torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="float32 or all float64"):
        flash_triton.flash_attention_triton(q.half(), q.half(), q.half())
    with pytest.raises(ValueError, match="same number of axes"):
        flash_triton.flash_attention_triton(q, q[0], q)


def test_without_a_gpu_or_the_interpreter_it_says_what_to_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    ok, why = flash_triton.available()
    assert not ok and "TRITON_INTERPRET=1" in why
    with pytest.raises(RuntimeError, match="cannot run here: no GPU here"):
        flash_triton.flash_attention_triton(torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8))
