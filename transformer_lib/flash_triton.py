"""FlashAttention in Triton: the algorithm of `tl.flash`, written as three GPU kernels in `triton.language`.

`tl.flash` walks over tiles with Python loops; here one Triton *program* handles one tile of queries (forward, and
dQ in the backward pass) or one tile of keys (dK and dV), for one (batch, head), and the tiles run in parallel.
Inside a program, `tl.load` reads a tile from memory into the chip's fast memory, `tl.dot` multiplies two tiles,
and the online softmax's running maximum, sum and output live there until `tl.store` writes the finished rows: the
T x T matrix is never written anywhere.

- `forward`: per query tile, loop over key tiles (causal: only those at or before the tile's last query), keep
  m, l and the unnormalised output, write the output and each row's log-sum-exp m + log l.
- `backward_dkdv`: per key tile, loop over the query tiles that see it, recompute P = exp(S - lse) from the saved
  log-sum-exp, and add up dV += P^T dO and dK += dS^T Q s, with dS = P * (dO V^T - D), D = rowsum(dO * O).
- `backward_dq`: per query tile, loop over its key tiles, dQ += dS K s.

Triton compiles for NVIDIA (and AMD) GPUs. On a CPU it runs the same kernels in its **interpreter**, one program
at a time in NumPy, when the environment variable TRITON_INTERPRET=1 is set when a kernel is made (`@triton.jit`
reads it; this module makes its kernels on their first call), so set it before anything uses Triton: slow, but
the same code, checked the same way. Triton is an optional dependency (the `triton` extra, about 0.7 GB installed):
`available()` says whether it can run here, and `flash_attention_triton` raises a clear error where it cannot.
float32 and float64 only; `tl.dot` is asked for IEEE float32, so that a GPU would not round float32 to TF32. So
far the kernels have run only in the interpreter, never compiled on a GPU. `tests/unit/test_flash_triton.py`
checks values and gradients, causal or not, at lengths that are no multiple of a tile.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os

import torch

__all__ = ["available", "flash_attention_triton", "triton_forward"]

BLOCK_Q = 32  # query rows per program
BLOCK_K = 32  # key rows per inner step


def available() -> tuple[bool, str]:
    """(whether the Triton kernels can run here, why not if they cannot)."""
    if importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed: pip install -e '.[triton]' (about 0.7 GB)"
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return True, ""
    return (
        False,
        "no GPU here: set TRITON_INTERPRET=1 before anything uses triton to run its interpreter on the CPU",
    )


@functools.cache
def _kernels():
    """Define the kernels once, on first use (so that importing this module needs no Triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def forward(Q, K, V, OUT, LSE, Tq, Tk, d, dv, scale,
                CAUSAL: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr,
                BDV: tl.constexpr):  # fmt: skip
        # Q (BH, Tq, d), K (BH, Tk, d), V (BH, Tk, dv), OUT (BH, Tq, dv), LSE (BH, Tq), all contiguous
        tile, bh = tl.program_id(0), tl.program_id(1)
        rows = tile * BQ + tl.arange(0, BQ)  # (BQ,)
        dims, vdims = tl.arange(0, BD), tl.arange(0, BDV)  # (BD,), (BDV,): padded to powers of 2
        q = tl.load(Q + bh * Tq * d + rows[:, None] * d + dims[None, :],
                    mask=(rows[:, None] < Tq) & (dims[None, :] < d), other=0.0)  # (BQ, BD)  # fmt: skip
        m = tl.full((BQ,), float("-inf"), q.dtype)  # the running maximum
        total = tl.zeros((BQ,), q.dtype)  # the running sum of exp(s - m)
        acc = tl.zeros((BQ, BDV), q.dtype)  # the unnormalised output
        end = Tk
        if CAUSAL:  # a constexpr: the branch is chosen when the kernel is compiled
            end = tl.minimum(Tk, (tile + 1) * BQ)  # key tiles after the tile's last query are wholly masked
        for k0 in range(0, end, BK):
            cols = k0 + tl.arange(0, BK)  # (BK,)
            k = tl.load(K + bh * Tk * d + cols[:, None] * d + dims[None, :],
                        mask=(cols[:, None] < Tk) & (dims[None, :] < d), other=0.0)  # (BK, BD)  # fmt: skip
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # (BQ, BK)
            seen = cols[None, :] < Tk
            if CAUSAL:
                seen = seen & (cols[None, :] <= rows[:, None])
            s = tl.where(seen, s, float("-inf"))
            new = tl.maximum(m, tl.max(s, 1))  # (BQ,)
            safe = tl.where(new == float("-inf"), 0.0, new)  # a row with nothing seen yet
            p = tl.exp(s - safe[:, None])  # (BQ, BK)
            shrink = tl.exp(m - safe)  # (BQ,)
            total = total * shrink + tl.sum(p, 1)
            v = tl.load(V + bh * Tk * dv + cols[:, None] * dv + vdims[None, :],
                        mask=(cols[:, None] < Tk) & (vdims[None, :] < dv), other=0.0)  # (BK, BDV)  # fmt: skip
            acc = acc * shrink[:, None] + tl.dot(p, v, input_precision="ieee")
            m = new
        out = acc / total[:, None]  # (BQ, BDV)
        tl.store(OUT + bh * Tq * dv + rows[:, None] * dv + vdims[None, :], out,
                 mask=(rows[:, None] < Tq) & (vdims[None, :] < dv))  # fmt: skip
        tl.store(LSE + bh * Tq + rows, m + tl.log(total), mask=rows < Tq)

    @triton.jit
    def backward_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, Tq, Tk, d, dv, scale,
                      CAUSAL: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr,
                      BDV: tl.constexpr):  # fmt: skip
        tile, bh = tl.program_id(0), tl.program_id(1)
        cols = tile * BK + tl.arange(0, BK)  # (BK,): this program's keys
        dims, vdims = tl.arange(0, BD), tl.arange(0, BDV)
        k = tl.load(K + bh * Tk * d + cols[:, None] * d + dims[None, :],
                    mask=(cols[:, None] < Tk) & (dims[None, :] < d), other=0.0)  # (BK, BD)  # fmt: skip
        v = tl.load(V + bh * Tk * dv + cols[:, None] * dv + vdims[None, :],
                    mask=(cols[:, None] < Tk) & (vdims[None, :] < dv), other=0.0)  # (BK, BDV)  # fmt: skip
        dk = tl.zeros((BK, BD), k.dtype)
        dvv = tl.zeros((BK, BDV), k.dtype)
        start = 0
        if CAUSAL:
            start = (tile * BK // BQ) * BQ  # queries before this tile's first key see none of it
        for q0 in range(start, Tq, BQ):
            rows = q0 + tl.arange(0, BQ)  # (BQ,)
            q = tl.load(Q + bh * Tq * d + rows[:, None] * d + dims[None, :],
                        mask=(rows[:, None] < Tq) & (dims[None, :] < d), other=0.0)  # (BQ, BD)  # fmt: skip
            do = tl.load(DO + bh * Tq * dv + rows[:, None] * dv + vdims[None, :],
                         mask=(rows[:, None] < Tq) & (vdims[None, :] < dv), other=0.0)  # (BQ, BDV)  # fmt: skip
            lse = tl.load(LSE + bh * Tq + rows, mask=rows < Tq, other=0.0)  # (BQ,)
            delta = tl.load(DELTA + bh * Tq + rows, mask=rows < Tq, other=0.0)  # (BQ,)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # (BQ, BK)
            seen = (rows[:, None] < Tq) & (cols[None, :] < Tk)
            if CAUSAL:
                seen = seen & (cols[None, :] <= rows[:, None])
            p = tl.where(seen, tl.exp(s - lse[:, None]), 0.0)  # (BQ, BK): the weights, recomputed
            dvv += tl.dot(tl.trans(p), do, input_precision="ieee")  # (BK, BDV)
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")  # (BQ, BK)
            ds = p * (dp - delta[:, None])  # (BQ, BK)
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale  # (BK, BD)
        tl.store(DK + bh * Tk * d + cols[:, None] * d + dims[None, :], dk,
                 mask=(cols[:, None] < Tk) & (dims[None, :] < d))  # fmt: skip
        tl.store(DV + bh * Tk * dv + cols[:, None] * dv + vdims[None, :], dvv,
                 mask=(cols[:, None] < Tk) & (vdims[None, :] < dv))  # fmt: skip

    @triton.jit
    def backward_dq(Q, K, V, DO, LSE, DELTA, DQ, Tq, Tk, d, dv, scale,
                    CAUSAL: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr,
                    BDV: tl.constexpr):  # fmt: skip
        tile, bh = tl.program_id(0), tl.program_id(1)
        rows = tile * BQ + tl.arange(0, BQ)
        dims, vdims = tl.arange(0, BD), tl.arange(0, BDV)
        q = tl.load(Q + bh * Tq * d + rows[:, None] * d + dims[None, :],
                    mask=(rows[:, None] < Tq) & (dims[None, :] < d), other=0.0)  # (BQ, BD)  # fmt: skip
        do = tl.load(DO + bh * Tq * dv + rows[:, None] * dv + vdims[None, :],
                     mask=(rows[:, None] < Tq) & (vdims[None, :] < dv), other=0.0)  # (BQ, BDV)  # fmt: skip
        lse = tl.load(LSE + bh * Tq + rows, mask=rows < Tq, other=0.0)
        delta = tl.load(DELTA + bh * Tq + rows, mask=rows < Tq, other=0.0)
        dq = tl.zeros((BQ, BD), q.dtype)
        end = Tk
        if CAUSAL:  # a constexpr: the branch is chosen when the kernel is compiled
            end = tl.minimum(Tk, (tile + 1) * BQ)  # key tiles after the tile's last query are wholly masked
        for k0 in range(0, end, BK):
            cols = k0 + tl.arange(0, BK)
            k = tl.load(K + bh * Tk * d + cols[:, None] * d + dims[None, :],
                        mask=(cols[:, None] < Tk) & (dims[None, :] < d), other=0.0)  # (BK, BD)  # fmt: skip
            v = tl.load(V + bh * Tk * dv + cols[:, None] * dv + vdims[None, :],
                        mask=(cols[:, None] < Tk) & (vdims[None, :] < dv), other=0.0)  # (BK, BDV)  # fmt: skip
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            seen = (rows[:, None] < Tq) & (cols[None, :] < Tk)
            if CAUSAL:
                seen = seen & (cols[None, :] <= rows[:, None])
            p = tl.where(seen, tl.exp(s - lse[:, None]), 0.0)
            ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
            dq += tl.dot(ds, k, input_precision="ieee") * scale
        tl.store(DQ + bh * Tq * d + rows[:, None] * d + dims[None, :], dq,
                 mask=(rows[:, None] < Tq) & (dims[None, :] < d))  # fmt: skip

    return triton, forward, backward_dkdv, backward_dq


def _padded(n: int) -> int:
    """A tile's width for n numbers: the next power of 2, at least 16 (tl.dot's smallest on a GPU)."""
    return max(16, 1 << (n - 1).bit_length())


def _flat(x: torch.Tensor) -> torch.Tensor:
    """(..., T, d) -> (BH, T, d), contiguous: the kernels index it as one block per (batch, head)."""
    return x.reshape(-1, *x.shape[-2:]).contiguous()


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    ok, why = available()
    if not ok:
        raise RuntimeError(f"the Triton kernels cannot run here: {why}")
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must be (..., T, d) with the same number of axes, got {q.dim()}, {k.dim()}, {v.dim()}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"q (..., Tq, d), k (..., Tk, d) and v (..., Tk, dv) must agree, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")  # fmt: skip
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"q, k and v must all be float32 or all float64, got {q.dtype}, {k.dtype}, {v.dtype}")
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" and not q.is_cuda:
        raise ValueError("compiled Triton kernels read GPU memory: move q, k and v to the GPU (q.cuda())")


