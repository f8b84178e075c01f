"""Checkers for the chapters' exercises: each runs the learner's answer on inputs of its own.

A checker returns "Correct!" or a hint that names what is wrong (a shape, the mask convention, a
forgotten scaling, a failing input). An answer that is still the stub (returns None) gets
"Not answered yet". In the student edition the stubs raise `NotYetDone` instead, and the checker
lets that friendly error through.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .attention import scaled_dot_product_attention
from .encoder import EncoderLayer
from .layers import AddNorm
from .masks import causal_mask, padding_mask, target_mask
from .positional import sinusoidal_encoding

__all__ = [
    "NotYetDone", "CORRECT",
    "check_future_mask", "check_allowed_count", "check_cached_rows",
    "check_embed", "check_embedding_parameters", "check_pad",
    "check_encoding", "check_self_similarity", "check_wavelength",
    "check_attention", "check_split", "check_score_std",
    "check_padding_mask", "check_target_mask", "check_masks_needed",
    "check_layer_norm", "check_pre_ln", "check_batch_norm_mean",
    "check_mean_pool", "check_pre_ln_layer", "check_first_pool",
    "check_sample", "check_windows", "check_kv_cache_bytes",
    "check_shift", "check_greedy", "check_loss_positions",
]  # fmt: skip

CORRECT = "Correct!"
_TODO = "Not answered yet: write your answer in the exercise cell, run it, then run this cell again."


class NotYetDone(NotImplementedError):
    """Raised by an exercise stub in the student edition: the exercise is still to be done."""

    def __init__(self, exercise: str = "this exercise"):
        super().__init__(f"{exercise} is not done yet. Write your answer in its cell, run it, then run the checker.")


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _close(a, b, atol=1e-5) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol)


# ---- 00 template ------------------------------------------------------------------------------


def check_future_mask(fn: Callable[[int], torch.Tensor]) -> str:
    """fn(size) must return the blocked (future) positions: (size, size) bool, True where key > query."""
    result = fn(4)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
        return f"Expected a bool tensor, got {type(result).__name__} {getattr(result, 'dtype', '')}."
    if tuple(result.shape) != (4, 4):
        return f"Expected shape (4, 4) for size 4, got {_shape(result)}."
    for n in (4, 7, 1):
        got, blocked = fn(n).cpu(), ~causal_mask(n)
        if torch.equal(got, blocked):
            continue
        if torch.equal(got, ~blocked):
            return "Not quite: this is the allowed mask (True = may attend). Negate it."
        if torch.equal(got, blocked | torch.eye(n, dtype=torch.bool)):
            return "Not quite: the diagonal is blocked too. A position may attend to itself."
        return f"Not quite: wrong for size {n}. True exactly where the key lies after the query."
    return CORRECT


def check_allowed_count(fn: Callable[[int], int]) -> str:
    """fn(n) must return how many True entries tl.causal_mask(n) has."""
    if fn(3) is None:
        return _TODO
    for n in (1, 3, 10, 57):
        got, want = fn(n), n * (n + 1) // 2
        if got == want:
            continue
        if got == n * n:
            return "That counts every entry. Only the lower triangle, diagonal included, is True."
        if got == n * (n - 1) // 2:
            return "Almost: include the diagonal; each position may attend to itself."
        return f"For n={n} expected {want}, got {got}."
    return CORRECT


def check_cached_rows(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(past, new) must return the causal-mask rows for `new` queries after `past` cached positions."""
    if fn(2, 1) is None:
        return _TODO
    for past, new in ((3, 2), (0, 4), (5, 1)):
        got, want = fn(past, new), causal_mask(past + new)[past:]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            return (
                f"For past={past}, new={new}: expected shape {tuple(want.shape)}, (new, past + new); got {_shape(got)}."
            )
        if torch.equal(got.cpu(), want):
            continue
        if torch.equal(got.cpu(), causal_mask(past + new)[:new]):
            return "Those are the first rows. The new queries are the last rows: positions past .. past + new - 1."
        return f"Wrong values for past={past}, new={new}: a query sees every cached key and new keys up to itself."
    return CORRECT


# ---- 01 token embedding -----------------------------------------------------------------------


