"""Checkers for the exercises of the language-model chapter (Shakespeare)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ._common import CORRECT, Wrong, checker, measure, no, run
from ._match import expect_tensor, near

__all__ = ["check_bits_per_char", "check_nucleus_set", "check_temperature_loss"]

LN2 = math.log(2)

# what each classic mistake computes from (nats_per_token n, num_tokens t, num_chars c), its id and its hint
_BITS_MISTAKES = [
    (lambda n, t, c: n * t / c, "nats", "That is nats per character. Divide by log(2) to get bits."),
    (lambda n, t, c: n / LN2, "per-token", "That is bits per token: spread them over the characters (tokens / chars)."),
    (lambda n, t, c: n, "nats-per-token", "That is nats per token: multiply by tokens / chars, divide by log(2)."),
    (lambda n, t, c: n * c / t / LN2, "upside-down", "Upside down: divide n * num_tokens / log(2) by num_chars."),
    (lambda n, t, c: n * c / t, "upside-down-nats", "Upside down, in nats: n * num_tokens / num_chars / log(2)."),
    (lambda n, t, c: n * t / c * LN2, "times-log2", "Multiplied by log(2): to turn nats into bits, divide by log(2)."),
    (lambda n, t, c: n * t / c / math.log(10), "log10", "That is log base 10: bits use log(2)."),
    (lambda n, t, c: n * t / LN2, "total", "That is the total in bits: divide by num_chars for bits per character."),
    (lambda n, t, c: n / c / LN2, "no-tokens", "Multiply by num_tokens: the total is nats_per_token * num_tokens."),
]


@checker
def check_bits_per_char(fn: Callable[[float, int, int], float]) -> str:
    """fn(nats_per_token, num_tokens, num_chars) -> bits per character of the whole text."""
    cases = ((1.0, 10, 10), (2.2, 400, 1000), (0.7, 50, 120), (3.1, 900, 2500), (1.6, 64, 64), (4.5, 30, 11))
    values = []
    for nats, tokens, chars in cases:
        case = f"{nats} nats per token, {tokens} tokens and {chars} characters"
        values += measure("the bits per character", run(fn, nats, tokens, chars, case=case))
    wrong = [(c, v) for c, v in zip(cases, values) if not near(v, c[0] * c[1] / c[2] / LN2)]
    if not wrong:
        return CORRECT
    for formula, mistake, hint in _BITS_MISTAKES:  # named only when the answer follows it on every input
        if all(near(v, formula(*case)) for case, v in zip(cases, values)):
            return no(mistake, hint)
    (n, t, c), value = wrong[0]
    return no(
        "other", f"For {n} nats per token, {t} tokens, {c} characters expected {n * t / c / LN2:.4f}, got {value:.4f}."
    )


_TOO_FEW = "the token whose probability carries the mass past top_p belongs to the set too."
_NUCLEUS_HINTS = {  # the mistakes check_nucleus_set names when the answer makes them on every input, by id
    "one-too-many": "One token too many at the boundary: when the likelier tokens already sum to exactly top_p, the "
    "set is complete. Keep a token only while the mass *before* it is short of top_p (strictly less).",
    "too-few": f"Too few tokens: {_TOO_FEW}",
    "unsorted": "You summed the tokens in the order given: sort by probability first.",
    "sorted-mask": "Your mask is in sorted order: scatter it back to the tokens' own order.",
}


def _nucleus_sets(probs: torch.Tensor, p: float) -> dict[str, torch.Tensor]:
    """The set each rule keeps: "right" (likeliest first, keep a token while the mass before it is short of top_p),
    then each mistake in _NUCLEUS_HINTS, by id."""
    d = probs.double()
    s, order = d.sort(descending=True)  # (V,) each
    c = s.cumsum(0)  # (V,) in sorted order
    drop = c > p  # Hugging Face's rule: drop past top_p, shifted right by one, keeps one too many at the boundary
    shifted = torch.cat([torch.zeros(1, dtype=torch.bool), drop[:-1]])
    unsorted = torch.zeros_like(shifted)
    return {
        "right": unsorted.scatter(0, order, (c - s) < p),
        "one-too-many": unsorted.scatter(0, order, ~shifted),
        "too-few": unsorted.scatter(0, order, c < p),
        "unsorted": (d.cumsum(0) - d) < p,
        "sorted-mask": (c - s) < p,
    }


@checker
def check_nucleus_set(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> str:
    """fn(probs (V,), top_p) -> (V,) bool: the smallest set of likeliest tokens whose mass reaches top_p."""
    # Shuffled probabilities, top_p on, below and above the boundaries. The first hold powers of two, so every
    # partial sum is exact: when the likelier tokens sum to exactly top_p, the next token must not be kept.
    exact = [
        ([0.125, 0.5, 0.03125, 0.25, 0.09375], (0.6, 0.75, 0.875, 0.5, 0.01, 1.0)),
        ([0.0625, 0.25, 0.5, 0.0625, 0.125], (0.75, 0.875, 0.9375, 0.5, 0.3)),
        ([0.25, 0.015625, 0.375, 0.125, 0.1875, 0.03125, 0.015625], (0.625, 0.75, 0.9375, 0.96875)),
    ]
    cases = [(torch.tensor(probs), p) for probs, ps in exact for p in ps]
    g = torch.Generator().manual_seed(10)
    for V, ps in ((9, (0.3, 0.9)), (23, (0.5, 0.95)), (4, (0.99,))):
        probs = (torch.randn(V, generator=g) * 1.5).softmax(-1)
        cases += [(probs, p) for p in ps]
    answers = []  # (probs, top_p, case, got, want)
    for probs, p in cases:
        case = f"probs={[round(v, 5) for v in probs.tolist()]}, top_p={p}"
        want = _nucleus_sets(probs, p)["right"]
        got = run(fn, probs.clone(), p, case=case)
        expect_tensor(got, want, case, kind="bool")
        answers.append((probs, p, case, got, want))
    wrong = [a for a in answers if not torch.equal(a[3], a[4])]
    if not wrong:
        return CORRECT
    probs, p, case, got, want = wrong[0]
    for mistake, hint in _NUCLEUS_HINTS.items():
        if all(torch.equal(kept, _nucleus_sets(pr, q)[mistake]) for pr, q, _, kept, _ in answers):
            return no(mistake, f"On {case}: {hint}")
    if not got.any():
        return no("none-kept", f"On {case} you kept no token: the likeliest is always kept, however small top_p is.")
    if not got.all() and probs[got].min() < probs[~got].max():
        return no("unsorted", f"On {case} you kept a token less likely than one you dropped: sort by probability.")
    if got.sum() < want.sum():
        return no("too-few", f"Too few tokens on {case}: {_TOO_FEW}")
    return no("too-many", f"Too many tokens on {case}: expected {want.tolist()}, got {got.tolist()}.")


_LARGE = 800.0  # the last case's logits sit around it: exp(logits / T) overflows float32 and float64 alike


def _loss_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """(name, logits, targets, temperature): sizes, vocabularies and temperatures all vary; the last logits are
    large, shifted by _LARGE (the softmax is the same)."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for N, V, scale, shift, ts in (
        (2000, 12, 2.0, 0.0, (0.5, 1.0, 2.0)),
        (700, 31, 1.0, 0.0, (0.8, 1.3)),
        (97, 5, 3.0, 0.0, (0.6, 1.7)),
        (300, 9, 2.0, _LARGE, (0.7,)),
    ):
        logits = torch.randn(N, V, generator=g) * scale + shift  # (N, V)
        targets = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]  # (N,): drawn from the model itself
        around = f" around {shift:g}" if shift else ""
        cases += [(f"logits{around} of shape ({N}, {V}) at temperature {t}", logits, targets, t) for t in ts]
    return cases


