"""Checkers for the exercises of the decoder chapter."""

from __future__ import annotations

import contextlib
import math

import torch

from ..masks import causal_mask
from ._common import CORRECT, Wrong, checker, measure, no, run
from ._match import _shape

__all__ = ["check_sample", "check_windows", "check_kv_cache_bytes", "check_future_leak"]


def _again(fn, *args, case: str):
    """fn(*args) once more, a second look after a first answer: None where it gives no answer."""
    with contextlib.suppress(Wrong):
        return run(fn, *args, case=case)
    return None


def _rows(seed: int, R: int, V: int, repeat: int) -> torch.Tensor:
    """R random logit rows of width V, each repeated `repeat` times: (R * repeat, V)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(R, V, generator=g) * 1.5).repeat_interleave(repeat, 0)


def _frequencies(picks: torch.Tensor, R: int, V: int, repeat: int) -> torch.Tensor:
    """(R, V): how often each token was picked in each group of identical rows."""
    counts = [torch.bincount(picks[r * repeat : (r + 1) * repeat], minlength=V)[:V] for r in range(R)]
    return torch.stack(counts).double() / repeat


def _top_k_probs(logits: torch.Tensor, temperature: float, k: int | None) -> torch.Tensor:
    scaled = logits.double() / temperature
    if k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(k, -1).values[:, -1:], float("-inf"))
    return scaled.softmax(-1)


# what a draw that follows the wrong probabilities did, by id ({k}: top_k)
_SAMPLE_HINTS = {
    "temperature-ignored": "The temperature is ignored: divide the logits by it before the softmax.",
    "temperature-multiplied": "Divide the logits by the temperature; you multiplied them.",
    "top-k-ignored": "top_k={k} is ignored: keep only the top_k best logits.",
    "uniform": "Every token is equally likely in your draws: sample from softmax(logits / temperature).",
}


@checker
def check_sample(fn) -> str:
    """fn(logits (B, V), temperature, top_k, rng) must return (B, 1) ids: greedy, tempered, top-k.

    The checker tries random logits of several widths: argmax at temperature 0; then thousands of
    draws whose frequencies must match softmax(logits / T) restricted to the top_k (and none outside
    it); and the same rng seed must give the same draws.
    """
    g = torch.Generator().manual_seed(9)
    for B, V in ((7, 9), (3, 5)):
        logits = torch.randn(B, V, generator=g) * 2
        case = f"logits of shape ({B}, {V}) at temperature 0"
        got = run(fn, logits.clone(), 0.0, None, torch.Generator().manual_seed(1), case=case)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (B,):
            return no(
                "keepdim", f"On {case} expected shape (B, 1) = ({B}, 1), got ({B},): keep the last axis (keepdim=True)."
            )
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (B, 1):
            return no("shape", f"On {case} expected shape (B, 1) = ({B}, 1), got {_shape(got)}.")
        if torch.equal(got.flatten(), logits.argmin(-1)):
            return no("argmin", "With temperature 0 take the argmax, the likeliest token, not the argmin.")
        if not torch.equal(got.flatten(), logits.argmax(-1)):
            return no("not-greedy", f"On {case}: with temperature 0, return the argmax of each row (no sampling).")
    settings = ((2, 2, 6, 1.0, 2), (1, 3, 8, 0.7, 3), (3, 2, 11, 1.8, None), (4, 2, 7, 0.5, None), (5, 2, 10, 1.3, 5))
    repeat = 3000
    always_argmax = "you always picked the argmax: sample from the softmax when temperature > 0."
    for seed, R, V, t, k in settings:
        logits = _rows(seed, R, V, repeat)
        case = f"{R * repeat} rows of {V} logits at temperature {t} with top_k={k}"
        got = run(fn, logits.clone(), t, k, torch.Generator().manual_seed(seed), case=case)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (R * repeat, 1):
            return no("shape", f"On {case} expected shape ({R * repeat}, 1), got {_shape(got)}.")
        picks = got.flatten().long()
        if picks.min() < 0 or picks.max() >= V:
            return no("not-ids", f"On {case} you returned ids outside 0..{V - 1}: return token ids, not probabilities.")
        rows = logits[::repeat]
        freq, want = _frequencies(picks, R, V, repeat), _top_k_probs(rows, t, k)
        outside = k is not None and bool((freq[want == 0] > 0).any())
        if (freq - want).abs().max() <= 0.04 and not outside:
            again = _again(fn, logits.clone(), t, k, torch.Generator().manual_seed(seed), case=case)
            if isinstance(again, torch.Tensor) and not torch.equal(again, got):
                return no(
                    "seed-ignored",
                    "The same rng seed gave different draws: pass `rng` to torch.multinomial (generator=rng).",
                )
            continue
        if outside:
            if int((freq > 0).sum(-1).max()) > k and (freq - _top_k_probs(rows, t, None)).abs().max() <= 0.04:
                return no(
                    "top-k-ignored",
                    f"top_k={k} is ignored on {case}: only the {k} likeliest tokens may ever be picked.",
                )
            return no(
                "outside-top-k", f"On {case} you picked tokens outside the top {k}: keep only the top_k best logits."
            )
        if k is not None and int((freq > 0).sum(-1).max()) == k - 1:
            if k == 2:  # one token picked: top_k - 1, or the argmax whatever the settings? Try without top_k
                probe = _rows(4, 2, 7, 500)
                again = _again(fn, probe.clone(), 1.0, None, torch.Generator().manual_seed(4), case=case)
                if isinstance(again, torch.Tensor) and torch.equal(again.flatten(), probe.argmax(-1)):
                    return no("always-argmax", f"On {case} {always_argmax}")
            return no(
                "top-k-minus-one",
                f"Only top_k - 1 = {k - 1} tokens are ever picked on {case}: keep the k-th best too (< kth, not <=).",
            )
        if (freq.argmax(-1) == rows.argmax(-1)).all() and (freq.max(-1).values > 0.99).all():
            return no("always-argmax", f"On {case} {always_argmax}")
        candidates = {
            "temperature-ignored": _top_k_probs(rows, 1.0, k),
            "temperature-multiplied": _top_k_probs(rows, 1 / t, k),
            "top-k-ignored": _top_k_probs(rows, t, None),
            "uniform": torch.full_like(want, 1 / V),
        }
        for mistake, probs in candidates.items():
            if not torch.allclose(probs, want, atol=0.06) and (freq - probs).abs().max() <= 0.04:
                return no(mistake, f"On {case}: {_SAMPLE_HINTS[mistake].format(k=k)}")
        return no(
            "other",
            f"On {case} the draws do not follow softmax(logits / temperature) over the top_k: the largest gap "
            f"between a token's share and its probability is {(freq - want).abs().max().item():.2f}.",
        )
    return CORRECT


_WINDOW_HINTS = {
    "swapped": "x and y are swapped: x is the window, y the same window shifted one token later.",
    "not-shifted": "y must be x shifted by one: the target at each position is the next token.",
    "wrong-way": "Shifted the wrong way: y[b, t] is the token after x[b, t], ids[starts[b] + t + 1].",
    "shifted-by-two": "Shifted by two: y[b, t] is the very next token, ids[starts[b] + t + 1].",
    "next-window": "y is the next window: it must overlap x, one token later, ids[starts[b] + t + 1].",
    "added-one": "y = x + 1 adds one to the ids: take the *next token* from ids, ids[starts[b] + t + 1].",
    "starts-late": "Off by one: x[b] starts at ids[starts[b]], not one later.",
    "starts-early": "Off by one: x[b] starts at ids[starts[b]], y one token later; yours start one earlier.",
}


@checker
def check_windows(fn) -> str:
    """fn(ids (N,), starts (B,), block_size) must return x, y (B, block_size) with y = x shifted by one.

    The ids are random (not arange), windows overlap, and a window may end at the last id.
    """
    g = torch.Generator().manual_seed(5)
    for N, starts, n in ((100, [1, 10, 90, 12], 8), (40, [0, 3, 5, 34], 5), (300, [250, 7], 49), (20, [18, 0, 2], 1)):
        ids = torch.randint(0, 50, (N,), generator=g)
        starts_t = torch.tensor(starts)
        case = f"{N} random ids, starts={starts}, block_size={n}"

        def window(shift: int, ids=ids, starts=starts_t, n=n) -> torch.Tensor:
            index = (starts[:, None] + torch.arange(n) + shift).clamp(0, len(ids) - 1)
            return ids[index]

        want_x, want_y = window(0), window(1)
        got = run(fn, ids.clone(), starts_t.clone(), n, case=case)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return no("not-a-pair", f"Return a pair x, y; on {case} your answer returned {_shape(got)}.")
        x, y = got
        shape = (len(starts), n)
        if not all(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in (x, y)):
            return no("shape", f"On {case} expected x and y of shape {shape}, got {_shape(x)} and {_shape(y)}.")
        if torch.equal(x, want_x) and torch.equal(y, want_y):
            continue
        mistakes = {  # what each mistake returns, (x, y)
            "swapped": (want_y, want_x),
            "not-shifted": (want_x, want_x),
            "wrong-way": (want_x, window(-1)),
            "shifted-by-two": (want_x, window(2)),
            "next-window": (want_x, window(n)),
            "added-one": (want_x, want_x + 1),
            "starts-late": (window(1), window(2)),
            "starts-early": (window(-1), want_x),
        }
        for mistake, (wrong_x, wrong_y) in mistakes.items():
            if torch.equal(x, wrong_x) and torch.equal(y, wrong_y):
                return no(mistake, _WINDOW_HINTS[mistake])
        if torch.equal(x, want_x):
            return no(
                "wrong-y", f"x is right but y is not on {case}: y[b] = ids[starts[b] + 1 : starts[b] + 1 + block_size]."
            )
        if torch.equal(x, window(0, starts=starts_t[:1].expand(len(starts)))):
            return no("first-start", "Every row uses starts[0]: row b starts at starts[b].")
        return no(
            "other", f"Not quite on {case}: x[b] = ids[starts[b] : starts[b] + block_size], y[b] one token later."
        )
    return CORRECT


# the size each classic mistake computes, by id
_KV_MISTAKES = {
    "no-values": lambda L, d, T, B, nb: L * d * T * B * nb,
    "numbers-not-bytes": lambda L, d, T, B, nb: 2 * L * d * T * B,
    "one-layer": lambda L, d, T, B, nb: 2 * d * T * B * nb,
    "one-sequence": lambda L, d, T, B, nb: 2 * L * d * T * nb,
    "one-token": lambda L, d, T, B, nb: 2 * L * d * B * nb,
    "bits": lambda L, d, T, B, nb: 16 * L * d * T * B * nb,
    "d_model-squared": lambda L, d, T, B, nb: 2 * L * d * d * T * B * nb,
    "factor-4": lambda L, d, T, B, nb: 4 * L * d * T * B * nb,
}
_KV_HINTS = {
    "no-values": "Half of it: the cache holds keys AND values for every layer (a factor 2).",
    "numbers-not-bytes": "That counts numbers, not bytes: multiply by bytes_per_value.",
    "one-layer": "That is one layer: every layer keeps its own keys and values, times num_layers.",
    "one-sequence": "That is one sequence: the cache holds every sequence of the batch, times batch.",
    "one-token": "That is one token: the cache grows with the context, times context.",
    "bits": "That is in bits: bytes_per_value already counts bytes, do not multiply by 8.",
    "d_model-squared": "Keys and values are d_model numbers per token, not d_model**2 (the weights are not cached).",
    "factor-4": "Twice too much: one key and one value per token and layer, a factor 2, not 4.",
}


@checker
def check_kv_cache_bytes(fn) -> str:
    """fn(num_layers, d_model, context, batch, bytes_per_value) must return the KV cache's size in bytes.

    With every head its own keys and values (no grouped-query sharing), each layer stores a key and a
    value vector of d_model numbers per token of each sequence.
    """
    cases = ((2, 64, 128, 8, 4), (24, 1024, 2048, 1, 2), (12, 768, 1024, 2, 2), (3, 40, 7, 5, 1), (6, 96, 33, 3, 8))
    names = "num_layers={}, d_model={}, context={}, batch={}, bytes_per_value={}"
    values = [measure("the number of bytes", run(fn, *c, case=names.format(*c)))[0] for c in cases]
    right = [2 * math.prod(c) for c in cases]  # a key and a value: 2 * num_layers * d_model * ... * bytes_per_value
    wrong = [(c, v, w) for c, v, w in zip(cases, values, right) if not math.isclose(v, w, rel_tol=1e-9)]
    if not wrong:
        return CORRECT
    for mistake, size in _KV_MISTAKES.items():
        if all(math.isclose(v, size(*c), rel_tol=1e-9) for c, v in zip(cases, values)):
            return no(mistake, _KV_HINTS[mistake])
    c, value, want = wrong[0]
    return no("other", f"For {names.format(*c)} expected {want:,} bytes, got {value:,}.")


def _lm(seed: int, vocab: int, d_model: int, heads: int, layers: int):
    from ..models import DecoderOnlyLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return DecoderOnlyLM(
            vocab_size=vocab, d_model=d_model, num_heads=heads, num_layers=layers, d_ff=2 * d_model, dropout=0.0
        ).eval()


def _logits(lm, tokens: torch.Tensor, causal: bool) -> torch.Tensor:
    mask = causal_mask(tokens.shape[1]) if causal else None
    with torch.no_grad():
        return lm.head(lm.decoder(lm.pos(lm.embed(tokens)), tgt_mask=mask))


def _leak_case(setting: tuple) -> tuple:
    """(model, tokens (1, T), the new token, logits before and after the change by causal flag) of one setting."""
    seed, vocab, d, h, n_layers, T, position = setting
    lm = _lm(seed, vocab, d, h, n_layers)
    tokens = torch.randint(1, vocab, (1, T), generator=torch.Generator().manual_seed(100 + seed))
    new = int(tokens[0, position]) % (vocab - 1) + 1
    changed = tokens.clone()
    changed[0, position] = new
    before = {c: _logits(lm, tokens, c) for c in (True, False)}
    after = {c: _logits(lm, changed, c) for c in (True, False)}
    return lm, tokens, new, before, after


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5)


def _same_elsewhere(fn, setting: tuple, causal: bool, value: float, first_want: float) -> bool:
    """fn returns `value` again on another setting, whose largest change differs from the first's: it measures
    nothing. (With the causal mask every setting's change is 0, and a constant cannot be told apart.)"""
    lm, tokens, new, before, after = _leak_case(setting)
    position = setting[-1]
    if _near((after[causal] - before[causal]).abs()[:, :position].max().item(), first_want):
        return False
    with contextlib.suppress(Wrong):
        return measure("", run(fn, lm, tokens.clone(), position, new, causal, case="another setting"))[0] == value
    return False


_LEAK_HINTS = {
    "changed-position": "You compared the changed position (or the ones after it) too: compare only the positions "
    "before the token you change, 0 .. position - 1.",
    "nothing-moved": "Nothing moved: with causal=False run the decoder with tgt_mask=None, and put new_token at "
    "`position` before the second run.",
    "causal-flag": "The causal flag is the wrong way round or ignored: with causal=True pass "
    "tgt_mask=causal_mask(T), with causal=False run the decoder with tgt_mask=None.",
    "mean": "That is the mean change: return the largest, .abs().max().",
    "no-abs": "Take the absolute value before the max.",
}


@checker
def check_future_leak(fn) -> str:
    """Experiment: fn(model, tokens, position, new_token, causal) measures the leak from a later token.

    The learner's code puts new_token at `position` of tokens (1, T), runs the model's parts with
    tgt_mask=causal_mask(T) or None, and returns the largest change of the logits at the positions
    before `position`. The checker runs it on models, tokens and positions of its own and compares
    with its own measurement: with the mask nothing moves, without it the earlier positions do.
    """
    settings = ((0, 10, 16, 2, 1, 8, 5), (1, 13, 24, 3, 2, 11, 3), (2, 7, 12, 4, 1, 9, 8), (3, 20, 16, 2, 2, 6, 1))
    for index, (_, vocab, d, h, n_layers, T, position) in enumerate(settings):
        lm, tokens, new, before, after = _leak_case(settings[index])
        for causal in (True, False):
            case = (
                f"a model with vocab {vocab}, d_model {d}, {h} heads, {n_layers} layer(s), {T} tokens, "
                f"token {position} changed, causal={causal}"
            )
            value = measure("the largest change", run(fn, lm, tokens.clone(), position, new, causal, case=case))[0]
            diff = (after[causal] - before[causal]).abs()
            want = diff[:, :position].max().item()
            if _near(value, want):
                continue
            mistakes = {  # what each mistake measures
                "changed-position": max(diff[:, position:].max().item(), diff[:, : position + 1].max().item()),
                "nothing-moved": 0.0,
                "causal-flag": (after[not causal] - before[not causal]).abs()[:, :position].max().item(),
                "mean": diff[:, :position].mean().item(),
                "no-abs": (after[causal] - before[causal])[:, :position].max().item(),
            }
            for mistake, wrong in mistakes.items():
                if not _near(wrong, want) and _near(value, wrong):
                    return no(mistake, f"On {case}: {_LEAK_HINTS[mistake]}")
            if _same_elsewhere(fn, settings[(index + 1) % len(settings)], causal, value, want):
                return no(
                    "not-measured",
                    f"On {case} expected a largest change of {want:.4g}, got {value:.4g}, and the same number again "
                    "on another model and other tokens. The checker runs your measurement on models and tokens of "
                    "its own, so it must measure, not return a number.",
                )
            if causal:
                return no(
                    "moved-under-mask",
                    f"On {case}: with the causal mask the earlier positions should not move, got {value:.2e}. "
                    "Compare only positions before the token you change, in eval mode.",
                )
            return no(
                "other",
                f"On {case} expected a largest change of {want:.4g}, got {value:.4g}. Run the model's parts twice "
                "(tgt_mask=None when causal is False), the second time with new_token at `position`, and return "
                "the largest absolute change of the logits before `position`. The checker uses models and tokens "
                "of its own: a number typed in from the chapter cannot match.",
            )
    return CORRECT
