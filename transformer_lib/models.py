"""The three model families: encoder-decoder, encoder-only and decoder-only."""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache
from .config import TransformerConfig, resolve_config
from .decoder import Decoder
from .embedding import TokenEmbedding, check_token_ids
from .encoder import Encoder
from .masks import causal_mask, padding_mask, target_mask
from .positional import LearnedPositionalEncoding, RotaryPositions, SinusoidalPositionalEncoding

__all__ = ["Transformer", "EncoderOnlyModel", "EncoderClassifier", "EncoderRegressor", "DecoderOnlyLM", "nucleus"]


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


def _check_2d(tokens: torch.Tensor, name: str) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be a (B, S) tensor of token ids, got {shape}")


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    rng: torch.Generator | None,
    top_p: float | None = None,
) -> torch.Tensor:
    """(B, V) logits of the last position -> (B, 1) next ids: argmax if temperature == 0, else sampled.

    top_k keeps the k likeliest tokens; top_p (nucleus sampling) keeps the smallest set of likeliest
    tokens whose probabilities add up to at least top_p. Both may be given; the rest get zero.
    The settings are checked once, by the caller (`_check_sampling`), not at every step.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        logits = logits.masked_fill(~nucleus(logits, top_p), float("-inf"))
    probs = logits.softmax(dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=rng)  # (B, 1)


def nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """(..., V) logits -> (..., V) bool, True for the tokens top-p sampling keeps.

    The kept set is the smallest group of likeliest tokens whose probabilities sum to at least
    top_p; the likeliest token is always kept.
    """
    _check_sampling(0.0, None, top_p)
    probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)  # (..., V) each
    before = probs.cumsum(dim=-1) - probs  # (..., V): mass of the likelier tokens
    keep_sorted = before < top_p  # a token is kept while the mass before it is short of top_p
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017): src (B, S), tgt (B, T) -> logits (B, T, V_tgt).

    Build it from a TransformerConfig, keyword overrides, or both: ``Transformer(cfg, norm_first=True)``.
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.pad_id = cfg.pad_id
        self.src_embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embedding, cfg.pad_id)
        self.tgt_embed = TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, cfg.scale_embedding, cfg.pad_id)
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
        _check_2d(src, "src")
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
    ) -> torch.Tensor:
        """tgt (B, T) ids, memory (B, S, d_model) -> logits (B, T, V_tgt).

        With caches (one KVCache per decoder layer), tgt continues the cached positions and, when
        no tgt_mask is given, each new token may attend to every earlier one and to itself.
        With cross_caches (`new_cross_cache`), the memory's keys and values are projected once.
        """
        _check_2d(tgt, "tgt")
        past = 0 if caches is None else len(caches[0])
        if tgt_mask is None and caches is None:
            tgt_mask = self.make_tgt_mask(tgt)  # (B, 1, T, T)
        elif tgt_mask is None and tgt.shape[1] > 1:
            tgt_mask = causal_mask(past + tgt.shape[1], tgt.device)[past:]  # (T, past + T)
        # (one new token with a cache needs no mask: it may see every earlier position and itself)
        x = self.tgt_pos(self.tgt_embed(tgt), offset=past)  # (B, T, d_model)
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

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, bos_id: int, eos_id: int, max_new_tokens: int, use_cache: bool = True
    ) -> torch.Tensor:
        """src (B, S) -> (B, 1 + n) ids starting with BOS; each row stops growing after EOS (then padding).

        The encoder runs once. With use_cache, each step feeds only the newest token: the decoder's
        self-attention reads earlier keys and values from a KVCache, and its cross-attention projects
        the memory's keys and values once, at the first step. The tokens are the same either way.
        """
        _check_2d(src, "src")
        src_mask = self.make_src_mask(src)
        memory = self.encode(src, src_mask)  # (B, S, d_model), computed once
        if bool(src_mask.all()):  # no padding in any source: cross-attention may see every key, so no mask
            src_mask = None
        B = src.shape[0]
        out = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        caches = self.new_cache(capacity=max(max_new_tokens, 1)) if use_cache else None  # the last token is not fed
        cross_caches = self.new_cross_cache() if use_cache else None
        for _ in range(max_new_tokens):
            step_input = out[:, -1:] if use_cache else out  # (B, 1) or (B, t)
            logits = self.decode(step_input, memory, src_mask, caches=caches, cross_caches=cross_caches)  # (B, t, V)
            logits = logits[:, -1]  # (B, V)
            next_id = logits.argmax(dim=-1)  # (B,)
            next_id = next_id.masked_fill(done, self.pad_id)
            out = torch.cat([out, next_id[:, None]], dim=1)  # (B, t + 1)
            done |= next_id == eos_id
            if bool(done.all()):
                break
        return out

    @torch.no_grad()
    def beam_search(
        self,
        src: torch.Tensor,
        bos_id: int,
        eos_id: int,
        max_new_tokens: int,
        beam_size: int = 4,
        length_penalty: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> (ids (B, 1 + n), log-probabilities (B,)): the best hypothesis per row.

        Each row keeps the `beam_size` likeliest partial outputs. A hypothesis that emits EOS is
        finished; the search for a row ends when it has `beam_size` finished ones, or none left
        alive, or after max_new_tokens. Finished hypotheses are ranked by log-probability divided
        by (number of generated tokens) ** length_penalty (0: no normalisation; 1: per token).
        Rows are laid out as greedy_decode's (BOS first, padding after EOS), and beam_size=1
        gives greedy decoding.
        """
        _check_2d(src, "src")
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        src_mask = self.make_src_mask(src)  # (B, 1, 1, S)
        memory = self.encode(src, src_mask)  # (B, S, d_model), computed once
        B = src.shape[0]
        # The alive hypotheses of every row that is still searching, decoded together in one batch:
        beams = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (N, t)
        scores = torch.zeros(B, device=src.device)  # (N,): their log-probabilities
        owner = list(range(B))  # owner[i]: the row hypothesis i belongs to
        finished: list[list[tuple[float, torch.Tensor, float]]] = [[] for _ in range(B)]  # (rank, ids, logp)
        for _ in range(max_new_tokens):
            logits = self.decode(beams, memory[owner], src_mask[owner])[:, -1]  # (N, V)
            V = logits.shape[-1]
            candidates = logits.log_softmax(dim=-1) + scores[:, None]  # (N, V)
            keep, keep_scores, keep_owner = [], [], []
            for b in dict.fromkeys(owner):  # each searching row, in order
                mine = [i for i, o in enumerate(owner) if o == b]  # its hypotheses
                flat = candidates[mine].flatten()  # (len(mine) * V,)
                top = flat.topk(min(beam_size, flat.numel()))
                alive = []
                for value, index in zip(top.values.tolist(), top.indices.tolist()):
                    seq = torch.cat([beams[mine[index // V]], beams.new_tensor([index % V])])  # (t + 1,)
                    if index % V == eos_id:
                        finished[b].append((value / (seq.numel() - 1) ** length_penalty, seq, value))
                    else:
                        alive.append((seq, value))
                if alive and len(finished[b]) < beam_size:  # the row searches on
                    keep += [seq for seq, _ in alive]
                    keep_scores += [value for _, value in alive]
                    keep_owner += [b] * len(alive)
            if not keep:
                break
            beams, scores, owner = torch.stack(keep), scores.new_tensor(keep_scores), keep_owner  # (N', t + 1)
        else:  # max_new_tokens reached: a row that finished nothing ranks the hypotheses still alive
            alive_by_row: dict[int, list] = {}
            for seq, value, b in zip(beams, scores.tolist(), owner):
                alive_by_row.setdefault(b, []).append((value / (seq.numel() - 1) ** length_penalty, seq, value))
            for b, hypotheses in alive_by_row.items():
                if not finished[b]:
                    finished[b] = hypotheses
        best = [max(f, key=lambda h: h[0]) for f in finished]  # (rank, ids, logp) per row
        width = max(seq.numel() for _, seq, _ in best)
        out = torch.full((B, width), self.pad_id, dtype=torch.long, device=src.device)  # (B, 1 + n)
        for b, (_, seq, _) in enumerate(best):
            out[b, : seq.numel()] = seq
        return out, torch.tensor([logp for _, _, logp in best], device=src.device)


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
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embedding, cfg.pad_id)
        self.pos = _positional(cfg)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, num_outputs)
        _init_weights(self)

    def encode(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, S) -> (hidden (B, S, d_model), padding mask (B, 1, 1, S))."""
        _check_2d(tokens, "tokens")
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
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embedding)
        self.pos = _positional(cfg)
        self.decoder = Decoder(cfg, cross_attention=False)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)  # d_model -> logits over the vocabulary
        _init_weights(self)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.table.weight

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KVCache per layer; with a capacity, each keeps its keys and values in one preallocated buffer."""
        return [KVCache(capacity) for _ in self.decoder.layers]

    def forward(self, tokens: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T, V). With caches, tokens continue the cached positions."""
        _check_2d(tokens, "tokens")
        _, T = tokens.shape
        past = 0 if caches is None else len(caches[0])
        # (T, past + T): rows of the new positions; a single new position may see every key, so no mask
        mask = None if T == 1 else causal_mask(past + T, device=tokens.device)[past:]
        x = self.pos(self.embed(tokens), offset=past)  # (B, T, d_model)
        x = self.decoder(x, tgt_mask=mask, caches=caches)  # (B, T, d_model)
        return self.head(x)  # (B, T, V)

    @torch.no_grad()
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
        """prompt (B, T0) -> (B, T0 + max_new_tokens). temperature=0 is greedy; top_k keeps the k likeliest,
        top_p the smallest set of likeliest tokens with probability at least top_p (nucleus sampling).

        With use_cache, earlier keys and values are kept, so each step feeds one token. rng: a
        torch.Generator on the model's device, for samples that repeat.
        """
        _check_2d(prompt, "prompt")
        check_token_ids(prompt, self.config.vocab_size, "prompt")
        _check_sampling(temperature, top_k, top_p)
        total = prompt.shape[1] + max_new_tokens
        if total > self.config.max_len:
            raise ValueError(
                f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} = {total} "
                f"exceeds max_len={self.config.max_len}"
            )
        out = prompt
        caches = self.new_cache(capacity=total) if use_cache else None
        step_input = prompt
        for _ in range(max_new_tokens):
            logits = self(step_input if use_cache else out, caches)[:, -1]  # (B, V)
            next_id = _sample_next(logits, temperature, top_k, rng, top_p)  # (B, 1)
            out = torch.cat([out, next_id], dim=1)  # (B, t + 1)
            step_input = next_id
        return out
