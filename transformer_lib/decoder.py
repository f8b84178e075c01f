"""The decoder layer (masked self-attention, cross-attention, feed-forward) and the stack.

`plain_decoder_step` runs the same stack one cached token at a time as plain functions over its
weights: greedy decoding's fast path, with the same operations as the modules on the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache, MultiHeadAttention, fused_attention
from .config import TransformerConfig, resolve_config
from .layers import FeedForward, LayerNorm, feed_forward, make_norm, residual

__all__ = ["DecoderLayer", "Decoder", "runs_as_written", "plain_function", "plain_decoder_step"]

Step = Callable[[torch.Tensor], torch.Tensor]


class DecoderLayer(nn.Module):
    """One decoder layer, built from a config: x (B, T, d_model) and memory (B, S, d_model) -> (B, T, d_model).

    With ``cross_attention=False`` there is no memory to attend to: that is a GPT-style block.
    """

    def __init__(self, config: TransformerConfig | None = None, cross_attention: bool = True, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        if cfg.parallel_block and cross_attention:
            raise ValueError("a parallel block has no cross-attention: build it with cross_attention=False")
        self.self_attn = MultiHeadAttention.from_config(cfg)
        self.norm1 = make_norm(cfg)
        self.cross_attn = MultiHeadAttention.from_config(cfg, cross=True) if cross_attention else None
        self.norm2 = make_norm(cfg) if cross_attention else None
        self.feed_forward = None if cfg.attention_only else feed_forward(cfg)  # dense, or a mixture of experts
        shared = cfg.parallel_block and cfg.shared_norm  # GPT-J's parallel block: norm1 serves both sublayers
        self.norm3 = None if cfg.attention_only or shared else make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)  # on each sublayer's output, before it is added

    @property
    def attn_norm(self) -> nn.Module:
        """The norm of the self-attention sublayer (stored as norm1)."""
        return self.norm1

    @property
    def cross_norm(self) -> nn.Module | None:
        """The norm of the cross-attention sublayer (stored as norm2), or None without cross-attention."""
        return self.norm2

    @property
    def ff_norm(self) -> nn.Module | None:
        """The norm of the feed-forward sublayer: norm3, or norm1 where a parallel block shares one."""
        return self.norm3 if self.norm3 is not None or self.feed_forward is None else self.norm1

    def _check_memory(self, memory: torch.Tensor | None) -> None:
        if memory is None:
            raise ValueError("this decoder layer has cross-attention, so it needs the encoder's memory")
        if memory.dim() != 3 or memory.shape[-1] != self.config.d_model:
            raise ValueError(
                f"memory must have shape (B, S, d_model={self.config.d_model}) to match the decoder, "
                f"got shape {tuple(memory.shape)}"
            )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model).

        tgt_mask broadcastable to (B, h, T, T) and memory_mask to (B, h, T, S); bool, True = may attend.
        cache: the self-attention's KVCache for incremental decoding. cross_cache: a static KVCache
        that keeps the memory's keys and values after the first step.
        """
        sublayers = [(self.attn_norm, lambda h: self.self_attn(h, h, h, tgt_mask, cache=cache)[0])]
        if self.cross_attn is not None:
            self._check_memory(memory)
            sublayers.append(
                (self.cross_norm, lambda h: self.cross_attn(h, memory, memory, memory_mask, cache=cross_cache)[0])
            )
        if self.feed_forward is not None:
            sublayers.append((self.ff_norm, self.feed_forward))
        return residual(x, sublayers, self.config, self.dropout)  # post-LN, pre-LN or parallel, as the config says


