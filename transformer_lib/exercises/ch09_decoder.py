"""Checkers for the exercises of the decoder chapter."""

from __future__ import annotations

import contextlib
import math

import torch

from ..masks import causal_mask
from ._common import CORRECT, Verdict, Wrong, _seeded, checker, counting_calls, measure, no, not_skipped, run
from ._match import _shape

__all__ = ["check_sample", "check_windows", "check_kv_cache_bytes", "check_future_leak"]


def _rows(seed: int, R: int, V: int, repeat: int) -> torch.Tensor:
    """R random logit rows of width V, each repeated `repeat` times: (R * repeat, V)."""
    return (torch.randn(R, V, generator=_seeded(seed)) * 1.5).repeat_interleave(repeat, 0)


def _probs(logits: torch.Tensor, temperature: float, k: int | None) -> torch.Tensor:
    """softmax(logits / temperature) over each row's k best logits (all of them when k is None), in float64."""
    scaled = logits.double() / temperature
    if k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(k, -1).values[:, -1:], float("-inf"))
    return scaled.softmax(-1)


@checker
def check_sample(fn) -> str:
    """fn(logits (B, V), temperature, top_k, rng) must return (B, 1) ids: greedy, tempered, top-k."""
    g = _seeded(9)
    for B, V in ((7, 9), (3, 5)):
        logits = torch.randn(B, V, generator=g) * 2
        case = f"logits of shape ({B}, {V}) at temperature 0"
        got = run(fn, logits.clone(), 0.0, None, _seeded(1), case=case)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (B,):
            return no("keepdim", f"On {case} expected shape ({B}, 1), got ({B},): keep the last axis (keepdim=True).")
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (B, 1):
            return no("shape", f"On {case} expected shape ({B}, 1), got {_shape(got)}.")
        if torch.equal(got.flatten(), logits.argmin(-1)):
            return no("argmin", "With temperature 0 take the argmax, the likeliest token, not the argmin.")
        if not torch.equal(got.flatten(), logits.argmax(-1)):
            return no("not-greedy", f"On {case}: with temperature 0, return the argmax of each row (no sampling).")
    # thousands of copies of a few rows: each row's draws must follow softmax(logits / T) over its top_k
    settings = ((2, 2, 6, 1.0, 2), (1, 3, 8, 0.7, 3), (3, 2, 11, 1.8, None), (4, 2, 7, 0.5, None), (5, 2, 10, 1.3, 5))
    for seed, R, V, t, k in settings:
        verdict = _judge_draws(fn, _rows(seed, R, V, _REPEAT), seed, t, k, f"{R * _REPEAT} rows of {V} logits")
        if verdict is not None:
            return verdict
    # settings 2 and 4 again, every logit + 800: the same softmax, but exp(logits / T) overflows (float64 too)
    for seed, R, V, t, k in (settings[1], settings[3]):
        case = f"{R * _REPEAT} rows of {V} logits around {_SHIFT:g}"
        try:
            verdict = _judge_draws(fn, _rows(seed, R, V, _REPEAT) + _SHIFT, seed, t, k, case)
        except Wrong as wrong:
            verdict = wrong.verdict
        if verdict is not None:
            hint = f"the same logits {_SHIFT:g} lower passed, so exp overflowed: exp(x) is inf above about 88 in "
            hint += "float32 (709 in float64) and inf / inf is NaN. Take each row's max off the logits before exp, "
            hint += "which leaves the softmax as it is, or call .softmax(-1)"
            raised = f" ({verdict})" if verdict.mistake == "raised" else ""  # the error, when there was one
            return no("overflow", f"On {case} at temperature {t} with top_k={k}: {hint}.{raised}")
    return CORRECT


_REPEAT = 3000  # copies of each row in check_sample
_SHIFT = 800.0  # added to every logit of check_sample's last settings


