"""Scaled dot-product attention and multi-head attention (self and cross).

Masks follow the package convention: bool, ``True`` = may attend, broadcastable
to the scores (B, num_heads, T_q, T_k). A query whose every key is masked gets
an output of zeros (and weights of zeros), never NaN.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .layers import RMSNorm
from .positional import rotary_tables, turn

__all__ = [
    "scaled_dot_product_attention",
    "fused_attention",
    "MultiHeadAttention",
    "KVCache",
    "capture_attention",
    "watch_weights",
]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            "query, key and value need at least 2 dimensions (..., T, d), got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query and key must have the same feature size d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"key and value must have the same length, got key length {k.shape[-2]} and value length {v.shape[-2]}"
        )


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a tensor of `shape` broadcasts to exactly `target`, by PyTorch's rules.

    Written out because torch.broadcast_shapes imports sympy on its first call: half a second
    that every notebook would pay on its first attention with a mask.
    """
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool torch.Tensor (True = may attend), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor with True = may attend, got dtype {mask.dtype}; "
            "for a 0/1 mask use mask.bool(), for PyTorch's True = blocked use ~mask"
        )
    if not _broadcasts_to(tuple(mask.shape), tuple(scores_shape)):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores of shape "
            f"{tuple(scores_shape)} (B, num_heads, T_q, T_k); a padding mask is (B, 1, 1, T_k), "
            "a causal mask (T_q, T_k)"
        )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, step by step; returns (out, weights).

    q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v), mask bool broadcastable to
    (..., T_q, T_k) with True = may attend -> out (..., T_q, d_v), weights (..., T_q, T_k).
    The weights are those before dropout.
    """
    _check_qkv(q, k, v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        _check_mask(mask, scores.shape)
        # The most negative finite number, not -inf: a fully masked row stays finite
        # through the softmax and is then zeroed below instead of turning into NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (..., T_q, T_k), rows sum to 1
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # fully masked rows become all zeros
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return attended @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The same output as `scaled_dot_product_attention` through PyTorch's fused kernel; no weights.

    Shapes as in `scaled_dot_product_attention`; returns out (..., T_q, d_v).
    """
    _check_qkv(q, k, v)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    _check_mask(mask, (*q.shape[:-1], k.shape[-2]))
    any_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): False on fully masked rows
    # A fully masked row may see every key inside the kernel, so its numbers (and gradients) stay
    # finite on every torch version; its output is zeroed below. F.scaled_dot_product_attention
    # uses the same bool convention (True = take part).
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~any_key, dropout_p=dropout_p)
    return out.masked_fill(~any_key, 0.0)  # (..., T_q, d_v)


class KVCache:
    """Keys and values of the positions seen so far by one attention layer, (B, num_kv_heads, T_past, d_k).

    Without a capacity the cache grows by concatenation. With one (generate passes the final length)
    it allocates (B, h, capacity, d_k) buffers on the first update and writes each step into them,
    so a step copies only its own keys and values; `key` and `value` are views of the filled part.

    ``static=True`` makes a cross-attention cache: the encoder's memory does not change while the
    decoder writes, so its keys and values are projected on the first call and read afterwards.
    """

    def __init__(self, capacity: int | None = None, static: bool = False) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if static and capacity is not None:
            raise ValueError("a static cache holds the memory's keys and values once; it takes no capacity")
        self.capacity = capacity
        self.static = static  # True: filled once (cross-attention), then only read
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def __len__(self) -> int:
        return 0 if self.key is None else self.key.shape[-2]

    @property
    def length(self) -> int:
        """The number of cached positions, as the forward pass reads it.

        The same number as len(cache), but read straight from the keys' shape: Python turns what
        __len__ returns into a plain int, which an ONNX trace would bake into the file, while the
        shape stays a size the tracer follows (export.step_model relies on it).
        """
        return 0 if self.key is None else self.key.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes of memory the cache holds now: its buffers when preallocated, else its keys and values."""
        held = self._buffers if self._buffers is not None else (self.key, self.value)
        return sum(t.numel() * t.element_size() for t in held if t is not None)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new (B, h, T_new, d_k) keys and values; return all of them, (B, h, T_past + T_new, d_k)."""
        past, new = len(self), key.shape[-2]
        if self.static and past:
            raise ValueError("this static cache already holds the memory's keys and values; read them, do not append")
        if self.capacity is None:
            self.key = key if self.key is None else torch.cat([self.key, key], dim=-2)
            self.value = value if self.value is None else torch.cat([self.value, value], dim=-2)
            return self.key, self.value
        if past + new > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; {past} + {new} would not fit")
        if self._buffers is None:
            B, h, _, d = key.shape
            self._buffers = (
                key.new_empty(B, h, self.capacity, d),
                value.new_empty(B, h, self.capacity, value.shape[-1]),
            )
        keys, values = self._buffers
        keys[:, :, past : past + new] = key
        values[:, :, past : past + new] = value
        self.key, self.value = keys[:, :, : past + new], values[:, :, : past + new]  # views, no copy
        return self.key, self.value


