"""BERT (Devlin et al., 2019): the 2017 encoder, pre-trained by filling in hidden words, then fine-tuned.

The layers are the book's own `Encoder`, post-LN as in 2017. What BERT changes around them, each a
line of this module:

- **Positions are learned**, one trained vector per position, not sinusoids.
- **Token types.** A third table adds "segment A" or "segment B" to every token, so one input can
  hold two sentences (a question and its passage).
- **The embeddings are normalised.** Word + position + type, then a LayerNorm and dropout; the 2017
  model scales by sqrt(d_model) instead and has no norm there.
- **Exact GELU** in the feed-forward blocks, not ReLU, and LayerNorm's eps is 1e-12.
- **A pooler**: tanh(W h + b) on the first token's vector, `[CLS]`. Pre-training taught it to say
  whether segment B followed segment A; classification heads read it.
- **The masked-LM head** is a transform (linear, GELU, LayerNorm), then the token table again (tied)
  with a bias per word.

`mask_tokens` chooses what pre-training hides (the 80/10/10 rule) and `mlm_loss` scores only those
positions. Weights move to and from `transformers`' BertForMaskedLM and BertForSequenceClassification
in `transformer_lib.hf`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig, resolve_config
from .embedding import TokenEmbedding, check_token_batch
from .encoder import Encoder
from .layers import make_norm
from .masks import padding_mask

__all__ = [
    "IGNORE",
    "bert_config",
    "BertEmbeddings",
    "BertModel",
    "BertForMaskedLM",
    "BertClassifier",
    "mask_tokens",
    "mlm_loss",
]

IGNORE = -100  # the label of a position the loss skips (PyTorch's cross_entropy default ignore_index)


def bert_config(**fields) -> TransformerConfig:
    """A TransformerConfig with BERT's choices (post-LN, learned positions, exact GELU, eps 1e-12), then `fields`."""
    bert = dict(
        norm_first=False, positional="learned", activation="gelu", scale_embedding=False, eps=1e-12, max_len=512
    )
    return TransformerConfig(**(bert | fields))


def _check_bert(cfg: TransformerConfig) -> None:
    """Refuse a config this module would not build as BERT, naming the fields that differ."""
    want = dict(norm_first=False, final_norm=False, positional="learned", norm="layer", parallel_block=False)
    want |= dict(attention_only=False, num_experts=0, bias=True, num_kv_heads=cfg.num_heads)
    differ = {k: (getattr(cfg, k), v) for k, v in want.items() if getattr(cfg, k) != v}
    if differ:
        raise ValueError(f"not a BERT config; these fields differ (got, BERT's): {differ}. Start from bert_config().")


class BertEmbeddings(nn.Module):
    """tokens (B, S) and token types (B, S) -> LayerNorm(word + position + type), dropped out: (B, S, d_model)."""

    def __init__(self, config: TransformerConfig, token_types: int = 2):
        super().__init__()
        cfg = self.config = config
        self.word = TokenEmbedding(cfg.vocab_size, cfg.d_model, scale=False, pad_id=cfg.pad_id)
        self.position = nn.Embedding(cfg.max_len, cfg.d_model)
        self.token_type = nn.Embedding(token_types, cfg.d_model)
        self.norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, S), token_types (B, S) of ids in [0, token_types) or None (all segment A) -> (B, S, d_model)."""
        B, S = tokens.shape
        if S > self.config.max_len:
            raise ValueError(f"BERT reads at most max_len = {self.config.max_len} tokens, got {S}")
        if token_types is None:
            token_types = torch.zeros_like(tokens)
        elif token_types.shape != tokens.shape:
            raise ValueError(f"token_types must have the tokens' shape {(B, S)}, got {tuple(token_types.shape)}")
        positions = torch.arange(S, device=tokens.device)  # (S,), the same for every row
        x = self.word(tokens) + self.position(positions) + self.token_type(token_types)  # (B, S, d_model)
        return self.dropout(self.norm(x))


class BertModel(nn.Module):
    """Embeddings, then the book's post-LN Encoder: tokens (B, S) -> (hidden (B, S, d_model), pooled (B, d_model)).

    `pooled` is tanh(W h + b) of the first position, `[CLS]`, or None when built with pooler=False
    (the masked-LM model has none). Padding (config.pad_id) is masked out of attention.
    """

    def __init__(
        self, config: TransformerConfig | None = None, *, token_types: int = 2, pooler: bool = True, **overrides
    ):
        super().__init__()
        cfg = self.config = resolve_config(config or bert_config(), overrides)
        _check_bert(cfg)
        self.embeddings = BertEmbeddings(cfg, token_types)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model) if pooler else None

    def forward(
        self,
        tokens: torch.Tensor,
        token_types: torch.Tensor | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens (B, S) with `[CLS]` first -> hidden (B, S, d_model), pooled (B, d_model) or None.

        attention_mask (B, S), as Hugging Face's: 1 (or True) for a real token, 0 for padding. Keys are hidden where
        it says 0 and where the token is config.pad_id (None: no id is padding)."""
        check_token_batch(tokens, "tokens")
        mask = padding_mask(tokens, self.config.pad_id)  # (B, 1, 1, S): padded keys are never read
        if attention_mask is not None:
            if attention_mask.shape != tokens.shape:
                raise ValueError(
                    f"attention_mask must have the tokens' shape {tuple(tokens.shape)} (1 = token, 0 = padding), "
                    f"got {tuple(attention_mask.shape)}"
                )
            mask = mask & attention_mask.to(torch.bool)[:, None, None, :]  # (B, 1, 1, S)
        hidden = self.encoder(self.embeddings(tokens, token_types), mask)  # (B, S, d_model)
        pooled = None if self.pooler is None else torch.tanh(self.pooler(hidden[:, 0]))  # (B, d_model)
        return hidden, pooled