def _judge_draws(fn, logits: torch.Tensor, seed: int, t: float, k: int | None, rows: str) -> Verdict | None:
    """None when fn's draws from `logits` (R * _REPEAT, V), each row repeated, follow softmax(logits / t) over the
    top k; else the verdict naming the mistake."""
    R, V, repeat = len(logits) // _REPEAT, logits.shape[1], _REPEAT
    always_argmax = "you always picked the argmax: sample from the softmax when temperature > 0."
    case = f"{rows} at temperature {t} with top_k={k}"
    got = run(fn, logits.clone(), t, k, _seeded(seed), case=case)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (R * repeat, 1):
        return no("shape", f"On {case} expected shape ({R * repeat}, 1), got {_shape(got)}.")
    picks = got.flatten().long()
    if picks.min() < 0 or picks.max() >= V:
        return no("not-ids", f"On {case} you returned ids outside 0..{V - 1}: return token ids, not probabilities.")
    rows = logits[::repeat]
    counts = [torch.bincount(picks[r * repeat : (r + 1) * repeat], minlength=V)[:V] for r in range(R)]
    freq, want = torch.stack(counts).double() / repeat, _probs(rows, t, k)  # (R, V): each token's share, its odds
    widest = int((freq > 0).sum(-1).max())  # the most tokens picked in one row
    outside = k is not None and bool((freq[want == 0] > 0).any())
    if (freq - want).abs().max() <= 0.04 and not outside:
        with contextlib.suppress(Wrong):  # a second look: a failure here is not this check's to name
            again = run(fn, logits.clone(), t, k, _seeded(seed), case=case)
            if isinstance(again, torch.Tensor) and not torch.equal(again, got):
                return no("seed-ignored", "Same rng seed, other draws: pass generator=rng to torch.multinomial.")
        return None
    if outside:
        if widest > k and (freq - _probs(rows, t, None)).abs().max() <= 0.04:
            return no("top-k-ignored", f"top_k={k} is ignored on {case}: pick only among the {k} likeliest tokens.")
        return no("outside-top-k", f"On {case} you picked tokens outside the top {k}: keep the top_k best logits.")
    if k is not None and widest == k - 1:
        if k == 2:  # one token picked: top_k - 1, or the argmax whatever the settings? Try without top_k
            probe = _rows(4, 2, 7, 500)
            with contextlib.suppress(Wrong):
                again = run(fn, probe.clone(), 1.0, None, _seeded(4), case=case)
                if isinstance(again, torch.Tensor) and torch.equal(again.flatten(), probe.argmax(-1)):
                    return no("always-argmax", f"On {case} {always_argmax}")
        return no("top-k-minus-one", f"On {case} only top_k - 1 = {k - 1} tokens get picked: keep the k-th best.")
    if (freq.argmax(-1) == rows.argmax(-1)).all() and (freq.max(-1).values > 0.99).all():
        return no("always-argmax", f"On {case} {always_argmax}")
    for mistake, probs, hint in (  # (id, the probabilities that mistake draws from, hint)
        ("temperature-ignored", _probs(rows, 1.0, k), "the temperature is ignored: divide the logits by it."),
        ("temperature-multiplied", _probs(rows, 1 / t, k), "divide the logits by the temperature; you multiplied."),
        ("top-k-ignored", _probs(rows, t, None), f"top_k={k} is ignored: keep only the top_k best logits."),
        ("uniform", torch.full_like(want, 1 / V), "all tokens equally likely: sample from softmax(logits / T)."),
    ):
        if not torch.allclose(probs, want, atol=0.06) and (freq - probs).abs().max() <= 0.04:
            return no(mistake, f"On {case}: {hint}")
    gap = (freq - want).abs().max().item()
    return no("other", f"On {case} the draws stray from softmax(logits / T) over the top_k: by up to {gap:.2f}.")
    return None