class MultiHeadAttention(nn.Module):
    """num_heads attention heads of width d_k = d_model / num_heads, run in parallel and recombined.

    Self-attention: ``mha(x, x, x)``. Cross-attention: ``mha(decoder_x, memory, memory)``;
    query and key may have different lengths.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        num_kv_heads: int | None = None,
        rotary: bool = False,
        rotary_layout: str = "half",
        rotary_dim: int | None = None,
        rope_base: float = 10000.0,
        rope_scaling: tuple[str, float, int | None] = ("none", 1.0, None),
        qk_norm: bool = False,
        eps: float = 1e-6,
    ):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"d_model must be divisible by num_heads: got d_model={d_model}, num_heads={num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads must be divisible by num_kv_heads: got num_heads={num_heads}, num_kv_heads={num_kv_heads}"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads  # < num_heads: grouped-query attention; 1: multi-query attention
        self.d_k = d_model // num_heads
        if rotary and self.d_k % 2 != 0:
            raise ValueError(f"rotary positions need an even head width, got d_k={self.d_k}")
        self.rotary = rotary  # rotate queries and keys by their positions (RoPE) before the scores
        self.rotary_layout = rotary_layout  # where each rotary pair's two dimensions sit: "half" or "interleaved"
        self.rotary_dim = rotary_dim  # how many of each head's dimensions turn; None = all d_k
        self.rope_base = rope_base  # pair i turns by position * rope_base ** (-2i / rotary_dim)
        self.rope_scaling = tuple(rope_scaling)  # (kind, factor, trained length): positional.rope_frequencies
        if rotary:  # refuses a bad layout, width or scaling here
            rotary_tables(torch.zeros(1), self.d_k, layout=rotary_layout, rotary_dim=rotary_dim, scaling=rope_scaling)
        self.dropout_p = dropout  # a probability, applied to the attention weights while training
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)  # one key per key-value head
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self._rotary: tuple[torch.Tensor, torch.Tensor] | None = None  # cos and sin of positions 0..n, (n, d_k)
        # QK-norm: each head's query and key scaled to a fixed root mean square (times a learned gain per
        # dimension) before RoPE, so that no score can grow without bound as the weights grow
        self.q_norm = RMSNorm(self.d_k, eps) if qk_norm else None
        self.k_norm = RMSNorm(self.d_k, eps) if qk_norm else None

    @classmethod
    def from_config(cls, config: TransformerConfig, cross: bool = False) -> MultiHeadAttention:
        """The attention a layer built from `config` uses; rotary positions apply to self-attention only."""
        rotary = config.positional == "rope" and not cross
        return cls(
            config.d_model,
            config.num_heads,
            config.dropout,
            bias=config.bias,
            num_kv_heads=config.num_kv_heads,
            rotary=rotary,
            rotary_layout=config.rotary_layout,
            rotary_dim=config.rotary_dim,
            rope_base=config.rope_base,
            rope_scaling=(config.rope_scaling, config.rope_factor, config.rope_original_len),
            qk_norm=config.qk_norm,
            eps=config.eps,
        )

    def _rotary_tables(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for positions 0..length-1 at least, (n, d_k): computed when longer ones are needed, then kept."""
        if self._rotary is None or self._rotary[0].shape[0] < length or self._rotary[0].device != device:
            size = max(length, 2 * self._rotary[0].shape[0] if self._rotary is not None else 0)  # grow by doubling
            with torch.inference_mode(False):  # kept for later calls, so ordinary tensors even while generating
                positions = torch.arange(size, device=device)
                layout, r, scaling = self.rotary_layout, self.rotary_dim, self.rope_scaling
                self._rotary = rotary_tables(positions, self.d_k, self.rope_base, layout, r, scaling)
        return self._rotary

    def _check_inputs(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: KVCache | None = None
    ) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3:
                raise ValueError(f"{name} must have shape (B, T, d_model), got shape {tuple(t.shape)}")
            if t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have last dimension d_model={self.d_model}, got {t.shape[-1]}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length, got key length {key.shape[1]} "
                f"and value length {value.shape[1]}"
            )
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                f"query, key and value must share the batch size, got {query.shape[0]}, "
                f"{key.shape[0]} and {value.shape[0]}"
            )
        if cache is not None and cache.static and self.rotary:
            raise ValueError("a static cache is for cross-attention; this self-attention rotates positions (RoPE)")

    def split_heads(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """(B, T, heads * d_k) -> (B, heads, T, d_k); heads defaults to num_heads."""
        B, T, _ = x.shape
        heads = self.num_heads if heads is None else heads
        return x.view(B, T, heads, self.d_k).transpose(1, 2)  # (B, heads, T, d_k)

    def combine_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, num_heads, T, d_k) -> (B, T, d_model)."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, h * d_k)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (B, T_q, d_model), key/value (B, T_k, d_model) -> (out (B, T_q, d_model), weights).

        mask: bool, True = may attend, broadcastable to (B, num_heads, T_q, T_k).
        weights (B, num_heads, T_q, T_k) when need_weights, else None and the fused kernel runs.
        cache: a KVCache; this call's keys and values are appended and the query attends to all.
        A static cache (cross-attention) is filled from key and value on the first call and read after.
        """
        self._check_inputs(query, key, value, cache)
        q = self.split_heads(self.q_proj(query))  # (B, h, T_q, d_k)
        if self.q_norm is not None:
            q = self.q_norm(q)  # (B, h, T_q, d_k): each head's query normalised alone
        q, k, v = self._keys_values(q, key, value, cache)  # k, v: (B, h, T_k, d_k), T_k counting cached positions
        out, weights = self._attend(q, k, v, mask, need_weights)  # (B, h, T_q, d_k)
        return self.out_proj(self.combine_heads(out)), weights  # (B, T_q, d_model)

    def _keys_values(
        self, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, h, T_q, d_k), key/value (B, T_k, d_model) -> q, k, v ready for attention, k and v (B, h, T, d_k).

        Projects key and value to num_kv_heads heads (or reads them from a filled static cache),
        turns q and k by their positions (RoPE, continuing after the cached ones), appends to the
        cache (which keeps only the num_kv_heads heads), and repeats each key-value head for its
        group of query heads (grouped-query attention).
        """
        if cache is not None and cache.static and cache.length:
            k, v = cache.key, cache.value  # (B, h_kv, S, d_k): the memory's, projected on the first step
        else:
            k = self.split_heads(self.k_proj(key), self.num_kv_heads)  # (B, h_kv, T_k, d_k)
            v = self.split_heads(self.v_proj(value), self.num_kv_heads)  # (B, h_kv, T_k, d_k)
            if self.k_norm is not None:
                k = self.k_norm(k)  # (B, h_kv, T_k, d_k): the cache keeps normalised keys
            if self.rotary and getattr(cache, "rotates_on_read", False):  # streaming.SinkCache: keys kept unturned
                k, v = cache.update(k, v)  # (B, h_kv, n, d_k): what the cache kept, this call's positions last
                q, k = self._turn(q, k, past=k.shape[-2] - q.shape[-2], key_past=0)  # positions in the cache
            else:
                if self.rotary:  # the cache keeps rotated keys
                    q, k = self._turn(q, k, past=0 if cache is None else cache.length)
                if cache is not None:
                    k, v = cache.update(k, v)  # (B, h_kv, T_past + T_k, d_k)
        if self.num_kv_heads != self.num_heads:  # each key-value head serves a group of h / h_kv query heads
            group = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, h, T, d_k) each
        return q, k, v

    def _turn(
        self, q: torch.Tensor, k: torch.Tensor, past: int, key_past: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (B, h, T_q, d_k) and k (B, h_kv, T_k, d_k) by their positions, which start at `past` (the keys'
        at `key_past`, by default the same)."""
        T_q, T_k = q.shape[-2], k.shape[-2]
        if key_past is None:  # one start for both (written as before: an ONNX trace follows `past` through it)
            key_past, needed = past, past + max(T_q, T_k)
        else:
            needed = max(past + T_q, key_past + T_k)
        cos, sin = self._rotary_tables(needed, q.device)  # (n, d_k) each
        layout, r = self.rotary_layout, self.rotary_dim
        q = turn(q, cos[past : past + T_q], sin[past : past + T_q], layout, r)  # (B, h, T_q, d_k)
        k = turn(k, cos[key_past : key_past + T_k], sin[key_past : key_past + T_k], layout, r)  # (B, h_kv, T_k, d_k)
        return q, k

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q (B, h, T_q, d_k), k/v (B, h, T_k, d_k) -> (out (B, h, T_q, d_k), weights or None).

        The step-by-step path when the weights are asked for, else the fused kernel.
        """
        dropout_p = self.dropout_p if self.training else 0.0
        if not need_weights:
            return fused_attention(q, k, v, mask, dropout_p), None
        return scaled_dot_product_attention(q, k, v, mask, dropout_p)  # (B, h, T_q, d_k), (B, h, T_q, T_k)


def watch_weights(module: MultiHeadAttention, record: Callable[[torch.Tensor], None]) -> list:
    """Hooks that hand each forward pass's attention weights (B, h, T_q, T_k), detached, to `record`.

    The one way the package looks at attention weights: PyTorch's own hooks, and nothing kept on the
    module. A pre-hook asks the call for its weights (need_weights=True, the step-by-step path),
    whatever its caller asked; a hook passes them on. Returns the hooks' handles: remove them to stop.
    `capture_attention`, `inside.capture` and the ONNX exports all use it.
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"watch_weights takes a MultiHeadAttention, got {type(module).__name__}")

    def ask(m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if len(args) > 4:  # need_weights given by position: (query, key, value, mask, need_weights, ...)
            return (*args[:4], True, *args[5:]), kwargs
        return args, {**kwargs, "need_weights": True}

    def give(m: nn.Module, args: tuple, kwargs: dict, output: tuple) -> None:
        record(output[1].detach())

    pre = module.register_forward_pre_hook(ask, with_kwargs=True)
    return [pre, module.register_forward_hook(give, with_kwargs=True)]


@contextlib.contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Within the block, record each MultiHeadAttention's weights (B, num_heads, T_q, T_k), keyed by module name.

    A thin alias of the hook mechanism (`watch_weights`, as `inside.capture` uses it): a second
    forward pass in the block overwrites the first one's weights, and the hooks go when it ends.
    """
    captured: dict[str, torch.Tensor] = {}
    handles = []
    for name, m in model.named_modules():
        if isinstance(m, MultiHeadAttention):
            handles += watch_weights(m, lambda w, name=name: captured.__setitem__(name, w))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
