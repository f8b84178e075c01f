"""Checkers for the exercises of the token-embedding chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..positional import sinusoidal_encoding
from ..tasks import pad_sequences
from ._common import CORRECT, Wrong, _seeded, aten_ops, checker, measure, no, refusing, reproducible, run
from ._match import _close, expect_tensor

__all__ = ["check_embed", "check_embedding_parameters", "check_pad", "check_scale_ratio"]

_LOOKUPS = (F.embedding, torch.embedding, torch.index_select, torch.Tensor.index_select, torch.take, torch.gather)
# every way of reading rows of the table by position, where all spellings end (indexing, .gather, .take,
# index_select, embedding, one row at a time, unbind or split): refused on the table, a view of it or a copy
_LOOKUP_OPS = aten_ops(
    *"index index_select embedding gather take take_along_dim select unbind split split_with_sizes".split(),
    *"unsafe_split narrow slice chunk unsafe_chunk _embedding_bag".split(),
)


@checker
def check_embed(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(ids (B, S), table (V, d)) must return table rows (B, S, d) via a one-hot product, without indexing."""
    g = _seeded(123)
    for (B, S), V, d in (((3, 4), 11, 5), ((2, 7), 20, 8), ((1, 3), 6, 3)):
        table = torch.randn(V, d, generator=g, dtype=torch.float32)
        ids = torch.randint(0, V - 2, (B, S), generator=g)  # the last ids never occur: one_hot must be told V
        ids[0, 0] = 0
        case = f"ids of shape {(B, S)} and a table of shape {(V, d)} (torch.float32)"
        guarded = refusing(fn, *_LOOKUPS, ops=_LOOKUP_OPS, source=table)
        try:
            result = run(guarded, ids.clone(), table, case=case, names="a lookup of the table's rows")
        except Wrong as wrong:  # what the errors that a one-hot product raises mean
            error = wrong.verdict
            if error.mistake == "raised" and "shapes cannot be multiplied" in error:
                return no("one-hot-size", f"{error} F.one_hot(ids) sizes it by the largest id: pass table.shape[0].")
            if error.mistake == "raised" and ("dtype" in error or "scalar type" in error):
                return no("one-hot-dtype", f"{error} F.one_hot gives integers: convert it to the table's dtype first.")
            raise
        if isinstance(result, torch.Tensor) and result.shape == (B, S, V):
            return no("one-hot", f"On {case} you returned the one-hot vectors (B, S, V): multiply them by the table.")
        expect_tensor(result, table[ids], case)
        if _close(result, table[ids]):
            continue
        if _close(result, table[(ids + 1) % V]) or _close(result, table[(ids - 1) % V]):
            return no("off-by-one", f"On {case}: off by one row. Id t must bring back row t (ids count from 0).")
        return no("other", f"On {case}: right shape, wrong values. Row t of the table should come back for id t.")
    return CORRECT


@checker
def check_embedding_parameters(fn: Callable[[int, int], int]) -> str:
    """fn(vocab_size, d_model) must return the number of parameters of an embedding table."""
    for v, d in ((10, 4), (32_000, 512), (7, 3), (50_257, 768)):
        got = measure("the number of parameters", run(fn, v, d, case=f"vocab_size={v}, d_model={d}"))[0]
        if got == v * d:
            continue
        case = f"For vocab_size={v}, d_model={d}"
        if got in (v * d + d, v * d + v):
            return no("bias", f"{case}: an embedding table has no bias. It is only the V x d matrix.")
        if got == v + d:
            return no("added", f"{case}: one number per token per dimension, so multiply: V x d.")
        if got in (4 * v * d, 2 * v * d, 8 * v * d):
            return no("bytes", f"{case} you got {got:g}: count parameters (numbers), not bytes or two tables: V x d.")
        return no("other", f"{case} expected {v * d}, got {got:g}.")
    return CORRECT


@checker
def check_pad(fn: Callable[[list, int], torch.Tensor]) -> str:
    """fn(seqs, pad_id) must right-pad id lists into a (B, S_max) long tensor."""
    for seqs, pad in (([[5, 6, 7], [8]], 0), ([[1], [2, 3], []], 9), ([[4, 4]], 3), ([[7, 1, 2, 2], [2], [0, 5]], 2)):
        case = f"seqs={seqs}, pad_id={pad}"
        result = run(fn, [list(s) for s in seqs], pad, case=case)
        want = pad_sequences(seqs, pad)
        if isinstance(result, torch.Tensor) and result.shape[-1:] == (want.shape[1] + 1,):
            return no("too-long", f"On {case} the rows are one too long: pad to the longest sequence, {want.shape[1]}.")
        expect_tensor(result, want, case)
        if result.dtype != torch.long:
            values = "the values are right, but " if torch.equal(result.long(), want) else ""
            return no("dtype", f"On {case}: {values}the dtype is {result.dtype}. Ids must be torch.long (for lookups).")
        if torch.equal(result, want):
            continue
        left = torch.tensor([[pad] * (want.shape[1] - len(q)) + list(q) for q in seqs], dtype=torch.long)
        if torch.equal(result, left):
            return no("left", f"On {case} the padding is on the left. Put it on the right, after the real tokens.")
        if torch.equal(result, pad_sequences(seqs, 0)):
            return no("zero-pad", f"On {case} you padded with 0: use the pad_id you are given ({pad}).")
        return no("other", f"On {case} expected {want.tolist()}, got {result.tolist()}.")
    return CORRECT


def _ratio(d_model: int, generator: torch.Generator, scale: bool = True) -> float:
    tokens = torch.randn(500, d_model, generator=generator) * (d_model**0.5 if scale else 1.0)
    return (tokens.norm(dim=-1).mean() / sinusoidal_encoding(500, d_model).norm(dim=-1).mean()).item()


@checker
def check_scale_ratio(fn) -> str:
    """Experiment: fn(d_model, generator) measures the token-to-position norm ratio for nn.Embedding's N(0, 1) start:
    the mean norm of sqrt(d) * 500 embedding rows drawn with the generator over that of the encoding's rows."""
    # it comes out near sqrt(2 d): an N(0, 1) row has norm about sqrt(d), a sinusoidal row exactly sqrt(d / 2)
    results = {}
    for d, seed in ((64, 61), (512, 62), (96, 63)):
        case = f"d_model={d} with a generator seeded {seed}"
        got = results[d] = measure("the ratio", run(fn, d, _seeded(seed), case=case))[0]
        want = (2 * d) ** 0.5
        if math.isclose(got, _ratio(d, _seeded(seed)), rel_tol=1e-4) or abs(got - want) < 0.05 * want:
            continue  # the same draw, or another route within the sampling spread
        if math.isclose(got, _ratio(d, _seeded(seed), scale=False), rel_tol=1e-3) or abs(got - 2**0.5) < 0.1:
            return no("unscaled", f"For {case} you get about sqrt(2): multiply the embeddings by sqrt(d_model) first.")
        if abs(got * want - 1) < 0.05:
            return no("inverted", f"For {case}: the ratio is upside down. Divide the embedding norm by the encoding's.")
        return no("other", f"For {case} expected a ratio near {want:.1f} (sqrt(2 d)), measured {got:.3g}.")
    draw = "draw the 500 token vectors"
    reproducible(fn, results[64], (64, _seeded(61)), (64, _seeded(64)), case="d_model=64", what="the ratio", draw=draw)
    return CORRECT