@checker
def check_windows(fn) -> str:
    """fn(ids (N,), starts (B,), block_size) must return x, y (B, block_size) with y = x shifted by one."""
    g = _seeded(5)  # random ids (not arange), overlapping windows, and one that ends at the last id
    for N, starts, n in ((100, [1, 10, 90, 12], 8), (40, [0, 3, 5, 34], 5), (300, [250, 7], 49), (20, [18, 0, 2], 1)):
        ids, starts_t = torch.randint(0, 50, (N,), generator=g), torch.tensor(starts)
        case = f"{N} random ids, starts={starts}, block_size={n}"

        def window(shift: int, ids=ids, starts=starts_t, n=n) -> torch.Tensor:  # (B, n)
            return ids[(starts[:, None] + torch.arange(n) + shift).clamp(0, len(ids) - 1)]

        got = run(fn, ids.clone(), starts_t.clone(), n, case=case)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return no("not-a-pair", f"Return a pair x, y; on {case} your answer returned {_shape(got)}.")
        x, y = got
        shape = (len(starts), n)
        if not all(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in (x, y)):
            return no("shape", f"On {case} expected x and y of shape {shape}, got {_shape(x)} and {_shape(y)}.")
        if torch.equal(x, window(0)) and torch.equal(y, window(1)):
            continue
        w = {shift: window(shift) for shift in (-1, 0, 1, 2, n)}  # the window that starts `shift` ids on
        for mistake, wrong_x, wrong_y, hint in (  # (id, the x and y that mistake returns, hint)
            ("swapped", w[1], w[0], "x and y are swapped: x is the window, y the same window one token later."),
            ("not-shifted", w[0], w[0], "y must be x shifted by one: the target at each position is the next token."),
            ("wrong-way", w[0], w[-1], "Shifted the wrong way: y[b, t] is the next id, ids[starts[b] + t + 1]."),
            ("shifted-by-two", w[0], w[2], "Shifted by two: y[b, t] is the very next token, ids[starts[b] + t + 1]."),
            ("next-window", w[0], w[n], "y is the next window: it overlaps x, one id later, ids[starts[b] + t + 1]."),
            ("added-one", w[0], w[0] + 1, "y = x + 1 adds one to the ids: take the next token from ids instead."),
            ("starts-late", w[1], w[2], "Off by one: x[b] starts at ids[starts[b]], not one later."),
            ("starts-early", w[-1], w[0], "Off by one: x[b] starts at ids[starts[b]], not one earlier."),
        ):
            if torch.equal(x, wrong_x) and torch.equal(y, wrong_y):
                return no(mistake, hint)
        if torch.equal(x, w[0]):
            return no("wrong-y", f"On {case} x is right, y is not: y[b] = ids[starts[b] + 1 : starts[b] + {n + 1}].")
        if torch.equal(x, window(0, starts=starts_t[:1].expand(len(starts)))):
            return no("first-start", "Every row uses starts[0]: row b starts at starts[b].")
        return no("other", f"Not quite on {case}: x[b] = ids[starts[b] : starts[b] + {n}], y[b] one token later.")
    return CORRECT


def _kv_mistakes(L: int, d: int, T: int, B: int, nb: int) -> dict[str, tuple[int, str]]:
    """The size each classic mistake computes for this input, and its hint, by id."""
    return {
        "no-values": (L * d * T * B * nb, "Half of it: the cache holds keys AND values for every layer (a factor 2)."),
        "numbers-not-bytes": (2 * L * d * T * B, "That counts numbers, not bytes: multiply by bytes_per_value."),
        "one-layer": (2 * d * T * B * nb, "One layer: every layer keeps its own keys and values, times num_layers."),
        "one-sequence": (2 * L * d * T * nb, "That is one sequence: the cache holds every sequence, times batch."),
        "one-token": (2 * L * d * B * nb, "That is one token: the cache grows with the context, times context."),
        "bits": (16 * L * d * T * B * nb, "In bits: bytes_per_value already counts bytes, do not multiply by 8."),
        "d_model-squared": (2 * L * d * d * T * B * nb, "A token's key is d_model numbers, not d_model**2."),
        "factor-4": (4 * L * d * T * B * nb, "Twice too much: one key and one value per token and layer, a factor 2."),
    }


@checker
def check_kv_cache_bytes(fn) -> str:
    """fn(num_layers, d_model, context, batch, bytes_per_value) must return the KV cache's size in bytes."""
    cases = ((2, 64, 128, 8, 4), (24, 1024, 2048, 1, 2), (12, 768, 1024, 2, 2), (3, 40, 7, 5, 1), (6, 96, 33, 3, 8))
    names = "num_layers={}, d_model={}, context={}, batch={}, bytes_per_value={}"
    values = [measure("the number of bytes", run(fn, *c, case=names.format(*c)))[0] for c in cases]
    right = [2 * math.prod(c) for c in cases]  # a key and a value of d_model numbers per token, layer and sequence
    wrong = [(c, v, w) for c, v, w in zip(cases, values, right) if not math.isclose(v, w, rel_tol=1e-9)]
    if not wrong:
        return CORRECT
    for mistake, (_, hint) in _kv_mistakes(*cases[0]).items():
        if all(math.isclose(v, _kv_mistakes(*c)[mistake][0], rel_tol=1e-9) for c, v in zip(cases, values)):
            return no(mistake, hint)
    c, value, want = wrong[0]
    return no("other", f"For {names.format(*c)} expected {want:,} bytes, got {value:,}.")