def check_embed(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(ids (B, S), table (V, d)) must return table rows (B, S, d) via a one-hot product."""
    g = torch.Generator().manual_seed(123)
    table, ids = torch.randn(11, 5, generator=g), torch.randint(0, 11, (3, 4), generator=g)
    result = fn(ids, table)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4, 5):
        return f"Expected shape (B, S, d) = (3, 4, 5), got {_shape(result)}. Multiply (B, S, V) by (V, d)."
    if _close(result, table[ids]):
        return CORRECT
    return "Right shape, wrong values: row t of the table should come back for id t."


def check_embedding_parameters(fn: Callable[[int, int], int]) -> str:
    """fn(vocab_size, d_model) must return the number of parameters of an embedding table."""
    if fn(10, 4) is None:
        return _TODO
    for v, d in ((10, 4), (32_000, 512), (7, 3)):
        got = fn(v, d)
        if got == v * d + d:
            return "An embedding table has no bias: it is only the V x d matrix."
        if got == v + d:
            return "Add those numbers up per entry: one number per token per dimension."
        if got != v * d:
            return f"For vocab_size={v}, d_model={d} expected {v * d}, got {got}."
    return CORRECT


def check_pad(fn: Callable[[list, int], torch.Tensor]) -> str:
    """fn(seqs, pad_id) must right-pad id lists into a (B, S_max) long tensor."""
    from .data import pad_sequences

    for seqs, pad in (([[5, 6, 7], [8]], 0), ([[1], [2, 3], []], 9), ([[4, 4]], 0)):
        result = fn(seqs, pad)
        if result is None:
            return _TODO
        want = pad_sequences(seqs, pad)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.long:
            return f"Expected a torch.long tensor, got {type(result).__name__} {getattr(result, 'dtype', '')}."
        if tuple(result.shape) != tuple(want.shape):
            return f"For {seqs}: expected shape {tuple(want.shape)}, got {_shape(result)}."
        if torch.equal(result, want):
            continue
        longest = want.shape[1]
        left = torch.tensor([[pad] * (longest - len(q)) + list(q) for q in seqs], dtype=torch.long)
        if torch.equal(result, left):
            return "The padding is on the left. Put it on the right, after the real tokens."
        return f"For {seqs} with pad_id={pad}: expected {want.tolist()}, got {result.tolist()}. Use pad_id, not 0."
    return CORRECT


# ---- 02 positional encoding -------------------------------------------------------------------


def _doubled_exponent(max_len: int, d: int) -> torch.Tensor:
    """A loop over dimension indices that uses 2*i/d again: every exponent doubled (a known bug)."""
    out = torch.zeros(max_len, d, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(0, d, 2):
            out[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d)))
            out[pos, i + 1] = math.cos(pos / (10000 ** ((2 * i) / d)))
    return out.float()


def check_encoding(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(max_len, d_model) must return the sinusoidal encoding (max_len, d_model)."""
    for max_len, d in ((5, 4), (30, 10), (12, 64)):
        result = fn(max_len, d)
        if result is None:
            return _TODO
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (max_len, d):
            return f"Expected shape ({max_len}, {d}), got {_shape(result)}."
        want = sinusoidal_encoding(max_len, d)
        if _close(result, want):
            continue
        swapped = torch.stack([want[:, 1::2], want[:, 0::2]], dim=-1).reshape(max_len, d)
        if _close(result, swapped):
            return "Sines and cosines are swapped: even dimensions take the sine."
        if _close(result, _doubled_exponent(max_len, d)):
            return "The exponent is doubled: use the pair index i in 2i/d, not the dimension index."
        return f"Wrong values for max_len={max_len}, d_model={d}; compare PE[1] with sin(1), cos(1), ..."
    return CORRECT


def check_self_similarity(fn: Callable[[int], float]) -> str:
    """fn(d_model) must return PE_p . PE_p, the dot product of a position's encoding with itself."""
    if fn(8) is None:
        return _TODO
    for d in (8, 64, 512):
        got = fn(d)
        if abs(got - d) < 1e-6:
            return "Each sin^2 + cos^2 pair sums to 1, so count pairs, not dimensions."
        if abs(got - 1) < 1e-6:
            return "That is one pair. Add up all d_model / 2 pairs."
        if abs(got - d / 2) > 1e-6:
            return f"For d_model={d} expected {d / 2}, got {got}."
    return CORRECT


def check_wavelength(fn: Callable[[int, int], float]) -> str:
    """fn(d_model, i) must return the wavelength, in positions, of dimension pair i."""
    if fn(64, 0) is None:
        return _TODO
    for d, i in ((64, 0), (64, 31), (512, 255), (16, 3)):
        got, want = fn(d, i), 2 * math.pi * 10000 ** (2 * i / d)
        if abs(got - want) <= 1e-6 * want:
            continue
        if abs(got - 10000 ** (2 * i / d)) < 1e-6 * want:
            return "That is 1 / frequency in radians. A full cycle is 2 pi radians: multiply by 2 pi."
        if abs(got - 2 * math.pi * 10000 ** (4 * i / d)) < 1e-6 * max(want, 1):
            return "The exponent is doubled: i is already the pair index, so use 2i/d."
        return f"For d_model={d}, pair {i}: expected {want:.4g} positions, got {got:.4g}."
    return CORRECT


# ---- 03 attention -----------------------------------------------------------------------------


def check_attention(fn) -> str:
    """fn(q, k, v) must return softmax(q k^T / sqrt(d_k)) v for (..., T, d_k) inputs."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g) for n in (5, 9, 9))
    result = fn(q, k, v)
    if result is None:
        return _TODO
    want = scaled_dot_product_attention(q, k, v)[0]
    if not isinstance(result, torch.Tensor) or result.shape != want.shape:
        return f"Expected shape {tuple(want.shape)}, got {_shape(result)}. Transpose k's last two axes."
    if _close(result, want):
        return CORRECT
    scores = q @ k.transpose(-2, -1)
    if _close(result, scores.softmax(-1) @ v):
        return "Almost: you forgot to divide the scores by sqrt(d_k)."
    if _close(result, (scores / 16).softmax(-1) @ v):
        return "Almost: divide by sqrt(d_k), not by d_k."
    if _close(result, (scores / 4).softmax(-2) @ v):
        return "Almost: the softmax must run over the keys (the last axis), not over the queries."
    return "Not quite: compare your scores with q @ k.transpose(-2, -1) / sqrt(d_k)."


def check_split(fn) -> str:
    """fn(t (B, S, d_model), h) must return (B, h, S, d_model // h), head j holding features j*d_k.."""
    t = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)
    result = fn(t, 3)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (2, 3, 5, 4):
        return f"Expected shape (B, h, S, d_k) = (2, 3, 5, 4), got {_shape(result)}."
    if torch.equal(result, t.view(2, 3, 5, 4)):
        return "Right shape, wrong content: view as (B, S, h, d_k) first, then transpose(1, 2)."
    if not torch.equal(result, t.view(2, 5, 3, 4).transpose(1, 2)):
        return "Not quite: head j should hold features j*d_k to (j+1)*d_k - 1."
    return CORRECT


def check_score_std(fn: Callable[[int], float]) -> str:
    """fn(d_k) must return the standard deviation of q . k for q, k with independent N(0, 1) entries."""
    if fn(4) is None:
        return _TODO
    for d in (1, 4, 64, 1000):
        got = fn(d)
        if abs(got - d) < 1e-6 and d != 1:
            return "That is the variance (d_k). The standard deviation is its square root."
        if abs(got - 1) < 1e-6 and d != 1:
            return "That is after scaling. Before dividing by sqrt(d_k), the spread grows with d_k."
        if abs(got - math.sqrt(d)) > 1e-6:
            return f"For d_k={d} expected {math.sqrt(d):.4g}, got {got}."
    return CORRECT


# ---- 04 masks ---------------------------------------------------------------------------------


def check_padding_mask(fn) -> str:
    """fn(tokens (B, S), pad_id) must return (B, 1, 1, S) bool with True at real tokens."""
    for toks, pad in ((torch.tensor([[3, 4, 0], [5, 0, 0]]), 0), (torch.tensor([[9, 2, 9, 9]]), 9)):
        result = fn(toks, pad)
        if result is None:
            return _TODO
        want = padding_mask(toks, pad)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
            return f"Expected a bool tensor, got {getattr(result, 'dtype', type(result).__name__)}."
        if result.shape == toks.shape:
            return f"Shape {_shape(result)} will not broadcast against (B, h, T, S) scores; add two axes: (B, 1, 1, S)."
        if tuple(result.shape) != tuple(want.shape):
            return f"Expected shape {tuple(want.shape)}, got {_shape(result)}."
        if torch.equal(result, ~want):
            return "Reversed: in this book True means 'may attend', so real tokens are True."
        if not torch.equal(result, want):
            return f"Wrong values for pad_id={pad}; did you hard-code 0?"
    return CORRECT


def check_target_mask(fn) -> str:
    """fn(tokens (B, T), pad_id) must return (B, 1, T, T): not padding AND not in the future."""
    toks = torch.tensor([[4, 5, 6, 0], [7, 0, 0, 0]])
    result = fn(toks, 0)
    if result is None:
        return _TODO
    want = target_mask(toks, 0)
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (2, 1, 4, 4):
        return f"Expected shape (B, 1, T, T) = (2, 1, 4, 4), got {_shape(result)}."
    if torch.equal(result, want):
        return CORRECT
    if torch.equal(result, ~want):
        return "Reversed: True means 'may attend'. This is PyTorch's convention (True = blocked)."
    if torch.equal(result, padding_mask(toks, 0).expand(2, 1, 4, 4)):
        return "Only padding is masked: AND it with the causal mask."
    if torch.equal(result, causal_mask(4).expand(2, 1, 4, 4)):
        return "Only the future is masked: AND it with the padding mask."
    if torch.equal(result, padding_mask(toks, 0) & causal_mask(4).T):
        return "The mask is upper triangular: the allowed keys are the lower triangle (tril), not triu."
    return "Not quite: a key is allowed only if it is real AND not in the future."


def check_masks_needed(fn: Callable[[str], set]) -> str:
    """fn(family) must return the set of masks ({'padding', 'causal'}) a model family needs."""
    cases = {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}
    for family, want in cases.items():
        got = fn(family)
        if got is None:
            return _TODO
        got = set(got)
        if got != want:
            if family == "encoder-only" and "causal" in got:
                return "An encoder sees the whole input in both directions: no causal mask."
            if family == "decoder-only" and "causal" not in got:
                return "A language model must not see the future: it needs the causal mask."
            return f"For {family} expected {sorted(want)}, got {sorted(got)}."
    return CORRECT


# ---- 05 feed-forward and layer norm -----------------------------------------------------------


def check_layer_norm(fn) -> str:
    """fn(x, weight, bias, eps) must equal F.layer_norm over the last axis."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 10, generator=g) * 0.5 + 1  # small spread, large eps: where eps sits matters
    w, b = torch.randn(10, generator=g), torch.randn(10, generator=g)
    eps = 0.1
    result = fn(x, w, b, eps)
    if result is None:
        return _TODO
    want = F.layer_norm(x, (10,), w, b, eps)
    if not isinstance(result, torch.Tensor) or result.shape != want.shape:
        return f"Expected shape {tuple(want.shape)}, got {_shape(result)}."
    if _close(result, want):
        return CORRECT
    centred = x - x.mean(-1, keepdim=True)
    if _close(result, centred / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b):
        return "Almost: use the biased variance (divide by d, unbiased=False)."
    if _close(result, centred / (x.std(-1, unbiased=False, keepdim=True) + eps) * w + b, atol=1e-4):
        return "Almost: epsilon goes inside the square root, sqrt(var + eps)."
    if _close(result, F.layer_norm(x, (10,), None, None, eps)):
        return "Almost: apply the gain and the shift (weight and bias) at the end."
    return "Not quite: normalise over the last axis, then scale by weight and shift by bias."


def check_pre_ln(fn) -> str:
    """fn(x, sublayer, norm) must compute x + sublayer(norm(x))."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 8, generator=g)
    block = AddNorm(8, norm_first=True)
    with torch.no_grad():
        block.norm.weight.copy_(torch.rand(8, generator=g) + 0.5)
    sub = lambda t: 3 * t + 1
    with torch.no_grad():
        result = fn(x, sub, block.norm)
        if result is None:
            return _TODO
        if _close(result, block(x, sub)):
            return CORRECT
        if _close(result, block.norm(x + sub(x))):
            return "That is post-LN: normalise the input to the sublayer, not the sum."
        if _close(result, sub(block.norm(x))):
            return "The residual is missing: add x back."
    return "Not quite: pre-LN is x + sublayer(norm(x))."


def check_batch_norm_mean(fn) -> str:
    """fn(x (B, S, d)) must return what batch norm subtracts: each feature's mean over batch and positions, (d,)."""
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(2)) + torch.arange(6.0)
    result = fn(x)
    if result is None:
        return _TODO
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (4, 5):
        return "That is each token's mean over its features: layer norm's statistic, not batch norm's."
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (5, 6):
        return "Average over the positions too: dims (0, 1), not only the batch axis."
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (6,):
        return f"Expected one mean per feature, shape (6,), got {_shape(result)}."
    return CORRECT if _close(result, x.mean(dim=(0, 1))) else "Right shape, wrong values: mean over dims (0, 1)."


