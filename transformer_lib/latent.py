"""Multi-head latent attention (DeepSeek-V2 and V3): every head's keys and values made from one small latent per token.

Ordinary attention caches, per token and layer, a key and a value for every key-value head:
2 x num_kv_heads x head_dim numbers. Grouped-query and multi-query attention shrink that by sharing
heads. Multi-head latent attention (MLA) keeps all the heads but caches something smaller: one
vector c of kv_rank numbers per token (the latent), from which a learned matrix makes every head's
key and value, and one rotary key of rope_dim numbers that all heads share. DeepSeek-V3 caches
512 + 64 = 576 numbers per token and layer where its 128 heads would need 128 x (128 + 64) key numbers
and 128 x 128 value numbers of their own, 40,960 in all (about 71 times as many).

The rotary position cannot go through the latent: a rotation that depends on the position would sit
between the two matrices, and the matrices could no longer be multiplied together once (below). So
each head's query and key have two parts: `nope_dim` numbers made without positions (the key's
from the latent) and `rope_dim` numbers that are turned by RoPE (the key's from the token directly,
one for all heads: the decoupled rotary key).

At inference the key matrix can be *absorbed* into the query: q . (W_uk c) = (W_uk^T q) . c, so a
head scores its query against the cached latents themselves and never builds the keys; the value
matrix moves after the attention the same way. `MultiHeadLatentAttention.forward(absorbed=True)`
computes that; `absorbed=False` builds the keys and values, as training does. Both give the same
numbers to rounding.

Shapes: B batch, T new positions, S all positions (cached and new), h heads.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .attention import KVCache
from .config import TransformerConfig, resolve_config
from .embedding import TokenEmbedding, check_token_batch
from .layers import FeedForward, RMSNorm
from .masks import causal_mask
from .positional import rotary_tables, turn

__all__ = ["MultiHeadLatentAttention", "LatentLayer", "LatentLM", "kv_values_per_token", "kv_fields"]


class MultiHeadLatentAttention(nn.Module):
    """MLA: x (B, T, d_model) -> (B, T, d_model), causal, with an optional cache of latents.

    - queries: W_q x, or with q_rank, W_q_up RMSNorm(W_q_down x) (a low-rank query, as DeepSeek-V3's);
      each head's query is nope_dim numbers without positions and rope_dim numbers turned by RoPE;
    - latent: W_kv_down x gives kv_rank + rope_dim numbers per token: the latent c (then RMSNorm)
      and the shared rotary key (then RoPE);
    - keys and values: W_kv_up c gives each head nope_dim key numbers and v_dim value numbers; a
      head's key is those nope_dim numbers followed by the shared rotary key;
    - scores scaled by 1 / sqrt(nope_dim + rope_dim); out_proj maps the heads' values back.

    RoPE pairs dimension i with i + rope_dim / 2 of the rotary part ("half" layout): Hugging Face's
    DeepSeek-V3 with `rope_interleave=True` (its default) pairs 2i with 2i + 1 instead, which `tl.hf` turns into
    this layout when it converts.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        kv_rank: int,
        nope_dim: int,
        rope_dim: int,
        v_dim: int,
        q_rank: int | None = None,
        *,
        rope_base: float = 10000.0,
        eps: float = 1e-6,
        bias: bool = False,
    ) -> None:
        super().__init__()
        sizes = {"d_model": d_model, "num_heads": num_heads, "kv_rank": kv_rank, "nope_dim": nope_dim}
        sizes |= {"rope_dim": rope_dim, "v_dim": v_dim} | ({} if q_rank is None else {"q_rank": q_rank})
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if rope_dim % 2:
            raise ValueError(f"RoPE turns pairs of dimensions, so rope_dim must be even, got {rope_dim}")
        self.num_heads, self.kv_rank, self.q_rank = num_heads, kv_rank, q_rank
        self.nope_dim, self.rope_dim, self.v_dim, self.rope_base = nope_dim, rope_dim, v_dim, rope_base
        qk_dim = nope_dim + rope_dim
        self.scale = qk_dim**-0.5
        if q_rank is None:
            self.q_proj = nn.Linear(d_model, num_heads * qk_dim, bias=False)
            self.q_down = self.q_norm = self.q_up = None
        else:
            self.q_proj = None
            self.q_down = nn.Linear(d_model, q_rank, bias=bias)
            self.q_norm = RMSNorm(q_rank, eps)
            self.q_up = nn.Linear(q_rank, num_heads * qk_dim, bias=False)
        self.kv_down = nn.Linear(d_model, kv_rank + rope_dim, bias=bias)  # the latent and the shared rotary key
        self.kv_norm = RMSNorm(kv_rank, eps)
        self.kv_up = nn.Linear(kv_rank, num_heads * (nope_dim + v_dim), bias=False)  # every head's key and value
        self.out_proj = nn.Linear(num_heads * v_dim, d_model, bias=bias)

    def _queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d_model) -> (q_nope (B, h, T, nope_dim), q_rope (B, h, T, rope_dim), turned)."""
        B, T, _ = x.shape
        q = self.q_proj(x) if self.q_proj is not None else self.q_up(self.q_norm(self.q_down(x)))  # (B, T, h * qk)
        q = q.view(B, T, self.num_heads, self.nope_dim + self.rope_dim).transpose(1, 2)  # (B, h, T, qk)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        return q_nope, turn(q_rope, cos, sin)

    def latents(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """What the cache keeps for tokens x (B, T, d_model) at positions offset..offset+T-1:
        (c (B, 1, T, kv_rank) after its RMSNorm, the shared rotary key (B, 1, T, rope_dim) after RoPE)."""
        B, T, _ = x.shape
        c, k_rope = self.kv_down(x).split([self.kv_rank, self.rope_dim], dim=-1)  # (B, T, kv_rank), (B, T, rope)
        cos, sin = self._tables(offset, T, x.device)
        return self.kv_norm(c).view(B, 1, T, self.kv_rank), turn(k_rope.view(B, 1, T, self.rope_dim), cos, sin)

    def _tables(self, offset: int, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(offset, offset + length, device=device)  # (T,)
        return rotary_tables(positions, self.rope_dim, self.rope_base)  # (T, rope_dim) each

    def _per_head(self) -> tuple[torch.Tensor, torch.Tensor]:
        """kv_up's weight as (W_uk (h, nope_dim, kv_rank), W_uv (h, v_dim, kv_rank))."""
        w = self.kv_up.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_rank)
        return w.split([self.nope_dim, self.v_dim], dim=1)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, absorbed: bool = False) -> torch.Tensor:
        """x (B, T, d_model) -> (B, T, d_model): each position attends to itself and every earlier one.

        `cache` (a KVCache) keeps the latents c as its "keys" and the rotary keys as its "values",
        kv_rank + rope_dim numbers per token; x then continues the cached positions. `absorbed=True`
        scores the queries against the latents directly (W_uk folded into the query, W_uv applied
        after the attention): the same numbers, without building any head's keys or values.
        """
        if x.dim() != 3 or x.shape[-1] != self.kv_down.in_features:
            raise ValueError(f"x must be (B, T, d_model={self.kv_down.in_features}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        past = 0 if cache is None else cache.length
        c, k_rope = self.latents(x, past)  # (B, 1, T, kv_rank), (B, 1, T, rope_dim)
        if cache is not None:
            c, k_rope = cache.update(c, k_rope)  # (B, 1, S, kv_rank), (B, 1, S, rope_dim)
        S = c.shape[-2]
        q_nope, q_rope = self._queries(x, *self._tables(past, T, x.device))  # (B, h, T, nope), (B, h, T, rope)
        w_uk, w_uv = self._per_head()  # (h, nope, kv_rank), (h, v_dim, kv_rank)
        mask = causal_mask(S, device=x.device)[S - T :]  # (T, S): new position past + t sees keys 0..past + t
        rope_scores = q_rope @ k_rope.transpose(-2, -1)  # (B, h, T, S): the shared rotary key
        if absorbed:
            q_latent = q_nope @ w_uk  # (B, h, T, kv_rank): the query moved into the latent's space
            scores = q_latent @ c.transpose(-2, -1) + rope_scores  # (B, h, T, S)
        else:
            k_nope = c @ w_uk.transpose(-2, -1)  # (B, 1, S, kv_rank) @ (h, kv_rank, nope) -> (B, h, S, nope)
            scores = q_nope @ k_nope.transpose(-2, -1) + rope_scores  # (B, h, T, S)
        weights = (scores * self.scale).masked_fill(~mask, float("-inf")).softmax(dim=-1)  # (B, h, T, S)
        if absorbed:
            out = (weights @ c) @ w_uv.transpose(-2, -1)  # (B, h, T, kv_rank) -> (B, h, T, v_dim)
        else:
            values = c @ w_uv.transpose(-2, -1)  # (B, h, S, v_dim): every head's values, built
            out = weights @ values  # (B, h, T, v_dim)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.num_heads * self.v_dim))  # (B, T, d_model)


class LatentLayer(nn.Module):
    """A pre-norm decoder layer with MLA: x + MLA(RMSNorm(x)), then + SwiGLU(RMSNorm(x)). (B, T, d_model) -> same."""

    def __init__(self, config: TransformerConfig, **latent) -> None:
        super().__init__()
        cfg = self.config = config
        self.attn_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.attn = MultiHeadLatentAttention(
            cfg.d_model, cfg.num_heads, rope_base=cfg.rope_base, bias=cfg.bias, **latent
        )
        self.ff_norm = RMSNorm(cfg.d_model, cfg.eps)
        self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff, activation="swiglu", bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, absorbed: bool = False) -> torch.Tensor:
        """x (B, T, d_model) -> (B, T, d_model); `cache` and `absorbed` as MultiHeadLatentAttention's."""
        x = x + self.attn(self.attn_norm(x), cache, absorbed)
        return x + self.feed_forward(self.ff_norm(x))


