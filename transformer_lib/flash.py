"""FlashAttention written out in PyTorch: attention a tile at a time, never holding the T x T matrix.

Softmax needs the largest score of a row and the sum of its exponentials before it can write a single
weight. The **online softmax** (Milakov and Gimelshein, 2018) gets both in one pass: keep a running maximum m
and a running sum l; when a new block of scores raises the maximum to m', rescale what was summed by
exp(m - m') and go on. FlashAttention (Dao et al., 2022; Dao, 2023) applies the same rescaling to the output
itself: for each tile of queries it walks over the tiles of keys and values, keeps m, l (`total` in the code)
and an unnormalised output, and divides by l once at the end. Memory grows with T, not T^2: the scores of one
tile pair at a time.

The backward pass does not store the attention weights either. It keeps only each row's log-sum-exp
(m + log l) from the forward pass, recomputes each tile's weights from it, and forms the gradients tile by tile:
dV += P^T dO, dP = dO V^T, dS = P * (dP - D) with D = rowsum(dO * O), dQ += dS K s, dK += dS^T Q s (s the scale).

This module is that algorithm in plain PyTorch, for reading and for checking; it is slower than PyTorch's fused
kernels, which do the same inside one kernel. `tests/unit/test_flash.py` holds values and gradients to
`F.scaled_dot_product_attention`, causal or not, at lengths that are no multiple of the tile, in float32 and
float64.
"""

from __future__ import annotations

import math

import torch

__all__ = ["online_softmax", "flash_attention", "flash_forward", "flash_backward"]


def online_softmax(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Softmax over the last axis, the maximum and the sum found in ONE pass over blocks of `block` columns.

    x (..., n) -> (..., n). The second loop only writes the weights from the running maximum and sum that the
    first one ended with: no column is read twice to find them."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype, device=x.device)  # (...,): the running maximum
    total = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # (...,): the running sum of exp(x - m)
    for start in range(0, x.shape[-1], block):
        tile = x[..., start : start + block]  # (..., b)
        new = torch.maximum(m, tile.amax(-1))
        safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)  # a row all -inf so far: nothing to scale
        total = total * torch.exp(m - safe) + torch.exp(tile - safe[..., None]).sum(-1)  # rescale the old sum, add
        m = new
    return torch.exp(x - m[..., None]) / total[..., None]


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_q: int, block_k: int) -> None:
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must be (..., T, d) with the same number of axes, got {q.dim()}, {k.dim()}, {v.dim()}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or q.shape[:-2] != k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"q (..., Tq, d), k (..., Tk, d) and v (..., Tk, dv) must agree, got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if block_q < 1 or block_k < 1:
        raise ValueError(f"the tiles must hold at least one row, got block_q={block_q}, block_k={block_k}")


def _tile_scores(q_tile, k_tile, scale, causal, q0, k0):
    """One tile's scores (..., bq, bk), the causal mask applied: query i sees key j when j <= i (top left)."""
    s = q_tile @ k_tile.transpose(-2, -1) * scale  # (..., bq, bk)
    if causal:
        rows = torch.arange(q0, q0 + q_tile.shape[-2], device=s.device)[:, None]  # (bq, 1)
        cols = torch.arange(k0, k0 + k_tile.shape[-2], device=s.device)[None, :]  # (1, bk)
        s = s.masked_fill(cols > rows, -math.inf)
    return s


def _key_starts(q0: int, rows: int, Tk: int, causal: bool, block_k: int) -> range:
    """Where the key tiles start for the query tile of `rows` rows from q0: every tile, or, causal, only those with a
    key at or before the tile's last query (the rest are wholly masked)."""
    return range(0, min(Tk, q0 + rows) if causal else Tk, block_k)


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention a tile at a time: q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (out (..., Tq, dv),
    log-sum-exp of each query's scores (..., Tq)). scale defaults to 1 / sqrt(d); causal masks key j > query i."""
    _check(q, k, v, block_q, block_k)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    Tq, Tk = q.shape[-2], k.shape[-2]
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., Tq, dv)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)  # (..., Tq)
    for q0 in range(0, Tq, block_q):
        q_tile = q[..., q0 : q0 + block_q, :]  # (..., bq, d)
        m = torch.full(q_tile.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)  # (..., bq)
        total = torch.zeros_like(m)  # (..., bq)
        acc = torch.zeros(*q_tile.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., bq, dv)
        for k0 in _key_starts(q0, q_tile.shape[-2], Tk, causal, block_k):
            s = _tile_scores(q_tile, k[..., k0 : k0 + block_k, :], scale, causal, q0, k0)  # (..., bq, bk)
            new = torch.maximum(m, s.amax(-1))  # (..., bq)
            safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)  # a row with nothing seen yet
            p = torch.exp(s - safe[..., None])  # (..., bq, bk): this tile's weights, unnormalised
            shrink = torch.exp(m - safe)  # (..., bq): how much the old maximum overstated the new one
            total = total * shrink + p.sum(-1)
            acc = acc * shrink[..., None] + p @ v[..., k0 : k0 + block_k, :]
            m = new
        out[..., q0 : q0 + block_q, :] = acc / total[..., None]
        lse[..., q0 : q0 + block_q] = m + torch.log(total)
    return out, lse


def flash_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients (dq, dk, dv) of flash_forward's output, the weights recomputed tile by tile from `lse`."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (grad_out * out).sum(-1)  # (..., Tq): rowsum(dO * O), the softmax's correction term
    Tq, Tk = q.shape[-2], k.shape[-2]
    for q0 in range(0, Tq, block_q):
        rows = slice(q0, q0 + block_q)
        q_tile, do_tile = q[..., rows, :], grad_out[..., rows, :]  # (..., bq, d), (..., bq, dv)
        for k0 in _key_starts(q0, q_tile.shape[-2], Tk, causal, block_k):
            cols = slice(k0, k0 + block_k)
            s = _tile_scores(q_tile, k[..., cols, :], scale, causal, q0, k0)  # (..., bq, bk)
            p = torch.exp(s - lse[..., rows, None])  # (..., bq, bk): the weights, as the forward pass had them
            dv[..., cols, :] += p.transpose(-2, -1) @ do_tile
            dp = do_tile @ v[..., cols, :].transpose(-2, -1)  # (..., bq, bk)
            ds = p * (dp - D[..., rows, None])  # (..., bq, bk): through the softmax
            dq[..., rows, :] += ds @ k[..., cols, :] * scale
            dk[..., cols, :] += ds.transpose(-2, -1) @ q_tile * scale
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_q, block_k):
        out, lse = flash_forward(q, k, v, causal, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)  # the log-sum-exp, not the weights: O(T), not O(T^2)
        ctx.settings = (causal, scale, block_q, block_k)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, grad_out.contiguous(), *ctx.settings)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """softmax(q k^T * scale [causal]) v, a tile at a time forward and backward (see the module docstring):
    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq, dv), as F.scaled_dot_product_attention gives it."""
    _check(q, k, v, block_q, block_k)
    return _FlashAttention.apply(q, k, v, causal, scale, block_q, block_k)