# ---- 06 encoder -------------------------------------------------------------------------------


def check_mean_pool(fn) -> str:
    """fn(hidden (B, S, d), mask (B, 1, 1, S)) must average the real positions, (B, d)."""
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(3))
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]), 0)
    result = fn(hidden, mask)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4):
        return f"Expected shape (B, d) = (3, 4), got {_shape(result)}."
    if _close(result, hidden.mean(1)):
        return "The padding is averaged in: weight positions by the mask."
    if _close(result, (hidden * mask[:, 0, 0, :, None]).sum(1) / 5):
        return "Almost: divide by the number of real tokens, not by S."
    want = torch.stack([hidden[0].mean(0), hidden[1, :2].mean(0), hidden[2, 0]])
    return CORRECT if _close(result, want) else "Not quite: sum the real positions and divide by their count."


def check_pre_ln_layer(fn, make_layer: Callable[[int, int, int], torch.nn.Module]) -> str:
    """fn(layer, x, mask) must run a layer's parts in pre-LN order; make_layer builds the learner's layer class."""
    torch.manual_seed(4)
    mine = make_layer(16, 2, 32).eval()
    reference = EncoderLayer(16, 2, 32, norm_first=True).eval()
    reference.load_state_dict({k.replace("norm1", "attn_block.norm").replace("norm2", "ff_block.norm"): v
                               for k, v in mine.state_dict().items()})  # fmt: skip
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4))
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), 0)
    with torch.no_grad():
        result = fn(mine, x, mask)
        if result is None:
            return _TODO
        if _close(result, mine(x, mask)):
            return "That is the post-LN order: normalise before each sublayer instead."
        if _close(result, reference(x, mask)):
            return CORRECT
    return "Not quite: z = x + attn(norm1(x)); out = z + ff(norm2(z))."


