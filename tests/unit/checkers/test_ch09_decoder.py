"""Mutation suite for the checkers of chapter 09 (the decoder): classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("09_decoder", name)


_raises = raising(RuntimeError("index 300 is out of bounds for dimension 0 with size 300"))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_sample", ex.check_sample),
        ("solution_windows", ex.check_windows),
        ("solution_kv_cache_bytes", ex.check_kv_cache_bytes),
        ("solution_future_leak", ex.check_future_leak),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


# ---- sampling -----------------------------------------------------------------------------------


def _sample(lg, t, k, g, divide=True, k_shift=0, use_rng=True, strict=False):
    if t == 0:
        return lg.argmax(-1, keepdim=True)
    lg = lg / t if divide else lg * t
    if k is not None:
        kth = lg.topk(k + k_shift, -1).values[:, -1:]
        lg = lg.masked_fill(lg <= kth if strict else lg < kth, float("-inf"))
    return torch.multinomial(lg.softmax(-1), 1, generator=g if use_rng else None)


def _sample_by_exp(lg, t, k, g, stable=False):
    """The softmax written out, exp over its sum: without the max taken off, exp overflows above about 88."""
    if t == 0:
        return lg.argmax(-1, keepdim=True)
    lg = lg / t
    if k is not None:
        lg = lg.masked_fill(lg < lg.topk(k, -1).values[:, -1:], float("-inf"))
    e = (lg - lg.amax(-1, keepdim=True) if stable else lg).exp()
    return torch.multinomial(e / e.sum(-1, keepdim=True), 1, generator=g)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda lg, t, k, g: torch.multinomial(lg.softmax(-1), 1, generator=g), "not-greedy"),
        (lambda lg, t, k, g: lg.argmin(-1, keepdim=True), "argmin"),
        (lambda lg, t, k, g: lg.argmax(-1), "keepdim"),
        (lambda lg, t, k, g: lg.argmax(-1).tolist(), "shape"),
        (lambda lg, t, k, g: _sample(lg, t, None, g), "top-k-ignored"),
        (lambda lg, t, k, g: _sample(lg, t, k, g, k_shift=1), "outside-top-k"),
        (lambda lg, t, k, g: _sample(lg, t, k, g, strict=True), "top-k-minus-one"),
        (lambda lg, t, k, g: _sample(lg, t, k, g, divide=False), "temperature-multiplied"),
        (lambda lg, t, k, g: _sample(lg, t and 1.0, k, g), "temperature-ignored"),
        (lambda lg, t, k, g: lg.argmax(-1, keepdim=True), "always-argmax"),
        (lambda lg, t, k, g: _sample(lg, t, k, g, use_rng=False), "seed-ignored"),
        (lambda lg, t, k, g: _sample(lg, t, k, g) + (t > 0) * lg.shape[1], "not-ids"),
        (lambda lg, t, k, g: _uniform(lg, g) if k is None and t > 0 else _sample(lg, t, k, g), "uniform"),
        (lambda lg, t, k, g: _sample(lg, t * 1.5, k, g), "other"),
        (
            lambda lg, t, k, g: _sample(lg, t, k, g).flatten() if t > 0 else lg.argmax(-1, keepdim=True),
            "shape",
        ),
        (_raises, "raised"),
        (_sample_by_exp, "overflow"),  # NaN probabilities, which torch.multinomial refuses
        (lambda lg, t, k, g: _sample_inverse_cdf(lg, t, k, g, by_exp=True), "overflow"),  # NaN: token 0 always
    ],
)
def test_sample_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_sample(wrong), mistake)


def _uniform(lg, g):  # every token equally likely: the logits are never used
    return torch.randint(lg.shape[1], (lg.shape[0], 1), generator=g)


def _sample_gumbel(lg, t, k, g):
    if t == 0:
        return lg.argmax(-1, keepdim=True)
    lg = lg / t
    if k is not None:
        values, index = lg.topk(k, -1)
        choice = torch.multinomial(values.softmax(-1), 1, generator=g)
        return index.gather(1, choice)
    return torch.multinomial(lg.softmax(-1), 1, generator=g)


def _sample_inverse_cdf(lg, t, k, g, by_exp=False):
    if t == 0:
        return lg.argmax(-1, keepdim=True)
    probs = (lg.double() / t).softmax(-1)
    if by_exp:  # written out, exp over its sum: float64 overflows above about 709
        probs = (lg.double() / t).exp() / (lg.double() / t).exp().sum(-1, keepdim=True)
    if k is not None:
        probs = probs * (probs >= probs.topk(k, -1).values[:, -1:])
        probs = probs / probs.sum(-1, keepdim=True)
    u = torch.rand(lg.shape[0], 1, generator=g, dtype=torch.float64)
    return (probs.cumsum(-1) < u).sum(-1, keepdim=True).clamp(max=lg.shape[1] - 1)


@pytest.mark.parametrize(
    "right", [_sample, _sample_gumbel, _sample_inverse_cdf, lambda *args: _sample_by_exp(*args, stable=True)]
)
def test_sample_other_routes_pass(right):
    assert ex.check_sample(right) == ex.CORRECT


# ---- windows ------------------------------------------------------------------------------------


def _win(ids, starts, n, x_shift=0, y_shift=1):
    offsets = torch.arange(n)
    return ids[starts[:, None] + offsets + x_shift], ids[starts[:, None] + offsets + y_shift]


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda i, s, n: _win(i, s, n, y_shift=0), "not-shifted"),
        (lambda i, s, n: _win(i, s, n, y_shift=-1) if (s > 0).all() else _win(i, s, n, y_shift=0), "wrong-way"),
        (lambda i, s, n: _win(i, s, n, y_shift=-1), "wrong-way"),
        (lambda i, s, n: _win(i, s, n, y_shift=2), "shifted-by-two"),
        (lambda i, s, n: _win(i, s, n)[::-1], "swapped"),
        (lambda i, s, n: (_win(i, s, n)[0], _win(i, s, n)[0] + 1), "added-one"),
        (lambda i, s, n: _win(i, s, n, x_shift=1, y_shift=2), "starts-late"),
        (lambda i, s, n: _win(i, s, n, x_shift=-1, y_shift=0), "starts-early"),
        (
            lambda i, s, n: (_win(i, s, n)[0], i[(s[:, None] + torch.arange(n) + n).clamp(max=len(i) - 1)]),
            "next-window",
        ),
        (lambda i, s, n: _win(i, s[:1].expand(len(s)), n), "first-start"),
        (lambda i, s, n: (_win(i, s, n)[0], torch.zeros(len(s), n, dtype=torch.long)), "wrong-y"),
        (lambda i, s, n: (_win(i, s, n)[0].flip(0), _win(i, s, n)[1]), "other"),
        (lambda i, s, n: _win(i, s, 8), "raised"),  # a fixed block_size: runs off the end of 40 ids
        (lambda i, s, n: _win(i, s, min(n, 5)), "shape"),
        (lambda i, s, n: torch.stack(_win(i, s, n)), "not-a-pair"),
        (_raises, "raised"),
    ],
)
def test_windows_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_windows(wrong), mistake)


def test_an_arange_only_answer_fails_on_random_ids():
    rejected_as(ex.check_windows(lambda i, s, n: (_win(i, s, n)[0], _win(i, s, n)[0] + 1)), "added-one")


@pytest.mark.parametrize(
    "right",
    [
        _win,
        lambda i, s, n: tuple(torch.stack([i[b + o : b + o + n] for b in s.tolist()]) for o in (0, 1)),
        lambda i, s, n: (lambda w: (w[:, :-1], w[:, 1:]))(i.unfold(0, n + 1, 1)[s]),
    ],
)
def test_windows_other_routes_pass(right):
    assert ex.check_windows(right) == ex.CORRECT


# ---- KV cache size ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda L, d, T, B, nb: L * d * T * B * nb, "no-values"),
        (lambda L, d, T, B, nb: 2 * L * d * T * B, "numbers-not-bytes"),
        (lambda L, d, T, B, nb: 2 * d * T * B * nb, "one-layer"),
        (lambda L, d, T, B, nb: 2 * L * d * T * nb, "one-sequence"),
        (lambda L, d, T, B, nb: 2 * L * d * B * nb, "one-token"),
        (lambda L, d, T, B, nb: 16 * L * d * T * B * nb, "bits"),
        (lambda L, d, T, B, nb: 2 * L * d * d * T * B * nb, "d_model-squared"),
        (lambda L, d, T, B, nb: 4 * L * d * T * B * nb, "factor-4"),
        (lambda L, d, T, B, nb: 2 * L * d * T * B * nb if nb == 2 else 0, "other"),
        (lambda L, d, T, B, nb: f"{2 * L * d * T * B * nb} bytes", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_kv_cache_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_kv_cache_bytes(wrong), mistake)


def test_kv_cache_names_the_first_input_it_fails_on():
    feedback = ex.check_kv_cache_bytes(lambda L, d, T, B, nb: 2 * L * d * T * B * nb if nb == 2 else 0)
    assert "For num_layers=2, d_model=64" in feedback


@pytest.mark.parametrize(
    "right",
    [
        lambda L, d, T, B, nb: 2 * L * d * T * B * nb,
        lambda L, d, T, B, nb: float(L * (d * T * B * nb + d * T * B * nb)),
        lambda L, d, T, B, nb: (
            torch.empty(
                2,
                L,
                B,
                T,
                d,
                dtype={1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[nb],
                device="meta",
            ).nbytes
        ),
    ],
)
def test_kv_cache_other_routes_pass(right):
    assert ex.check_kv_cache_bytes(right) == ex.CORRECT


# ---- the future leak ----------------------------------------------------------------------------


def _leak(lm, tokens, position, new, causal, part="before", mask_when=None, reduce="max", absolute=True, change=True):
    changed = tokens.clone()
    if change:
        changed[0, position] = new
    use_mask = causal if mask_when is None else mask_when(causal)
    mask = tl.causal_mask(tokens.shape[1]) if use_mask else None
    with torch.no_grad():
        a, b = (lm.head(lm.decoder(lm.pos(lm.embed(t)), tgt_mask=mask)) for t in (tokens, changed))
    diff = b - a
    diff = diff.abs() if absolute else diff
    chosen = {"before": diff[:, :position], "after": diff[:, position:], "all": diff, "upto": diff[:, : position + 1]}
    return getattr(chosen[part], reduce)().item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda *a: _leak(*a, part="after"), "changed-position"),
        (lambda *a: _leak(*a, part="all"), "changed-position"),
        (lambda *a: _leak(*a, part="upto"), "changed-position"),
        (lambda *a: _leak(*a, mask_when=lambda c: True), "nothing-moved"),
        (lambda *a: _leak(*a, mask_when=lambda c: not c), "causal-flag"),
        (lambda *a: _leak(*a, reduce="mean"), "mean"),
        (lambda *a: _leak(*a, absolute=False), "no-abs"),
        (lambda *a: _leak(*a, change=False), "nothing-moved"),
        (lambda *a: _leak(*a) * 2 + 1e-3, "moved-under-mask"),
        (lambda lm, t, p, n, c: _leak(lm, t, p, n, c) * (1 if c else 2), "other"),
        (lambda lm, t, p, n, c: 0.0 if c else 0.25, "not-measured"),
        (lambda lm, t, p, n, c: "leaks", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_future_leak_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_future_leak(wrong), mistake)


def test_the_old_fixed_experiment_fails_on_the_checkers_models():
    def fixed(lm, tokens, position, new, causal):  # measures its own model and tokens, not the ones given
        tl.set_seed(0)
        own = tl.DecoderOnlyLM(vocab_size=10, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0).eval()
        x = torch.randint(1, 10, (1, 8), generator=torch.Generator().manual_seed(2))
        return _leak(own, x, 5, int(x[0, 5]) % 9 + 1, causal)

    rejected_as(ex.check_future_leak(fixed), "not-measured")


def test_future_leak_other_route_passes():
    def through_forward(lm, tokens, position, new, causal):
        changed = tokens.clone()
        changed[0, position] = new
        with torch.no_grad():
            if causal:
                a, b = lm(tokens), lm(changed)  # the model's own forward applies the causal mask
            else:
                a, b = (lm.head(lm.decoder(lm.pos(lm.embed(t)))) for t in (tokens, changed))
        return float(torch.linalg.vector_norm(b[0, :position] - a[0, :position], ord=float("inf")))

    assert ex.check_future_leak(through_forward) == ex.CORRECT


def test_a_leak_predicted_instead_of_measured_is_named():
    right = _notebook_solution("solution_future_leak")

    def predicts(model, tokens, position, new_token, causal):  # under the causal mask the theory says 0
        return 0.0 if causal else right(model, tokens, position, new_token, causal)

    rejected_as(ex.check_future_leak(predicts), "skipped")