def _leak_case(seed, vocab, d, h, n, T, position) -> tuple:
    """(model, tokens (1, T), the new token, the logits' change (1, T, vocab) by causal flag) of one setting."""
    from ..models import DecoderOnlyLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        lm = DecoderOnlyLM(vocab_size=vocab, d_model=d, num_heads=h, num_layers=n, d_ff=2 * d, dropout=0.0).eval()
    tokens = torch.randint(1, vocab, (1, T), generator=_seeded(100 + seed))
    new = int(tokens[0, position]) % (vocab - 1) + 1
    changed = torch.where(torch.arange(T) == position, new, tokens)  # (1, T): new_token at `position`
    with torch.no_grad():
        logits = lambda t, causal: lm.head(lm.decoder(lm.pos(lm.embed(t)), tgt_mask=causal_mask(T) if causal else None))
        return lm, tokens, new, {c: logits(changed, c) - logits(tokens, c) for c in (True, False)}


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5)


def _same_elsewhere(fn, setting: tuple, causal: bool, value: float, first_want: float) -> bool:
    """fn returns `value` again on another setting, whose largest change differs from the first's: it measures
    nothing. (With the causal mask every setting's change is 0, and a constant cannot be told apart.)"""
    lm, tokens, new, change = _leak_case(*setting)
    position = setting[-1]
    if _near(change[causal].abs()[:, :position].max().item(), first_want):
        return False
    with contextlib.suppress(Wrong):
        return measure("", run(fn, lm, tokens.clone(), position, new, causal, case="another setting"))[0] == value
    return False


@checker
def check_future_leak(fn) -> str:
    """Experiment: fn(model, tokens, position, new_token, causal) measures the leak from a later token."""
    # models and tokens of the checker's own: with the mask nothing moves, without it earlier positions do
    settings = ((0, 10, 16, 2, 1, 8, 5), (1, 13, 24, 3, 2, 11, 3), (2, 7, 12, 4, 1, 9, 8), (3, 20, 16, 2, 2, 6, 1))
    skipped = None  # the first case whose answer came without running the model
    for index, (_, vocab, d, h, layers, T, position) in enumerate(settings):
        lm, tokens, new, change = _leak_case(*settings[index])
        model = f"a model with vocab {vocab}, d_model {d}, {h} heads, {layers} layer(s), {T} tokens"
        for causal in (True, False):
            case = f"{model}, token {position} changed, causal={causal}"
            with counting_calls(lm) as calls:
                value = measure("the largest change", run(fn, lm, tokens.clone(), position, new, causal, case=case))[0]
            skipped = skipped or (None if calls[0] else case)  # judged once the numbers are right
            diff = change[causal].abs()  # (1, T, vocab)
            earlier, flipped = diff[:, :position], change[not causal].abs()[:, :position]
            want = earlier.max().item()
            if _near(value, want):
                continue
            for mistake, wrong, hint in (  # (id, what that mistake measures, hint)
                ("changed-position", diff.max().item(), "Compare only positions 0 .. position - 1, before the change."),
                ("nothing-moved", 0.0, "Nothing moved: put new_token at `position`; tgt_mask=None when causal=False."),
                ("causal-flag", flipped.max().item(), "Mixed up causal: True is tgt_mask=causal_mask(T), False None."),
                ("mean", earlier.mean().item(), "That is the mean change: return the largest, .abs().max()."),
                ("no-abs", change[causal][:, :position].max().item(), "Take the absolute value before the max."),
            ):
                if not _near(wrong, want) and _near(value, wrong):
                    return no(mistake, f"On {case}: {hint}")
            got = f"On {case} expected a largest change of {want:.4g}, got {value:.4g}"
            if _same_elsewhere(fn, settings[(index + 1) % len(settings)], causal, value, want):
                return no("not-measured", f"{got}, and the same on other models: it must measure, not return a number.")
            if causal:
                return no("moved-under-mask", f"{got}: under the causal mask earlier positions must not move.")
            return no("other", f"{got}: the largest absolute change before `position` (tgt_mask=None unless causal).")
    not_skipped(skipped, "the model")
    return CORRECT
