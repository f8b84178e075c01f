"""The decoder layer (masked self-attention, cross-attention, feed-forward) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .config import TransformerConfig, resolve_config
from .layers import feed_forward, make_norm

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """One decoder layer, built from a config: x (B, T, d_model) and memory (B, S, d_model) -> (B, T, d_model).

    With ``cross_attention=False`` there is no memory to attend to: that is a GPT-style block.
    """

    def __init__(self, config: TransformerConfig | None = None, cross_attention: bool = True, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.self_attn = MultiHeadAttention.from_config(cfg)
        self.norm1 = make_norm(cfg)
        self.cross_attn = MultiHeadAttention.from_config(cfg, cross=True) if cross_attention else None
        self.norm2 = make_norm(cfg) if cross_attention else None
        self.feed_forward = None if cfg.attention_only else feed_forward(cfg)  # dense, or a mixture of experts
        self.norm3 = None if cfg.attention_only or cfg.parallel_block else make_norm(cfg)  # parallel: norm1 serves both
        self.dropout = nn.Dropout(cfg.dropout)  # on each sublayer's output, before it is added

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
        if self.cross_attn is not None:
            self._check_memory(memory)
        if self.config.parallel_block:  # GPT-J, PaLM: x + attention(norm(x)) + feed_forward(norm(x)), one norm
            if self.cross_attn is not None:
                raise ValueError("a parallel block has no cross-attention: build it with cross_attention=False")
            h = self.norm1(x)
            return (
                x + self.dropout(self.self_attn(h, h, h, tgt_mask, cache=cache)[0]) + self.dropout(self.feed_forward(h))
            )
        if self.config.norm_first:  # pre-LN: x + sublayer(norm(x))
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, tgt_mask, cache=cache)[0])
            if self.cross_attn is not None:
                x = x + self.dropout(self.cross_attn(self.norm2(x), memory, memory, memory_mask, cache=cross_cache)[0])
            if self.feed_forward is not None:
                x = x + self.dropout(self.feed_forward(self.norm3(x)))
        else:  # post-LN, as in the 2017 paper: norm(x + sublayer(x))
            x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask, cache=cache)[0]))
            if self.cross_attn is not None:
                x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, memory_mask, cache=cross_cache)[0]))
            if self.feed_forward is not None:
                x = self.norm3(x + self.dropout(self.feed_forward(x)))
        return x


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