def _init_bert(model: nn.Module) -> None:
    """BERT's start: every linear layer and table N(0, 0.02), biases 0, norms 1 and 0, the padding row 0."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()


class BertForMaskedLM(nn.Module):
    """BERT with its masked-LM head: tokens (B, S) -> logits over the vocabulary at every position (B, S, V).

    The head transforms each vector (linear, GELU, LayerNorm), then scores it against the token table
    itself (tied: the same weights that embed a word recognise it) plus a bias per word.
    """

    def __init__(self, config: TransformerConfig | None = None, *, token_types: int = 2, **overrides):
        super().__init__()
        self.bert = BertModel(config, token_types=token_types, pooler=False, **overrides)
        cfg = self.config = self.bert.config
        self.transform = nn.Linear(cfg.d_model, cfg.d_model)
        self.transform_norm = make_norm(cfg)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        _init_bert(self)

    def forward(
        self,
        tokens: torch.Tensor,
        token_types: torch.Tensor | None = None,
        *,
        at: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (B, S) -> logits (B, S, vocab_size); or, given `at` (B, S) bool, only at those positions: (n, V).

        Training needs the scores of the chosen positions only (15% of them), and the head's product with
        the whole vocabulary is most of the work, so `at` skips the rest (Google's BERT does the same).
        attention_mask (B, S): Hugging Face's (1 = token, 0 = padding), as BertModel takes it.
        """
        hidden, _ = self.bert(tokens, token_types, attention_mask=attention_mask)  # (B, S, d_model)
        if at is not None:
            if at.shape != tokens.shape or at.dtype != torch.bool:
                raise ValueError(f"at must be a bool tensor of the tokens' shape {tuple(tokens.shape)}")
            hidden = hidden[at]  # (n, d_model), row by row
        h = self.transform_norm(F.gelu(self.transform(hidden)))  # (..., d_model)
        return h @ self.bert.embeddings.word.weight.T + self.output_bias  # tied: (..., d_model) @ (d_model, V)


class BertClassifier(nn.Module):
    """BERT with a classification head on the pooled `[CLS]` vector: tokens (B, S) -> class logits (B, num_classes)."""

    def __init__(
        self, config: TransformerConfig | None = None, num_classes: int = 2, *, token_types: int = 2, **overrides
    ):
        super().__init__()
        self.bert = BertModel(config, token_types=token_types, pooler=True, **overrides)
        self.config = self.bert.config
        self.dropout = nn.Dropout(self.config.dropout)
        self.classifier = nn.Linear(self.config.d_model, num_classes)
        _init_bert(self)

    def forward(
        self,
        tokens: torch.Tensor,
        token_types: torch.Tensor | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (B, S) -> logits (B, num_classes); attention_mask (B, S) as BertModel takes it."""
        _, pooled = self.bert(tokens, token_types, attention_mask=attention_mask)  # (B, d_model)
        return self.classifier(self.dropout(pooled))


def mask_tokens(
    tokens: torch.Tensor,
    *,
    mask_id: int,
    special_ids: tuple[int, ...] | list[int],
    vocab_size: int,
    rate: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: tokens (B, S) -> (inputs (B, S), labels (B, S)).

    Each position that is not special (padding, `[CLS]`, `[SEP]`, `[MASK]`... every id in special_ids)
    is chosen with probability `rate`. A chosen position becomes `[MASK]` 80% of the time, a random
    ordinary word 10%, and stays as it was 10%; its label is the original id. Every other label is
    IGNORE, so the loss reads only the chosen positions. The random words never include special ids.
    """
    check_token_batch(tokens, "tokens")
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate!r}")
    special = torch.tensor(sorted(set(special_ids)), dtype=tokens.dtype)
    if mask_id not in special.tolist():
        raise ValueError(f"special_ids must include mask_id = {mask_id} (a [MASK] is never a word to predict)")
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in set(special.tolist())], dtype=tokens.dtype)
    if ordinary.numel() == 0:
        raise ValueError(f"every id below vocab_size = {vocab_size} is special: no ordinary word to draw")
    can = ~torch.isin(tokens, special)  # (B, S): the ordinary words
    roll = torch.rand(tokens.shape, generator=generator)  # (B, S), one draw decides both choices
    chosen = can & (roll < rate)
    # within the chosen (roll < rate): the first 80% of that range -> [MASK], the next 10% -> a random word
    to_mask = chosen & (roll < 0.8 * rate)
    to_random = chosen & ~to_mask & (roll < 0.9 * rate)
    picks = ordinary[torch.randint(ordinary.numel(), tokens.shape, generator=generator)]  # (B, S)
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_random, picks, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions only; labels (B, S) hold IGNORE everywhere else.

    logits are (B, S, V), or (n, V) for the chosen positions alone, in row order: what
    `BertForMaskedLM(tokens, at=labels != IGNORE)` returns. A batch where no position was chosen (it
    happens by chance in small batches) has loss 0 and no gradient, where cross_entropy would give NaN.
    """
    chosen = labels != IGNORE  # (B, S)
    n = int(chosen.sum())
    if logits.dim() == 2 and logits.shape[0] != n or logits.dim() == 3 and logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits must be (B, S, V) or (n, V) for the n = {n} chosen positions of labels {tuple(labels.shape)}, "
            f"got {tuple(logits.shape)}"
        )
    if n == 0:
        return logits.sum() * 0.0
    if logits.dim() == 3:
        logits = logits[chosen]  # (n, V)
    return F.cross_entropy(logits, labels[chosen])