class Decoder(nn.Module):
    """config.num_decoder_layers decoder layers, then a final norm when config.final_norm."""

    def __init__(self, config: TransformerConfig | None = None, cross_attention: bool = True, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.layers = nn.ModuleList(DecoderLayer(cfg, cross_attention) for _ in range(cfg.num_decoder_layers))
        self.norm = make_norm(cfg) if cfg.final_norm else None

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        cross_caches: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model).

        caches: one self-attention KVCache per layer; cross_caches: one static KVCache per layer.
        """
        for name, given in (("caches", caches), ("cross_caches", cross_caches)):
            if given is not None and len(given) != len(self.layers):
                raise ValueError(f"expected one KVCache per layer in {name} ({len(self.layers)}), got {len(given)}")
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                None if caches is None else caches[i],
                None if cross_caches is None else cross_caches[i],
            )
        return x if self.norm is None else self.norm(x)


# ---- the cached step as plain functions ---------------------------------------------------------
# At batch 1 a cached decoding step does little arithmetic: one token through 4 + 4 layers of width 128
# is about 0.5 ms of matrix products, and nn.Module's dispatch (hooks looked up, attributes found by
# name) on some 80 module calls costs more than that. The functions below read each module's weights
# once and run the same operations on the same inputs, so the numbers are the same bit for bit.
# They apply only where that is certain; everywhere else the caller takes the modules' path.


def runs_as_written(model: nn.Module) -> bool:
    """True when calling each module of `model` is the same as calling its forward: no hooks, no training.

    A forward hook (`inside.capture`, `watch_weights`, a learner's probe) or a pre-hook must see every
    call, and in training mode dropout draws random numbers; either way the modules must run as modules.
    """
    if any(getattr(nn.modules.module, name, None) for name in _GLOBAL_HOOKS):
        return False
    return not any(
        m.training or m._forward_hooks or m._forward_pre_hooks or getattr(m, "_compiled_call_impl", None) is not None
        for m in model.modules()  # a compiled module (module.compile()) runs its own kernels: not these
    )


_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called")


def plain_function(module: nn.Module) -> Step:
    """module(x) as a plain function, for a module that `runs_as_written`: the same operations, no dispatch.

    nn.Linear and the package's LayerNorm and dense FeedForward become their torch functions over
    weights read now (dropout in eval mode is the identity, so it is left out); any other module,
    a subclass included, keeps its own forward.
    """
    if type(module) is nn.Linear:
        weight, bias = module.weight, module.bias
        return lambda x: F.linear(x, weight, bias)
    if type(module) is LayerNorm:
        weight, bias, eps = module.weight, module.bias, module.eps
        return lambda x: F.layer_norm(x, weight.shape, weight, bias, eps)
    if type(module) is FeedForward:
        first, second, act = plain_function(module.linear1), plain_function(module.linear2), module.activation
        if module.linear3 is None:
            return lambda x: second(act(first(x)))  # (..., d_ff) inside
        gate = plain_function(module.linear3)
        return lambda x: second(act(first(x)) * gate(x))  # SwiGLU
    return module.forward


def _plain_attention(attn: MultiHeadAttention) -> bool:
    """Attention that `_attention_step` computes as the module does: the class itself, a key-value head per head,
    no RoPE, no QK-norm."""
    plain_heads = attn.num_kv_heads == attn.num_heads and attn.q_norm is None and attn.k_norm is None
    return type(attn) is MultiHeadAttention and not attn.rotary and plain_heads


def _attention_step(
    attn: MultiHeadAttention,
    cache: KVCache | None = None,
    keys: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> Step:
    """attn(x, x, x, cache=cache) for one new position (with a cache), or attn(x, memory, memory, mask)
    with the memory's keys and values projected already: x (B, 1, d_model) -> (B, 1, d_model)."""
    q_proj, out_proj = plain_function(attn.q_proj), plain_function(attn.out_proj)
    k_proj, v_proj = plain_function(attn.k_proj), plain_function(attn.v_proj)
    split, combine = attn.split_heads, attn.combine_heads

    def self_attention(x: torch.Tensor) -> torch.Tensor:
        k, v = cache.update(split(k_proj(x)), split(v_proj(x)))  # (B, h, t, d_k) each, this position appended
        return out_proj(combine(fused_attention(split(q_proj(x)), k, v)))  # (B, 1, d_model)

    def cross_attention(x: torch.Tensor) -> torch.Tensor:
        return out_proj(combine(fused_attention(split(q_proj(x)), keys, values, mask)))  # (B, 1, d_model)

    return self_attention if cache is not None else cross_attention


def plain_decoder_step(
    decoder: Decoder,
    memory: torch.Tensor | None,
    memory_mask: torch.Tensor | None,
    capacity: int,
    caches: list[KVCache] | None = None,
) -> Step | None:
    """The decoder's cached step, x (B, 1, d_model) -> (B, 1, d_model), or None where it would not be exact.

    With a memory (an encoder-decoder), builds one KVCache of `capacity` positions per layer for the
    self-attention and projects the memory's keys and values once; each call then feeds the next
    position, as `Decoder.forward` with caches and cross caches does, through the same operations on
    the same inputs. With memory None (a decoder without cross-attention: a language model's), the
    layers read and extend `caches` instead, one KVCache per layer that the modules filled with the
    prompt's keys and values, as `Decoder.forward` with caches does.
    None where the modules must run as modules (`runs_as_written`), and for anything this function
    does not reproduce: a subclass of a layer or of its attention, RoPE, grouped-query attention,
    a parallel block, a layer with cross-attention and no memory or the other way round.
    """
    if caches is not None and len(caches) != len(decoder.layers):
        raise ValueError(f"expected one KVCache per layer ({len(decoder.layers)}), got {len(caches)}")
    if type(decoder) is not Decoder or not runs_as_written(decoder):
        return None
    layers = []  # per layer: (its wiring is pre-LN, [(norm, sublayer), ...])
    for i, layer in enumerate(decoder.layers):
        if (
            type(layer) is not DecoderLayer
            or layer.config.parallel_block
            or (layer.cross_attn is None) != (memory is None)
        ):
            return None
        if not _plain_attention(layer.self_attn) or memory is not None and not _plain_attention(layer.cross_attn):
            return None
        cache = KVCache(capacity) if caches is None else caches[i]
        sublayers = [(plain_function(layer.attn_norm), _attention_step(layer.self_attn, cache=cache))]
        if memory is not None:
            cross = layer.cross_attn
            keys = cross.split_heads(cross.k_proj(memory))  # (B, h, S, d_k): once per source
            values = cross.split_heads(cross.v_proj(memory))  # (B, h, S, d_k)
            step = _attention_step(cross, keys=keys, values=values, mask=memory_mask)
            sublayers.append((plain_function(layer.cross_norm), step))
        if layer.feed_forward is not None:
            sublayers.append((plain_function(layer.ff_norm), plain_function(layer.feed_forward)))
        layers.append((layer.config.norm_first, sublayers))
    final_norm = None if decoder.norm is None else plain_function(decoder.norm)
    d_model = decoder.config.d_model
    batch = None if memory is None else memory.shape[0]  # a language model's batch is the caches': any

    def step(x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[1:] != (1, d_model) or batch is not None and x.shape[0] != batch:
            shape = f"({'B' if batch is None else batch}, 1, {d_model})"
            raise ValueError(f"a cached step takes one position, shape {shape}, got {tuple(x.shape)}")
        for pre_ln, sublayers in layers:
            for norm, f in sublayers:  # `residual`'s wiring, in eval mode: its dropout is the identity
                x = x + f(norm(x)) if pre_ln else norm(x + f(x))
        return x if final_norm is None else final_norm(x)

    return step