class LatentLM(nn.Module):
    """A decoder-only language model with MLA in every layer and dense SwiGLU feed-forward blocks, as DeepSeek-V3's
    dense layers: tokens (B, T) -> logits (B, T, V).

    `config` gives the sizes every model has (vocab_size, d_model, num_heads, num_layers, d_ff, eps,
    rope_base, bias: the attention's; tie_embeddings); the latent's shape comes as MultiHeadLatentAttention's
    arguments (kv_rank, nope_dim, rope_dim, v_dim, q_rank), kept in `latent`.
    """

    def __init__(
        self,
        config: TransformerConfig | None = None,
        *,
        kv_rank: int,
        nope_dim: int,
        rope_dim: int,
        v_dim: int,
        q_rank: int | None = None,
        **overrides,
    ) -> None:
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.latent = dict(kv_rank=kv_rank, nope_dim=nope_dim, rope_dim=rope_dim, v_dim=v_dim, q_rank=q_rank)
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, scale=False)
        self.layers = nn.ModuleList(LatentLayer(cfg, **self.latent) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.table.weight

    def new_cache(self) -> list[KVCache]:
        """One empty KVCache per layer: each keeps its layer's latents and rotary keys."""
        return [KVCache() for _ in self.layers]

    def forward(
        self, tokens: torch.Tensor, caches: list[KVCache] | None = None, absorbed: bool = False
    ) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T, V); with caches, tokens continue the cached positions."""
        check_token_batch(tokens, "tokens")
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"expected one KVCache per layer ({len(self.layers)}), got {len(caches)}")
        x = self.embed(tokens)  # (B, T, d_model): no positions added; RoPE turns queries and keys inside
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i], absorbed)
        return self.head(self.norm(x))  # (B, T, V)


def kv_values_per_token(config: Mapping[str, int]) -> int:
    """Numbers a decoder caches per token, over all its layers, from a configuration's fields.

    MLA (a "kv_rank" field): num_layers x (kv_rank + rope_dim). Otherwise ordinary attention:
    num_layers x 2 x num_kv_heads x head_dim, where num_kv_heads is num_heads (MHA), fewer (GQA) or
    1 (MQA). Times the bytes of one number (2 in bfloat16) gives the bytes per token.
    """
    if "kv_rank" in config:
        return config["num_layers"] * (config["kv_rank"] + config["rope_dim"])
    return config["num_layers"] * 2 * config["num_kv_heads"] * config["head_dim"]


def kv_fields(config) -> dict[str, int]:
    """A `transformers` configuration (any object with its fields) -> the fields `kv_values_per_token` reads:
    {"num_layers", "kv_rank", "rope_dim"} for multi-head latent attention (a `kv_lora_rank`, as DeepSeek-V2 and V3
    have), else {"num_layers", "num_kv_heads", "head_dim"}.

    The heads that cache keys and values are `num_key_value_heads` where the configuration has it (GQA; all heads
    when it is unset). Falcon names them its own way: with `new_decoder_architecture` its `num_kv_heads`, otherwise
    one head when `multi_query` (Falcon-7B, whose `num_kv_heads` field still says 71), else every head. The head's
    width is `head_dim` where given, else hidden_size / num_attention_heads."""
    layers = config.num_hidden_layers
    if getattr(config, "kv_lora_rank", None):
        return {"num_layers": layers, "kv_rank": config.kv_lora_rank, "rope_dim": config.qk_rope_head_dim}
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if getattr(config, "model_type", "") == "falcon":
        kv_heads = config.num_kv_heads if config.new_decoder_architecture else 1 if config.multi_query else heads
    else:
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return {"num_layers": layers, "num_kv_heads": kv_heads, "head_dim": head_dim}
