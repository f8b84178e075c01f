"""BART (Lewis et al., 2020): an encoder-decoder pre-trained to mend text that was broken on purpose.

The model reads a corrupted line and writes the whole original line back, so pre-training needs no
labels: the text is its own target. What makes BART is the corruption, and this module starts with it.
Each function takes one line of ids, (S,), and returns the corrupted line, whose length may differ:

- `text_infilling`: spans with Poisson(3) lengths cover about 30% of the tokens, and each span becomes
  one mask, so the model must also work out how many tokens are missing. A span of length 0 inserts a
  mask where nothing is missing. (BART's best setting, with `sentence_permutation`.)
- `sentence_permutation`: the sentences of the line in a random order.
- `token_deletion`: each token dropped with a probability; the model must find where.

`infilling_spans` draws the spans that `text_infilling` applies, so that their statistics can be
tested (the lengths are Poisson but for the last, cut to fit; a share of e^-3 of them empty; the masked
share is the one asked).

For a trained model: `gap_source` hides a gap of any length behind one mask, `written` is what the model writes
back, `read_fill` reads what it wrote into the gap, and `strip_marks` takes a line's punctuation away (the chapter's
two measurements: a gap of unknown length, and punctuation put back).

The model, `BartForConditionalGeneration`, is the book's `Transformer`, post-LN as in 2017, with
BART's differences, each a line here:

- **One token table** for the encoder's input, the decoder's input and the output layer (tied).
- **Learned positions**, with two unused rows first (position p reads row p + 2, as fairseq's
  checkpoints were laid out), and **a LayerNorm on the embeddings** (word + position) of each side.
- **Exact GELU** in the feed-forward blocks; embeddings not scaled by sqrt(d_model) (an option).
- **A fixed bias on the logits** (final_logits_bias): zero in BART's checkpoints, a buffer that
  Hugging Face never trains; ours is the output layer's bias, loaded and saved, and frozen.

Weights move to and from `transformers`' BartForConditionalGeneration in `transformer_lib.hf`.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import TransformerConfig, resolve_config
from .layers import LayerNorm
from .models import Transformer

__all__ = [
    "infilling_spans",
    "apply_spans",
    "text_infilling",
    "sentence_permutation",
    "token_deletion",
    "denoising_pairs",
    "strip_marks",
    "gap_source",
    "read_fill",
    "written",
    "bart_config",
    "BartPositions",
    "BartForConditionalGeneration",
]


def _check_line(tokens: torch.Tensor) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.dtype not in (torch.long, torch.int):
        got = (
            f"{type(tokens).__name__}"
            if not isinstance(tokens, torch.Tensor)
            else f"{tokens.dtype} {tuple(tokens.shape)}"
        )
        raise ValueError(f"tokens must be one line of integer ids, shape (S,), got {got}")


def _check_id(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int (a token id), got {value!r}")


def infilling_spans(
    length: int, ratio: float = 0.3, poisson_lambda: float = 3.0, generator: torch.Generator | None = None
) -> list[tuple[int, int]]:
    """The spans text infilling replaces in a line of `length` tokens: [(start, span length), ...] in order.

    round(ratio * length) tokens are covered. Span lengths are drawn from Poisson(poisson_lambda)
    until they cover that many; the last one is cut to fit. Spans of length 0 stay: each is a mask
    inserted between two tokens. The spans go to distinct gaps between the tokens left unmasked,
    every choice of gaps equally likely, so no two spans touch and each becomes exactly one mask. When
    there are more spans than gaps (a short line, a high ratio), the extra spans join drawn ones.
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be a non-negative int, got {length!r}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio must be in [0, 1): the share of tokens to mask, got {ratio!r}")
    if not poisson_lambda > 0:
        raise ValueError(f"poisson_lambda must be positive (BART uses 3), got {poisson_lambda!r}")
    to_mask = round(ratio * length)
    lengths: list[int] = []
    rate = torch.tensor([float(poisson_lambda)])
    while sum(lengths) < to_mask:
        lengths.append(int(torch.poisson(rate, generator=generator).item()))
    if lengths:
        lengths[-1] -= sum(lengths) - to_mask  # the last span cut so that exactly to_mask tokens are covered
    gaps = length - to_mask + 1  # the places between (and around) the tokens that stay
    if len(lengths) > gaps:  # more spans than places: the extra ones merge into spans already placed
        extra = lengths[gaps:]
        lengths = lengths[:gaps]
        owners = torch.randint(gaps, (len(extra),), generator=generator).tolist()
        for owner, size in zip(owners, extra):
            lengths[owner] += size
    order = torch.randperm(len(lengths), generator=generator).tolist()  # which span goes to which chosen gap
    chosen = sorted(torch.randperm(gaps, generator=generator)[: len(lengths)].tolist())
    spans, start, kept_before = [], 0, 0
    for gap, which in zip(chosen, order):
        start += gap - kept_before  # the unmasked tokens between the previous span and this gap
        kept_before = gap
        spans.append((start, lengths[which]))
        start += lengths[which]
    return spans


