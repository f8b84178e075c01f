"""Every decoding rule in one place: sampling (temperature, top-k, top-p), generation, greedy and beam search.

The functions take the model as their first argument; `DecoderOnlyLM.generate`,
`Transformer.greedy_decode` and `Transformer.beam_search` call them. This module sits below models.py
and never imports it: a model is anything with the methods a rule calls (a decoder-only model is called
on tokens and has `new_cache` and `config`; an encoder-decoder has `encode`, `decode`, `make_src_mask`,
`new_cache`, `new_cross_cache` and `pad_id`; either may have `plain_step`, its cached step without module
dispatch).

    out = generate(lm, prompt, max_new_tokens=50, temperature=0.8, top_k=20)  # decoder-only
    out = greedy_decode(model, src, bos_id, eos_id, max_new_tokens=10)  # encoder-decoder
    ids, logp = beam_search(model, src, bos_id, eos_id, max_new_tokens=10, beam_size=4)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from .embedding import check_token_batch, check_token_ids
from .masks import causal_mask

# What each rule takes, by name (models.py defines the classes; importing them here would be a cycle)
_LanguageModel = torch.nn.Module  # a DecoderOnlyLM: tokens (B, T) -> logits (B, T, V)
_EncoderDecoder = torch.nn.Module  # a Transformer: encode(src), decode(tgt, memory, ...)

__all__ = ["nucleus", "generate", "greedy_decode", "beam_search", "beam_candidates"]

_F = TypeVar("_F", bound=Callable)


def _inference(fn: _F) -> _F:
    """Run a decoding loop under torch.inference_mode and hand back ordinary tensors.

    inference_mode skips the autograd bookkeeping that no_grad still does on every op, which is most
    of a cached step's cost at batch 1. Its tensors cannot enter autograd later, so the results are
    cloned outside it: ids a caller feeds back into a training step behave as any other tensor.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.inference_mode():
            out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in out)
        return out.clone() if isinstance(out, torch.Tensor) else out  # plain numbers and lists need nothing

    return wrapper  # type: ignore[return-value]


# ---- sampling one token -------------------------------------------------------------------------


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


# ---- decoder-only: generate ---------------------------------------------------------------------


