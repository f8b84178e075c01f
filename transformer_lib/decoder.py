"""The decoder layer (masked self-attention, cross-attention, feed-forward) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .layers import AddNorm, FeedForward, LayerNorm

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """One decoder layer: AddNorm(masked self-attn) -> AddNorm(cross-attn) -> AddNorm(feed-forward).

    With ``cross_attention=False`` there is no memory to attend to: that is a GPT-style block.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        cross_attention: bool = True,
    ):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.self_attn_block = AddNorm(d_model, dropout, norm_first, eps)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
            self.cross_attn_block = AddNorm(d_model, dropout, norm_first, eps)
        else:
            self.cross_attn = self.cross_attn_block = None
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.ff_block = AddNorm(d_model, dropout, norm_first, eps)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model).

        tgt_mask broadcastable to (B, h, T, T) and memory_mask to (B, h, T, S); bool, True = may attend.
        cache: the self-attention's KVCache for incremental decoding.
        """
        x = self.self_attn_block(x, lambda y: self.self_attn(y, y, y, tgt_mask, cache=cache)[0])
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention, so it needs the encoder's memory")
            if memory.dim() != 3 or memory.shape[-1] != self.d_model:
                raise ValueError(
                    f"memory must have shape (B, S, d_model={self.d_model}) to match the decoder, "
                    f"got shape {tuple(memory.shape)}"
                )
            x = self.cross_attn_block(x, lambda y: self.cross_attn(y, memory, memory, memory_mask)[0])
        return self.ff_block(x, self.feed_forward)


class Decoder(nn.Module):
    """A stack of num_layers decoder layers, with a final LayerNorm when `final_norm`."""

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        final_norm: bool | None = None,
        cross_attention: bool = True,
    ):
        super().__init__()
        self.d_model = d_model
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation, eps, cross_attention)
            for _ in range(num_layers)
        )
        use_norm = norm_first if final_norm is None else final_norm
        self.norm = LayerNorm(d_model, eps) if use_norm else None

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model); one KVCache per layer if given."""
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"expected one KVCache per layer ({len(self.layers)}), got {len(caches)}")
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if caches is None else caches[i])
        return x if self.norm is None else self.norm(x)