def apply_spans(tokens: torch.Tensor, spans: list[tuple[int, int]], mask_id: int) -> torch.Tensor:
    """tokens (S,) -> (S',): each (start, length) span replaced by one mask_id (length 0: a mask inserted)."""
    _check_line(tokens)
    _check_id(mask_id, "mask_id")
    pieces, at = [], 0
    mask = tokens.new_tensor([mask_id])
    for start, size in spans:
        touching = bool(pieces) and start <= at  # two spans side by side would be one span with two masks
        if start < at or touching or size < 0 or start + size > tokens.numel():
            raise ValueError(f"spans must be in order, apart and inside the line of {tokens.numel()}, got {spans}")
        pieces += [tokens[at:start], mask]
        at = start + size
    pieces.append(tokens[at:])
    return torch.cat(pieces)  # (S - covered + number of spans,)


def text_infilling(
    tokens: torch.Tensor,
    mask_id: int,
    ratio: float = 0.3,
    poisson_lambda: float = 3.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """BART's text infilling: tokens (S,) -> (S',), spans covering round(ratio * S) tokens each one mask_id.

    The spans are `infilling_spans`'s. The target for the model is the untouched line.
    """
    _check_line(tokens)
    return apply_spans(tokens, infilling_spans(tokens.numel(), ratio, poisson_lambda, generator), mask_id)


def sentence_permutation(
    tokens: torch.Tensor, end_ids: tuple[int, ...] | list[int], generator: torch.Generator | None = None
) -> torch.Tensor:
    """tokens (S,) -> (S,): the line's sentences shuffled, every order equally likely.

    A sentence ends after any id in end_ids (full stop, question and exclamation marks); words after
    the last end form a sentence of their own. Each sentence keeps its words in order.
    """
    _check_line(tokens)
    if not end_ids:
        raise ValueError("end_ids must name at least one id that ends a sentence")
    for i in end_ids:
        _check_id(i, "each of end_ids")
    ends = torch.isin(tokens, tokens.new_tensor(list(end_ids))).nonzero().flatten() + 1  # (n,): one past each end
    bounds = [0, *[e for e in ends.tolist() if e < tokens.numel()], tokens.numel()]
    sentences = [tokens[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    if len(sentences) < 2:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order])  # (S,)


def token_deletion(tokens: torch.Tensor, rate: float = 0.1, generator: torch.Generator | None = None) -> torch.Tensor:
    """tokens (S,) -> (S',): each token dropped alone with probability `rate`; the rest keep their order."""
    _check_line(tokens)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"rate must be in [0, 1): the probability of dropping each token, got {rate!r}")
    keep = torch.rand(tokens.shape, generator=generator) >= rate  # (S,)
    return tokens[keep]


