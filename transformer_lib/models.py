"""The three model families: encoder-decoder, encoder-only and decoder-only.

How they choose their output tokens (greedy, sampling, beam search) lives in `decoding`; the
methods `generate`, `greedy_decode` and `beam_search` call it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from . import decoding
from .attention import KVCache
from .config import TransformerConfig, resolve_config
from .decoder import Decoder, plain_decoder_step, plain_function, runs_as_written
from .embedding import TokenEmbedding, check_token_batch
from .encoder import Encoder
from .masks import causal_mask, padding_mask, target_mask
from .positional import LearnedPositionalEncoding, RotaryPositions, SinusoidalPositionalEncoding

__all__ = ["Transformer", "EncoderOnlyModel", "EncoderClassifier", "EncoderRegressor", "DecoderOnlyLM"]


_ADDED = (SinusoidalPositionalEncoding, LearnedPositionalEncoding)  # positions added to the embeddings


def _takes_plain_step(model: nn.Module, cls: type, methods: tuple[str, ...], embed: nn.Module, pos: nn.Module) -> bool:
    """Whether a plain step would compute what `model`'s modules compute: `cls`'s own `methods`, no hook and no
    training anywhere (`runs_as_written`), the package's token embedding and added positions."""
    mine = all(getattr(type(model), m) is getattr(cls, m) for m in methods)
    return mine and runs_as_written(model) and type(embed) is TokenEmbedding and type(pos) in _ADDED


def _plain_model_step(
    embed: TokenEmbedding, pos: nn.Module, layers: Callable[[torch.Tensor], torch.Tensor], head: nn.Linear
) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """(ids (B, 1), position) -> logits (B, V): the embedding, the positions, the decoder's plain step, the head."""
    embed_fn, positions, head_fn = embed.forward, pos.forward, plain_function(head)

    def step(ids: torch.Tensor, position: int) -> torch.Tensor:
        x = positions(embed_fn(ids, checked=True), offset=position)  # (B, 1, d_model)
        return head_fn(layers(x))[:, -1]  # (B, 1, d_model) -> (B, V)

    return step