def _bits(logits: torch.Tensor, targets: torch.Tensor, t: float = 1.0) -> float:
    return F.cross_entropy(logits.double() / t, targets).item() / LN2


def _loss_mistakes(logits: torch.Tensor, targets: torch.Tensor, t: float, want: float) -> list[tuple[float, str, str]]:
    """(the loss that mistake measures, its id, its hint) for each mistake check_temperature_loss names."""
    logp = (logits.double() / t).log_softmax(-1)  # (N, V)
    total = -logp.gather(1, targets[:, None]).sum().item() / LN2
    entropy = -(logp.exp() * logp).sum(-1).mean().item() / LN2
    plain = _bits(logits, targets)
    return [
        (want * LN2, "nats", "That is the loss in nats; divide by log(2) for bits."),
        (_bits(logits, targets, 1 / t), "multiplied", "Divide the logits by the temperature; you multiplied them."),
        (plain, "temperature-ignored", "The temperature is ignored: divide the logits by it before the softmax."),
        (total, "total", "That is the total over the tokens: take the mean."),
        (want * LN2 / math.log(10), "log10", "That is log base 10: bits use log(2)."),
        (-want, "sign", "The sign is flipped: the cross-entropy is -mean(log2 p(target)), a positive number."),
        (entropy, "entropy", "That is the entropy of the model's distribution: score the targets, -log2 p(target)."),
        (plain / t, "loss-divided", "Divide the logits by the temperature before the softmax, not the loss after it."),
    ]


@checker
def check_temperature_loss(fn: Callable[[torch.Tensor, torch.Tensor, float], float]) -> str:
    """Experiment: fn(logits (N, V), targets (N,), temperature) -> mean cross-entropy in bits of softmax(logits / T)."""
    # logits, targets and temperatures of its own, so a typed number cannot pass

    def measured(logits: torch.Tensor, targets: torch.Tensor, t: float, case: str) -> float:
        return measure("the loss in bits", run(fn, logits.clone(), targets.clone(), t, case=case))[0]

    for case, logits, targets, t in _loss_cases():
        value = measured(logits, targets, t, case)
        want = _bits(logits, targets, t)
        if near(value, want, rel=1e-4):
            continue
        if not math.isfinite(value) and logits.mean() > _LARGE / 2:  # the large case: exp overflowed
            hint = "exp(x) is inf above about 88 in float32 (709 in float64), so exp over its sum gives NaN and the "
            hint += "log of a probability that rounded to 0 gives inf: take each row's max off the logits first, or "
            hint += "use log_softmax or F.cross_entropy, which do"
            return no("overflow", f"On {case} you returned {value}, expected {want:.4f}: {hint}.")
        for wrong, mistake, hint in _loss_mistakes(logits, targets, t, want):
            if not near(wrong, want, rel=1e-4) and near(value, wrong, rel=1e-4):
                return no(mistake, f"On {case}: {hint}")
        # the same temperature on other logits: an answer that reads them gives another number
        _, other_logits, other_targets, _ = next(c for c in _loss_cases() if c[1].shape != logits.shape)
        try:
            again = measured(other_logits, other_targets, t, "other logits")
        except Wrong:
            again = None
        expected = f"On {case} expected {want:.4f} bits, got {value:.4f}"
        if again == value and not near(_bits(other_logits, other_targets, t), value, rel=1e-4):
            return no("not-measured", f"{expected}, and again for other logits: compute the loss, not return a number.")
        return no(
            "other",
            f"{expected}: divide the logits by the temperature, take the cross-entropy in nats, divide by ln 2.",
        )
    return CORRECT
