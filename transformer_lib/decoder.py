"""The decoder layer (masked self-attention, cross-attention, feed-forward) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .config import TransformerConfig, resolve_config
from .layers import feed_forward, make_norm, residual

__all__ = ["DecoderLayer", "Decoder"]


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