def _positional(cfg: TransformerConfig) -> nn.Module:
    kinds = {"sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEncoding, "rope": RotaryPositions}
    return kinds[cfg.positional](cfg.d_model, cfg.max_len, cfg.dropout)


def _init_weights(model: nn.Module) -> None:
    """Xavier-uniform for every linear layer and token table, as nn.Transformer does for its matrices.

    The padding row of a token table stays zero; norms stay at 1 and 0; a learned positional
    table keeps its own N(0, 0.02) start.
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, TokenEmbedding):
            nn.init.xavier_uniform_(module.table.weight)
            if module.table.padding_idx is not None:
                with torch.no_grad():
                    module.table.weight[module.table.padding_idx].zero_()


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017): src (B, S), tgt (B, T) -> logits (B, T, V_tgt).

    Build it from a TransformerConfig, keyword overrides, or both: ``Transformer(cfg, norm_first=True)``.
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.pad_id = cfg.pad_id
        self.src_embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, scale=cfg.scale_embedding, pad_id=cfg.pad_id)
        self.tgt_embed = TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, scale=cfg.scale_embedding, pad_id=cfg.pad_id)
        self.src_pos = _positional(cfg)
        self.tgt_pos = _positional(cfg)  # added to the decoder's own input embeddings
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)  # d_model -> logits over the target vocabulary
        _init_weights(self)
        if cfg.tie_embeddings:
            self.head.weight = self.tgt_embed.table.weight

    def make_src_mask(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S) -> (B, 1, 1, S): keys that are not padding (True = may attend)."""
        return padding_mask(src, self.pad_id)

    def make_tgt_mask(self, tgt: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, 1, T, T): keys that are neither padding nor in the future."""
        return target_mask(tgt, self.pad_id)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) ids -> memory (B, S, d_model)."""
        check_token_batch(src, "src")
        if src_mask is None:
            src_mask = self.make_src_mask(src)
        return self.encoder(self.src_pos(self.src_embed(src)), src_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        cross_caches: list[KVCache] | None = None,
        *,
        checked: bool = False,
    ) -> torch.Tensor:
        """tgt (B, T) ids, memory (B, S, d_model) -> logits (B, T, V_tgt).

        With caches (one KVCache per decoder layer), tgt continues the cached positions and, when
        no tgt_mask is given, each new token may attend to every earlier one and to itself.
        With cross_caches (`new_cross_cache`), the memory's keys and values are projected once.
        checked=True: the ids were checked already (`TokenEmbedding.forward`).
        """
        check_token_batch(tgt, "tgt")
        past = 0 if caches is None else caches[0].length
        if tgt_mask is None and caches is None:
            tgt_mask = self.make_tgt_mask(tgt)  # (B, 1, T, T)
        elif tgt_mask is None and tgt.shape[1] > 1:
            tgt_mask = causal_mask(past + tgt.shape[1], tgt.device)[past:]  # (T, past + T)
        # (one new token with a cache needs no mask: it may see every earlier position and itself)
        x = self.tgt_pos(self.tgt_embed(tgt, checked=checked), offset=past)  # (B, T, d_model)
        x = self.decoder(x, memory, tgt_mask, src_mask, caches, cross_caches)  # (B, T, d_model)
        return self.head(x)  # (B, T, V_tgt)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src (B, S), tgt (B, T) (starting with BOS) -> logits (B, T, V_tgt)."""
        src_mask = self.make_src_mask(src)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KVCache per decoder layer, for the decoder's self-attention (preallocated with a capacity)."""
        return [KVCache(capacity) for _ in self.decoder.layers]

    def new_cross_cache(self) -> list[KVCache]:
        """One empty static KVCache per decoder layer: cross-attention keys and values, computed once per source."""
        return [KVCache(static=True) for _ in self.decoder.layers]

    def plain_step(
        self, memory: torch.Tensor, src_mask: torch.Tensor | None, capacity: int
    ) -> Callable[[torch.Tensor, int], torch.Tensor] | None:
        """greedy_decode's cached step as plain functions: (ids (B, 1), position) -> logits (B, V_tgt), or None.

        The same numbers as `decode` with caches and cross caches, without nn.Module's dispatch on every
        call (`decoder.plain_decoder_step`); None where the modules must run as modules (a hook, training
        mode, a subclass that changes decoding) or the decoder is one the plain step does not reproduce.
        """
        methods = ("decode", "new_cache", "new_cross_cache")
        if not _takes_plain_step(self, Transformer, methods, self.tgt_embed, self.tgt_pos):
            return None
        layers = plain_decoder_step(self.decoder, memory, src_mask, capacity)
        return None if layers is None else _plain_model_step(self.tgt_embed, self.tgt_pos, layers, self.head)

    def greedy_decode(
        self, src: torch.Tensor, bos_id: int, eos_id: int, max_new_tokens: int, use_cache: bool = True
    ) -> torch.Tensor:
        """src (B, S) -> (B, 1 + n) ids starting with BOS, padding after EOS: `decoding.greedy_decode`."""
        return decoding.greedy_decode(self, src, bos_id, eos_id, max_new_tokens, use_cache)

    def beam_search(
        self,
        src: torch.Tensor,
        bos_id: int,
        eos_id: int,
        max_new_tokens: int,
        beam_size: int = 4,
        length_penalty: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> (ids (B, 1 + n), log-probabilities (B,)) of the best hypothesis: `decoding.beam_search`."""
        return decoding.beam_search(self, src, bos_id, eos_id, max_new_tokens, beam_size, length_penalty)


class EncoderOnlyModel(nn.Module):
    """An encoder, a pooling step and a linear head: tokens (B, S) -> (B, num_outputs).

    pooling="mean" averages the real (non-pad) positions; pooling="first" takes position 0
    (a [CLS]-style token the data must provide).
    """

    def __init__(
        self, config: TransformerConfig | None = None, num_outputs: int = 2, pooling: str = "mean", **overrides
    ):
        super().__init__()
        if pooling not in ("mean", "first"):
            raise ValueError(f"pooling must be 'mean' or 'first', got {pooling!r}")
        cfg = self.config = resolve_config(config, overrides)
        self.pad_id = cfg.pad_id
        self.pooling = pooling
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, scale=cfg.scale_embedding, pad_id=cfg.pad_id)
        self.pos = _positional(cfg)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, num_outputs)
        _init_weights(self)

    def encode(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, S) -> (hidden (B, S, d_model), padding mask (B, 1, 1, S))."""
        check_token_batch(tokens, "tokens")
        mask = padding_mask(tokens, self.pad_id)  # (B, 1, 1, S)
        return self.encoder(self.pos(self.embed(tokens)), mask), mask

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """hidden (B, S, d_model), mask (B, 1, 1, S) -> (B, d_model), one vector per sequence."""
        if self.pooling == "first":
            return hidden[:, 0]
        keep = mask[:, 0, 0, :, None].to(hidden.dtype)  # (B, S, 1)
        return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)  # (B, d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, S) -> (B, num_outputs)."""
        hidden, mask = self.encode(tokens)
        return self.head(self.pool(hidden, mask))


class EncoderClassifier(EncoderOnlyModel):
    """Sequence classification: tokens (B, S) -> class logits (B, num_classes)."""

    def __init__(
        self, config: TransformerConfig | None = None, num_classes: int = 2, pooling: str = "mean", **overrides
    ):
        super().__init__(config, num_classes, pooling, **overrides)


class EncoderRegressor(EncoderOnlyModel):
    """Sequence regression: tokens (B, S) -> (B,) values, or (B, num_targets) when num_targets > 1."""

    def __init__(
        self, config: TransformerConfig | None = None, num_targets: int = 1, pooling: str = "mean", **overrides
    ):
        super().__init__(config, num_targets, pooling, **overrides)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, S) -> (B,) or (B, num_targets)."""
        out = super().forward(tokens)  # (B, num_targets)
        return out.squeeze(-1) if out.shape[-1] == 1 else out


class DecoderOnlyLM(nn.Module):
    """A GPT-style language model: decoder layers without cross-attention. tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, scale=cfg.scale_embedding)
        self.pos = _positional(cfg)
        self.decoder = Decoder(cfg, cross_attention=False)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)  # d_model -> logits over the vocabulary
        _init_weights(self)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.table.weight

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KVCache per layer; with a capacity, each keeps its keys and values in one preallocated buffer."""
        return [KVCache(capacity) for _ in self.decoder.layers]

    def forward(
        self, tokens: torch.Tensor, caches: list[KVCache] | None = None, *, checked: bool = False
    ) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T, V). With caches, tokens continue the cached positions.

        checked=True: the ids were checked already (`TokenEmbedding.forward`), as the decoding loops do.
        """
        check_token_batch(tokens, "tokens")
        _, T = tokens.shape
        past = 0 if caches is None else caches[0].length
        # (T, past + T): rows of the new positions; a single new position may see every key, so no mask
        mask = None if T == 1 else causal_mask(past + T, device=tokens.device)[past:]
        x = self.pos(self.embed(tokens, checked=checked), offset=past)  # (B, T, d_model)
        x = self.decoder(x, tgt_mask=mask, caches=caches)  # (B, T, d_model)
        return self.head(x)  # (B, T, V)

    def plain_step(self, caches: list[KVCache]) -> Callable[[torch.Tensor, int], torch.Tensor] | None:
        """generate's cached step as plain functions: (ids (B, 1), position) -> logits (B, V), or None.

        `caches` hold the prompt's keys and values (the modules' prefill); each call feeds one new token
        and extends them, with the same numbers as `forward` with caches, without nn.Module's dispatch on
        every call (`decoder.plain_decoder_step`). None where the modules must run as modules (a hook,
        training mode, a subclass that changes forward or the caches) or the decoder is one the plain step
        does not reproduce (RoPE, grouped-query attention, a parallel block).
        """
        if not _takes_plain_step(self, DecoderOnlyLM, ("forward", "new_cache"), self.embed, self.pos):
            return None
        layers = plain_decoder_step(self.decoder, None, None, 0, caches=caches)
        return None if layers is None else _plain_model_step(self.embed, self.pos, layers, self.head)

    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        rng: torch.Generator | None = None,
        top_p: float | None = None,
    ) -> torch.Tensor:
        """prompt (B, T0) -> (B, T0 + max_new_tokens), greedy or sampled: `decoding.generate`."""
        return decoding.generate(self, prompt, max_new_tokens, temperature, top_k, use_cache, rng, top_p)