def triton_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel: q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (out (..., Tq, dv), log-sum-exp of
    each query's scores (..., Tq)), as `tl.flash.flash_forward` returns them."""
    _check(q, k, v)
    triton, forward, _, _ = _kernels()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    fq, fk, fv = _flat(q), _flat(k), _flat(v)  # (BH, Tq, d), (BH, Tk, d), (BH, Tk, dv)
    BH, Tq, d = fq.shape
    Tk, dv = fk.shape[1], fv.shape[2]
    out = torch.empty(BH, Tq, dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(BH, Tq, dtype=q.dtype, device=q.device)
    grid = (triton.cdiv(Tq, BLOCK_Q), BH)  # one program per query tile and (batch, head)
    forward[grid](fq, fk, fv, out, lse, Tq, Tk, d, dv, scale,
                  CAUSAL=causal, BQ=BLOCK_Q, BK=BLOCK_K, BD=_padded(d), BDV=_padded(dv))  # fmt: skip
    return out.reshape(*q.shape[:-1], dv), lse.reshape(q.shape[:-1])


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse = triton_forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        triton, _, backward_dkdv, backward_dq = _kernels()
        fq, fk, fv, fdo = _flat(q), _flat(k), _flat(v), _flat(grad_out)
        BH, Tq, d = fq.shape
        Tk, dv = fk.shape[1], fv.shape[2]
        delta = (_flat(out) * fdo).sum(-1).contiguous()  # (BH, Tq): D = rowsum(dO * O)
        flse = lse.reshape(BH, Tq).contiguous()
        dq, dk, dvv = torch.empty_like(fq), torch.empty_like(fk), torch.empty_like(fv)
        shape = dict(CAUSAL=ctx.causal, BQ=BLOCK_Q, BK=BLOCK_K, BD=_padded(d), BDV=_padded(dv))
        backward_dkdv[(triton.cdiv(Tk, BLOCK_K), BH)](fq, fk, fv, fdo, flse, delta, dk, dvv, Tq, Tk, d, dv,
                                                      ctx.scale, **shape)  # fmt: skip
        backward_dq[(triton.cdiv(Tq, BLOCK_Q), BH)](fq, fk, fv, fdo, flse, delta, dq, Tq, Tk, d, dv, ctx.scale, **shape)
        return dq.reshape(q.shape), dk.reshape(k.shape), dvv.reshape(v.shape), None, None


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Attention by the Triton kernels, with gradients: q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq,
    dv). The same numbers as F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale), to rounding;
    causal masks key j > query i (top left, as F.scaled_dot_product_attention does)."""
    return _TritonAttention.apply(q, k, v, causal, scale)