@_inference
def generate(
    model: _LanguageModel,
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
    torch.Generator on the model's device, for samples that repeat. Every generated id, the padding
    id included, is context for the next step: the decoder-only model masks no token as padding.
    Where the model offers it (`DecoderOnlyLM.plain_step`), each cached step after the prompt runs as
    plain functions over the weights: the same numbers, without nn.Module's dispatch.
    """
    check_token_batch(prompt, "prompt")
    check_token_ids(prompt, model.config.vocab_size, "prompt")
    _check_sampling(temperature, top_k, top_p)
    total = prompt.shape[1] + max_new_tokens
    if total > model.config.max_len:
        raise ValueError(
            f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} = {total} "
            f"exceeds max_len={model.config.max_len}"
        )
    out = prompt
    caches = model.new_cache(capacity=total) if use_cache else None
    logits = _prefill(model, prompt, caches) if use_cache else None  # (B, V): the prompt's last position
    plain_step = getattr(model, "plain_step", None) if use_cache and max_new_tokens > 1 else None
    plain = plain_step(caches) if plain_step is not None else None  # DecoderOnlyLM.plain_step, where exact
    for step in range(max_new_tokens):
        if step and plain is not None:  # the same numbers without module dispatch
            logits = plain(out[:, -1:], caches[0].length)  # (B, V)
        elif step or not use_cache:  # the ids were checked once, above: no wait for the device at each step
            logits = model(out[:, -1:] if use_cache else out, caches, checked=True)[:, -1]  # (B, V)
        next_id = _sample_next(logits, temperature, top_k, rng, top_p)  # (B, 1)
        out = torch.cat([out, next_id], dim=1)  # (B, t + 1)
    return out


def _prefill(model: _LanguageModel, prompt: torch.Tensor, caches: list) -> torch.Tensor:
    """Run the prompt (B, T0) into the empty `caches`; return the logits at its last position (B, V).

    Rows that repeat a prompt (several samples of one request, as pass@k and GRPO draw them) are run once, and
    their keys and values copied to every row that asked for them: each row's numbers are computed alone
    either way, so the samples are the same, for a fraction of the work. A model in training mode runs every row
    (its dropout would draw other masks for one run than for several)."""
    unique, inverse = torch.unique(prompt, dim=0, return_inverse=True)  # (U, T0), (B,)
    if unique.shape[0] == prompt.shape[0] or model.training:
        return model(prompt, caches, checked=True)[:, -1]
    once = model.new_cache()  # (U, h, T0, d_k) per layer, no capacity: copied below
    logits = model(unique, once, checked=True)[:, -1]  # (U, V)
    for cache, run in zip(caches, once):
        cache.update(run.key[inverse], run.value[inverse])  # (B, h, T0, d_k)
    return logits[inverse]  # (B, V)


def _check_bos(model: _EncoderDecoder, bos_id: int) -> None:
    """BOS, the first input of the decoder, must be an id of the target vocabulary: checked once, before the loop.

    (An eos_id outside the vocabulary is allowed: it never comes, and decoding runs max_new_tokens.)
    """
    vocab = model.config.tgt_vocab_size
    if isinstance(bos_id, bool) or not hasattr(bos_id, "__index__") or not 0 <= int(bos_id) < vocab:
        raise ValueError(f"bos_id must be an int in [0, {vocab - 1}] (the target vocabulary), got {bos_id!r}")


# ---- encoder-decoder: greedy decoding -----------------------------------------------------------


@_inference
def greedy_decode(
    model: _EncoderDecoder, src: torch.Tensor, bos_id: int, eos_id: int, max_new_tokens: int, use_cache: bool = True
) -> torch.Tensor:
    """src (B, S) -> (B, 1 + n) ids starting with BOS; each row stops growing after EOS (then padding).

    The encoder runs once. With use_cache, each step feeds only the newest token: the decoder's
    self-attention reads earlier keys and values from a KVCache, and its cross-attention projects
    the memory's keys and values once, at the first step. The tokens are the same either way.
    Where the model offers it (`Transformer.plain_step`), the cached loop runs each step as plain
    functions over the weights: the same numbers, without nn.Module's dispatch, which at batch 1
    costs more than the arithmetic. A hook or training mode turns that off (the modules then run).

    The model may emit any id, the padding id included: a generated token is context like any other,
    never masked as padding. A row is finished because the loop recorded its EOS (`done`), and only
    the positions after it are filled with pad_id.
    """
    check_token_batch(src, "src")
    _check_bos(model, bos_id)
    src_mask = model.make_src_mask(src)
    memory = model.encode(src, src_mask)  # (B, S, d_model), computed once
    if bool(src_mask.all()):  # no padding in any source: cross-attention may see every key, so no mask
        src_mask = None
    B = src.shape[0]
    out = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    capacity = max(max_new_tokens, 1)  # the last token is not fed
    plain_step = getattr(model, "plain_step", None)
    step = plain_step(memory, src_mask, capacity) if use_cache and plain_step is not None else None
    caches = model.new_cache(capacity=capacity) if use_cache and step is None else None
    cross_caches = model.new_cross_cache() if use_cache and step is None else None
    for t in range(max_new_tokens):
        if step is not None:  # both caches, the same numbers without module dispatch (Transformer.plain_step)
            logits = step(out[:, -1:], t)  # (B, V)
        else:
            step_input = out[:, -1:] if use_cache else out  # (B, 1) or (B, t)
            # causal only, as with the cache: a generated pad_id is a token, not padding to hide
            tgt_mask = None if use_cache else causal_mask(out.shape[1], device=out.device)  # (t, t)
            # checked=True: BOS was checked once, above, and every later id is the model's own choice
            logits = model.decode(step_input, memory, src_mask, tgt_mask, caches, cross_caches, checked=True)
            logits = logits[:, -1]  # (B, t, V) -> (B, V)
        next_id = logits.argmax(dim=-1)  # (B,)
        next_id = next_id.masked_fill(done, model.pad_id)
        out = torch.cat([out, next_id[:, None]], dim=1)  # (B, t + 1)
        done |= next_id == eos_id
        if bool(done.all()):
            break
    return out


# ---- encoder-decoder: beam search ---------------------------------------------------------------

# A hypothesis still growing is (ids (t,), log-probability, row of the batch it belongs to); a finished
# one is (rank, ids (t,), log-probability), ranked by `_rank`.
_Alive = tuple[torch.Tensor, float, int]
_Finished = tuple[float, torch.Tensor, float]


@_inference
def beam_search(
    model: _EncoderDecoder,
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
    gives greedy decoding. A hypothesis ends only by emitting EOS: a generated padding id is an
    ordinary token, read as context and never masked.
    """
    return _best_per_row(_search(model, src, bos_id, eos_id, max_new_tokens, beam_size, length_penalty), model.pad_id)


@_inference
def beam_candidates(
    model: _EncoderDecoder,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
) -> list[tuple[list[int], float, float]]:
    """src (1, S) -> every hypothesis the search finished, best first: (ids with BOS first and EOS last,
    log-probability, rank = log-probability / generated tokens ** length_penalty).

    The same search as beam_search, whose answer is the first of them; at most 2 * beam_size - 1 (a row stops
    once it has beam_size). A search that finished none after max_new_tokens ranks what it still has alive
    (without EOS), as beam_search does.
    """
    check_token_batch(src, "src")
    if src.shape[0] != 1:
        raise ValueError(f"beam_candidates searches one source: src must be (1, S), got {tuple(src.shape)}")
    (row,) = _search(model, src, bos_id, eos_id, max_new_tokens, beam_size, length_penalty)
    ranked = sorted(range(len(row)), key=lambda i: -row[i][0])  # stable: ties keep the order they finished in
    return [(row[i][1].tolist(), row[i][2], row[i][0]) for i in ranked]


def _search(
    model: _EncoderDecoder,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    beam_size: int,
    length_penalty: float,
) -> list[list[_Finished]]:
    """The beam search itself: src (B, S) -> per row, the hypotheses it finished (rank, ids, log-probability)."""
    check_token_batch(src, "src")
    _check_bos(model, bos_id)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    src_mask = model.make_src_mask(src)  # (B, 1, 1, S)
    memory = model.encode(src, src_mask)  # (B, S, d_model), computed once
    B = src.shape[0]
    bos = torch.full((1,), bos_id, dtype=torch.long, device=src.device)  # (1,)
    alive: list[_Alive] = [(bos, 0.0, b) for b in range(B)]  # every row starts from BOS
    finished: list[list[_Finished]] = [[] for _ in range(B)]  # per row, the hypotheses that emitted EOS
    for _ in range(max_new_tokens):
        alive = _beam_step(model, memory, src_mask, alive, finished, beam_size, eos_id, length_penalty)
        if not alive:  # every row has found enough finished hypotheses, or has none left to grow
            break
    _finish_unfinished_rows(alive, finished, length_penalty)
    return finished


def _rank(logp: float, ids: torch.Tensor, length_penalty: float) -> float:
    """A hypothesis' log-probability divided by (generated tokens) ** length_penalty; ids (t,) start with BOS."""
    return logp / (ids.numel() - 1) ** length_penalty


def _beam_step(
    model: _EncoderDecoder,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    alive: list[_Alive],
    finished: list[list[_Finished]],
    beam_size: int,
    eos_id: int,
    length_penalty: float,
) -> list[_Alive]:
    """Grow every alive hypothesis by one token, all rows in one batch; return those still growing.

    memory (B, S, d_model), src_mask (B, 1, 1, S). Hypotheses that emit EOS go to `finished[row]`;
    a row stops searching once it has beam_size finished ones or none left alive.
    """
    beams = torch.stack([ids for ids, _, _ in alive])  # (N, t)
    rows = [b for _, _, b in alive]  # rows[i]: the batch row hypothesis i belongs to
    scores = torch.tensor([logp for _, logp, _ in alive], device=beams.device)  # (N,)
    tgt_mask = causal_mask(beams.shape[1], device=beams.device)  # (t, t): a generated pad_id is a token too
    logits = model.decode(beams, memory[rows], src_mask[rows], tgt_mask, checked=True)[:, -1]  # (N, V)
    candidates = logits.log_softmax(dim=-1) + scores[:, None]  # (N, V): log-probability of each extension
    still_alive: list[_Alive] = []
    for b in dict.fromkeys(rows):  # each searching row, in order
        mine = [i for i, r in enumerate(rows) if r == b]  # its hypotheses
        grown, done = _expand_row(candidates[mine], beams[mine], beam_size, eos_id, length_penalty)
        finished[b] += done
        if grown and len(finished[b]) < beam_size:  # the row searches on
            still_alive += [(ids, logp, b) for ids, logp in grown]
    return still_alive


def _expand_row(
    candidates: torch.Tensor, beams: torch.Tensor, beam_size: int, eos_id: int, length_penalty: float
) -> tuple[list[tuple[torch.Tensor, float]], list[_Finished]]:
    """One row's hypotheses beams (n, t) and their extensions' log-probabilities (n, V) -> the beam_size best.

    Returns them split in two: those still growing, as (ids (t + 1,), logp), and those that
    emitted EOS, as (rank, ids (t + 1,), logp).
    """
    V = candidates.shape[-1]
    flat = candidates.flatten()  # (n * V,)
    top = flat.topk(min(beam_size, flat.numel()))
    grown, done = [], []
    for logp, index in zip(top.values.tolist(), top.indices.tolist()):
        ids = torch.cat([beams[index // V], beams.new_tensor([index % V])])  # (t + 1,): hypothesis, then token
        if index % V == eos_id:
            done.append((_rank(logp, ids, length_penalty), ids, logp))
        else:
            grown.append((ids, logp))
    return grown, done


def _finish_unfinished_rows(alive: list[_Alive], finished: list[list[_Finished]], length_penalty: float) -> None:
    """After max_new_tokens, a row that finished nothing ranks the hypotheses it still has alive."""
    empty = {b for b, row in enumerate(finished) if not row}
    for ids, logp, b in alive:
        if b in empty:
            finished[b].append((_rank(logp, ids, length_penalty), ids, logp))


def _best_per_row(finished: list[list[_Finished]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best-ranked hypothesis of each row -> (ids (B, 1 + n) padded with pad_id, log-probabilities (B,))."""
    best = [max(row, key=lambda h: h[0]) for row in finished]  # (rank, ids, logp) per row; ties: the first
    device = best[0][1].device
    out = torch.full((len(best), max(ids.numel() for _, ids, _ in best)), pad_id, dtype=torch.long, device=device)
    for b, (_, ids, _) in enumerate(best):
        out[b, : ids.numel()] = ids
    return out, torch.tensor([logp for _, _, logp in best], device=device)  # (B, 1 + n), (B,)
