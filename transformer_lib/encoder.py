"""The encoder layer (self-attention, then feed-forward, each with a residual and a norm) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig, resolve_config
from .layers import feed_forward, make_norm, residual

__all__ = ["EncoderLayer", "Encoder"]


class EncoderLayer(nn.Module):
    """One encoder layer, built from a config: (B, S, d_model) -> (B, S, d_model).

    ``EncoderLayer(config)``, or keyword fields for a layer built by hand:
    ``EncoderLayer(d_model=32, num_heads=4, d_ff=64, dropout=0.0)``.
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.self_attn = MultiHeadAttention.from_config(cfg)
        self.norm1 = make_norm(cfg)
        self.feed_forward = None if cfg.attention_only else feed_forward(cfg)  # dense, or a mixture of experts
        shared = cfg.parallel_block and cfg.shared_norm  # GPT-J's parallel block: norm1 serves both sublayers
        self.norm2 = None if cfg.attention_only or shared else make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)  # on each sublayer's output, before it is added

    @property
    def attn_norm(self) -> nn.Module:
        """The norm of the self-attention sublayer (stored as norm1)."""
        return self.norm1

    @property
    def ff_norm(self) -> nn.Module | None:
        """The norm of the feed-forward sublayer: norm2, or norm1 where a parallel block shares one."""
        return self.norm2 if self.norm2 is not None or self.feed_forward is None else self.norm1

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask bool (True = may attend) broadcastable to (B, h, S, S) -> (B, S, d_model).

        Post-LN, pre-LN or parallel, as the config says: `layers.residual` wires the sublayers.
        """
        sublayers = [(self.attn_norm, lambda h: self.self_attn(h, h, h, mask)[0])]
        if self.feed_forward is not None:
            sublayers.append((self.ff_norm, self.feed_forward))
        return residual(x, sublayers, self.config, self.dropout)


class Encoder(nn.Module):
    """config.num_layers encoder layers, then a final norm when config.final_norm (pre-LN needs one)."""

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = make_norm(cfg) if cfg.final_norm else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask broadcastable to (B, h, S, S), True = may attend -> (B, S, d_model)."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)