def check_first_pool(fn) -> str:
    """fn(hidden (B, S, d)) must return the vector at position 0 of each sequence, (B, d)."""
    hidden = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(8))
    result = fn(hidden)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4):
        return f"Expected shape (B, d) = (3, 4), got {_shape(result)}."
    if _close(result, hidden[:, -1]):
        return "That is the last position. The <bos> / [CLS] token sits at position 0."
    if _close(result, hidden.mean(1)):
        return "That is mean pooling. Take position 0 only."
    return CORRECT if _close(result, hidden[:, 0]) else "Not quite: index hidden[:, 0]."


# ---- 07 decoder -------------------------------------------------------------------------------


def check_sample(fn) -> str:
    """fn(logits (B, V), temperature, top_k, generator) must return (B, 1) ids: greedy, tempered, top-k."""
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -2.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    greedy = fn(logits[:50], 0.0, None, g)
    if greedy is None:
        return _TODO
    if not isinstance(greedy, torch.Tensor) or tuple(greedy.shape) != (50, 1):
        return f"Expected shape (B, 1) = (50, 1), got {_shape(greedy)}."
    if not torch.equal(greedy.flatten(), torch.ones(50, dtype=torch.long)):
        return "With temperature 0, return the argmax (token 1 here)."
    picks = fn(logits, 1.0, 2, g).flatten()
    if not set(picks.tolist()) <= {1, 3}:
        return f"top_k=2 must only ever pick tokens 1 and 3, got {sorted(set(picks.tolist()))}."
    share, want = (picks == 3).float().mean().item(), math.exp(4) / (math.exp(4) + math.exp(5))
    if abs(share - want) > 0.04:
        return f"Token 3 should be picked {want:.0%} of the time with top_k=2, got {share:.0%}."
    hot = torch.bincount(fn(logits, 100.0, None, g).flatten(), minlength=5).float() / logits.shape[0]
    if hot.min() < 0.1:  # at temperature 100 the five tokens are close to equally likely
        return "At a very high temperature every token should appear: divide the logits by the temperature."
    return CORRECT