def denoising_pairs(
    lines: list[torch.Tensor],
    *,
    mask_id: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    end_ids: tuple[int, ...] | list[int] = (),
    ratio: float = 0.3,
    poisson_lambda: float = 3.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lines of ids -> a batch for BART's pre-training: (src (N, S), tgt (N, T)), padded with pad_id.

    src: the line's sentences shuffled (when end_ids names the marks that end one), then text
    infilling, then eos_id. tgt: bos_id, the untouched line, eos_id; the model reads tgt[:, :-1]
    and is scored on tgt[:, 1:], so it writes the whole line back, the words it could see included.
    (fairseq's BART puts <s> before the source too and starts the decoder with </s>: the same idea with
    other markers, which matters only for a checkpoint trained with them.)
    """
    if not lines:
        raise ValueError("lines must hold at least one line")
    for name, value in (("mask_id", mask_id), ("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _check_id(value, name)
    sources, targets = [], []
    for line in lines:
        _check_line(line)
        if bool(torch.isin(line, line.new_tensor([mask_id, bos_id, eos_id, pad_id])).any()):
            raise ValueError("a line may not hold mask_id, bos_id, eos_id or pad_id: they would be read as markers")
        shuffled = sentence_permutation(line, end_ids, generator) if end_ids else line
        sources.append(
            torch.cat([text_infilling(shuffled, mask_id, ratio, poisson_lambda, generator), line.new_tensor([eos_id])])
        )
        targets.append(torch.cat([line.new_tensor([bos_id]), line, line.new_tensor([eos_id])]))
    pad = torch.nn.utils.rnn.pad_sequence
    return pad(sources, batch_first=True, padding_value=pad_id), pad(targets, batch_first=True, padding_value=pad_id)


# ---- what the chapter asks of a trained BART ------------------------------------------------------


def strip_marks(line: torch.Tensor, marks: tuple[int, ...] | list[int]) -> torch.Tensor:
    """line (S,) -> (S',): the line without the ids in `marks` (its punctuation), the rest in order."""
    _check_line(line)
    return line[~torch.isin(line, line.new_tensor(list(marks)))]


def gap_source(line: torch.Tensor, start: int, length: int, *, mask_id: int, eos_id: int) -> torch.Tensor:
    """line (S,) -> (S - length + 2,): tokens start .. start + length - 1 replaced by ONE mask, then eos_id.

    The source of a gap of unknown length: nothing in it says how many tokens the mask hides.
    """
    _check_line(line)
    for name, value in (("mask_id", mask_id), ("eos_id", eos_id), ("start", start), ("length", length)):
        _check_id(value, name)
    if start + length > len(line):
        raise ValueError(f"a gap of {length} from {start} does not fit a line of {len(line)} tokens")
    return torch.cat([line[:start], line.new_tensor([mask_id]), line[start + length :], line.new_tensor([eos_id])])


def read_fill(written_ids: list[int], line: list[int], start: int, length: int, anchor: int = 2) -> list[int] | None:
    """What a model wrote where the gap was: the tokens between the line's beginning, written back unchanged, and the
    first `anchor` tokens that followed the gap (fewer at the line's end; none: the rest of what it wrote).

    written_ids: the model's whole line (no bos or eos); line: the original. The fill may be shorter or longer than
    `length`; what the model wrote after those anchor tokens does not count. None when it changed the beginning, or
    when the anchor tokens never come.
    """
    if written_ids[:start] != line[:start]:
        return None
    after = line[start + length : start + length + anchor]
    if not after:
        return written_ids[start:]
    for end in range(start, len(written_ids) - len(after) + 1):
        if written_ids[end : end + len(after)] == after:
            return written_ids[start:end]
    return None


@torch.inference_mode()
def written(model: nn.Module, src: torch.Tensor, *, bos_id: int, eos_id: int, max_new_tokens: int) -> list[list[int]]:
    """What the model writes for each source row, greedily through the KV cache: src (B, S) -> B lists of ids,
    without bos, eos or what follows eos (a row that never wrote eos is cut at max_new_tokens)."""
    was_training = model.training
    model.eval()
    rows = model.greedy_decode(src, bos_id=bos_id, eos_id=eos_id, max_new_tokens=max_new_tokens)  # (B, 1 + n)
    model.train(was_training)
    out = []
    for ids in rows[:, 1:].tolist():
        out.append(ids[: ids.index(eos_id)] if eos_id in ids else ids)
    return out


# ---- the model -----------------------------------------------------------------------------------


def bart_config(**fields) -> TransformerConfig:
    """BART base in our config: 768 wide, 6 + 6 post-LN layers of 12 heads, exact GELU, one tied table, pad id 1.

    positional="learned" names what `BartPositions` adds; its table has max_len + 2 rows.
    """
    base = dict(vocab_size=50265, d_model=768, num_heads=12, num_layers=6, d_ff=3072, max_len=1024, dropout=0.1)
    base |= dict(pad_id=1, norm_first=False, scale_embedding=False, activation="gelu", positional="learned")
    return TransformerConfig(**(base | dict(tie_embeddings=True) | fields))


class BartPositions(nn.Module):
    """Learned positions, then the LayerNorm of the embeddings: x (B, S, d) -> (B, S, d); positions from `offset`.

    Position p reads row p + 2 of a table of max_len + 2 rows (rows 0 and 1 are never read).
    """

    OFFSET = 2

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0, eps: float = 1e-5):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len + self.OFFSET, d_model)
        self.norm = LayerNorm(d_model, eps)  # BART's: nn.LayerNorm's default, 1e-5
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, S, d) -> (B, S, d)."""
        S = x.shape[1]
        if offset + S > self.max_len:
            raise ValueError(f"positions {offset} to {offset + S - 1} do not fit max_len = {self.max_len}")
        rows = torch.arange(offset, offset + S, device=x.device) + self.OFFSET  # (S,)
        return self.dropout(self.norm(x + self.table(rows)))


class BartForConditionalGeneration(Transformer):
    """BART: src (B, S), tgt (B, T) -> logits (B, T, V), the book's Transformer with BART's differences.

    Everything else is the Transformer's: encode, decode, greedy_decode and beam_search (with the
    caches: the positions continue from the cached ones through `BartPositions`' offset).
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        cfg = resolve_config(config if config is not None else bart_config(), overrides)
        if cfg.tgt_vocab_size != cfg.vocab_size or not cfg.tie_embeddings or cfg.norm_first or cfg.final_norm:
            raise ValueError(
                "BART has one table for both sides and the output (tgt_vocab_size = vocab_size, tie_embeddings=True) "
                f"and post-LN layers without a final norm (norm_first=False, final_norm=False); got tgt_vocab_size="
                f"{cfg.tgt_vocab_size}, vocab_size={cfg.vocab_size}, tie_embeddings={cfg.tie_embeddings}, "
                f"norm_first={cfg.norm_first}, final_norm={cfg.final_norm}"
            )
        if cfg.positional != "learned":
            raise ValueError(
                f"BART adds learned positions (BartPositions): positional must be 'learned', got {cfg.positional!r}"
            )
        super().__init__(cfg)
        self.src_pos = BartPositions(cfg.d_model, cfg.max_len, cfg.dropout, cfg.eps)
        self.tgt_pos = BartPositions(cfg.d_model, cfg.max_len, cfg.dropout, cfg.eps)
        self.tgt_embed = self.src_embed  # one table: the decoder reads the encoder's
        self.head.weight = self.src_embed.table.weight  # and the output layer is the same table
        with torch.no_grad():
            self.head.bias.zero_()  # final_logits_bias: zero unless loaded, and never trained (as BART's)
        self.head.bias.requires_grad_(False)