def check_windows(fn) -> str:
    """fn(ids (N,), starts (B,), block_size) must return x, y (B, block_size) with y = x shifted by one."""
    ids, starts = torch.arange(100, 200), torch.tensor([1, 10, 90])
    result = fn(ids, starts, 8)
    if result is None:
        return _TODO
    x, y = result
    if tuple(x.shape) != (3, 8) or tuple(y.shape) != (3, 8):
        return f"Expected x and y of shape (3, 8), got {_shape(x)} and {_shape(y)}."
    if torch.equal(x, y):
        return "y must be x shifted by one: the target at each position is the next token."
    if torch.equal(y, x - 1):
        return "Shifted the wrong way: y[b, t] is the token after x[b, t]."
    ok = torch.equal(x[1], ids[10:18]) and torch.equal(x[0], ids[1:9]) and torch.equal(y, x + 1)
    return CORRECT if ok else "Not quite: x[b] = ids[starts[b] : starts[b] + block_size]."


def check_kv_cache_bytes(fn) -> str:
    """fn(num_layers, d_model, context, batch, bytes_per_value) must return the KV cache's size in bytes."""
    if fn(1, 4, 2, 1, 2) is None:
        return _TODO
    for case in ((2, 64, 128, 8, 4), (24, 1024, 2048, 1, 2), (12, 768, 1024, 2, 2)):
        got, (L, d, T, B, nbytes) = fn(*case), case
        want = 2 * L * d * T * B * nbytes
        if got == want // 2:
            return "Half of it: the cache holds keys AND values for every layer."
        if got == want // nbytes:
            return "That counts numbers, not bytes: multiply by bytes_per_value."
        if got != want:
            return f"For {case} expected {want:,} bytes, got {got:,}."
    return CORRECT


# ---- 08 the full Transformer ------------------------------------------------------------------


def check_shift(fn) -> str:
    """fn(tgt (B, T)) must return (decoder_input, labels) = (tgt[:, :-1], tgt[:, 1:])."""
    tgt = torch.tensor([[1, 7, 8, 2, 0], [1, 9, 2, 0, 0]])
    result = fn(tgt)
    if result is None:
        return _TODO
    inp, lab = result
    if torch.equal(inp, tgt) or torch.equal(lab, tgt):
        return "One side is not shifted: the decoder input drops the last token, the labels drop the first."
    if torch.equal(inp, tgt[:, 1:]) and torch.equal(lab, tgt[:, :-1]):
        return "Swapped: the decoder sees <bos> first, so its input is tgt[:, :-1]."
    ok = torch.equal(inp, tgt[:, :-1]) and torch.equal(lab, tgt[:, 1:])
    return CORRECT if ok else "Not quite: decoder input tgt[:, :-1], labels tgt[:, 1:]."


def check_greedy(fn, model, src_tok, tgt_tok, numbers=("00008", "00305", "61718")) -> str:
    """fn(model, src (1, S), bos_id, eos_id, max_new_tokens) must match model.greedy_decode."""
    device = next(model.parameters()).device
    for number in numbers:
        src = torch.tensor([src_tok.encode(number)], device=device)
        with torch.no_grad():
            result = fn(model, src, tgt_tok.bos_id, tgt_tok.eos_id, 60)
            if result is None:
                return _TODO
            want = model.greedy_decode(src, tgt_tok.bos_id, tgt_tok.eos_id, 60)
        if result[0, 0].item() != tgt_tok.bos_id:
            return "Start the output with <bos>."
        if tgt_tok.decode(result[0]) != tgt_tok.decode(want[0]):
            return f"For {number}: expected {tgt_tok.decode(want[0])!r}, got {tgt_tok.decode(result[0])!r}."
        if tgt_tok.eos_id in result[0, :-1].tolist():
            return "Stop as soon as <eos> is produced."
    return CORRECT


def check_loss_positions(fn) -> str:
    """fn(labels (B, T), pad_id) must return the bool mask of positions the loss counts."""
    labels = torch.tensor([[7, 8, 2, 0, 0], [9, 2, 0, 0, 0]])
    result = fn(labels, 0)
    if result is None:
        return _TODO
    want = labels != 0
    if not isinstance(result, torch.Tensor) or result.shape != labels.shape or result.dtype != torch.bool:
        return f"Expected a bool tensor of shape {tuple(labels.shape)}, got {_shape(result)}."
    if torch.equal(result, ~want):
        return "Reversed: the loss counts the real tokens (True), not the padding."
    if torch.equal(result, want & (labels != 2)):
        return "The <eos> label is counted too: the model must learn when to stop."
    return CORRECT if torch.equal(result, want) else "Not quite: every position whose label is not pad_id."
