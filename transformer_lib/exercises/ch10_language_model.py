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

_BITS_HINTS = {  # the mistakes check_bits_per_char names, by id
    "nats": "That is nats per character. Divide by log(2) to get bits.",
    "per-token": "That is bits per token. Spread the token's bits over its characters: times tokens / chars.",
    "nats-per-token": "That is nats per token: multiply by num_tokens / num_chars and divide by log(2).",
    "upside-down": "Upside down: total bits are nats_per_token * num_tokens / log(2); divide them by num_chars.",
    "upside-down-nats": "Upside down and in nats: total nats are nats_per_token * num_tokens; divide by num_chars, "
    "then by log(2).",
    "times-log2": "Multiplied by log(2): to turn nats into bits, divide by log(2).",
    "log10": "That is log base 10: bits use log(2).",
    "total": "That is the total in bits: divide by num_chars for bits per character.",
    "no-tokens": "Multiply by num_tokens: the text's total is nats_per_token * num_tokens.",
}
_BITS_MISTAKES = {  # id: what that mistake computes from (nats_per_token, num_tokens, num_chars)
    "nats": lambda n, t, c: n * t / c,
    "per-token": lambda n, t, c: n / LN2,
    "nats-per-token": lambda n, t, c: n,
    "upside-down": lambda n, t, c: n * c / t / LN2,
    "upside-down-nats": lambda n, t, c: n * c / t,
    "times-log2": lambda n, t, c: n * t / c * LN2,
    "log10": lambda n, t, c: n * t / c / math.log(10),
    "total": lambda n, t, c: n * t / LN2,
    "no-tokens": lambda n, t, c: n / c / LN2,
}


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
    for mistake, formula in _BITS_MISTAKES.items():
        if all(near(v, formula(*case)) for case, v in zip(cases, values)):
            return no(mistake, _BITS_HINTS[mistake])
    (n, t, c), value = wrong[0]
    return no(
        "other",
        f"For {n} nats per token, {t} tokens and {c} characters expected {n * t / c / LN2:.4f}, got {value:.4f}.",
    )


def _kept(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus rule on probabilities: likeliest first, keep a token while the mass before it is short of top_p."""
    sorted_probs, order = probs.double().sort(descending=True)  # (V,) each
    keep = (sorted_probs.cumsum(0) - sorted_probs) < top_p  # (V,) in sorted order
    return torch.zeros_like(keep).scatter(0, order, keep)


def _nucleus_cases() -> list[tuple[torch.Tensor, float]]:
    """Probabilities in a shuffled order, with top_p values on, below and above the boundaries.

    The first vectors hold powers of two, so every partial sum is exact: when the likelier tokens
    sum to exactly top_p, the set is complete and the next token must not be kept.
    """
    g = torch.Generator().manual_seed(10)
    exact = [
        ([0.125, 0.5, 0.03125, 0.25, 0.09375], (0.6, 0.75, 0.875, 0.5, 0.01, 1.0)),
        ([0.0625, 0.25, 0.5, 0.0625, 0.125], (0.75, 0.875, 0.9375, 0.5, 0.3)),
        ([0.25, 0.015625, 0.375, 0.125, 0.1875, 0.03125, 0.015625], (0.625, 0.75, 0.9375, 0.96875)),
    ]
    cases = [(torch.tensor(probs), p) for probs, ps in exact for p in ps]
    for V, ps in ((9, (0.3, 0.9)), (23, (0.5, 0.95)), (4, (0.99,))):
        probs = (torch.randn(V, generator=g) * 1.5).softmax(-1)
        cases += [(probs, p) for p in ps]
    return cases


_TOO_FEW = "the token whose probability carries the mass past top_p belongs to the set too."
_NUCLEUS_HINTS = {  # the mistakes check_nucleus_set names when the answer makes them on every input, by id
    "one-too-many": "One token too many at the boundary: when the likelier tokens already sum to exactly top_p, the "
    "set is complete. Keep a token only while the mass *before* it is short of top_p (strictly less).",
    "too-few": f"Too few tokens: {_TOO_FEW}",
    "unsorted": "You summed the tokens in the order given: sort by probability first.",
    "sorted-mask": "Your mask is in sorted order: scatter it back to the tokens' own order.",
}


def _nucleus_mistakes(probs: torch.Tensor, p: float) -> dict[str, torch.Tensor]:
    """id: the set that mistake keeps, for each mistake in _NUCLEUS_HINTS."""
    d = probs.double()
    s, order = d.sort(descending=True)
    c = s.cumsum(0)
    drop = c > p  # Hugging Face's rule: drop past top_p, shifted right by one, keeps one too many at the boundary
    shifted = torch.cat([torch.zeros(1, dtype=torch.bool), drop[:-1]])
    unsorted = torch.zeros_like(shifted)
    return {
        "one-too-many": unsorted.scatter(0, order, ~shifted),
        "too-few": unsorted.scatter(0, order, c < p),
        "unsorted": (d.cumsum(0) - d) < p,
        "sorted-mask": (c - s) < p,
    }


@checker
def check_nucleus_set(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> str:
    """fn(probs (V,), top_p) -> (V,) bool: the smallest set of likeliest tokens whose mass reaches top_p.

    Probabilities come shuffled, some exact in binary so that the likelier tokens can sum to exactly
    top_p. A mistake is named only when the answer follows it on every input.
    """
    answers = []  # (probs, top_p, case, got, want)
    for probs, p in _nucleus_cases():
        case = f"probs={[round(v, 5) for v in probs.tolist()]}, top_p={p}"
        want = _kept(probs, p)
        got = run(fn, probs.clone(), p, case=case)
        expect_tensor(got, want, case, kind="bool")
        answers.append((probs, p, case, got, want))
    wrong = [a for a in answers if not torch.equal(a[3], a[4])]
    if not wrong:
        return CORRECT
    probs, p, case, got, want = wrong[0]
    for mistake, hint in _NUCLEUS_HINTS.items():
        if all(torch.equal(g, _nucleus_mistakes(pr, q)[mistake]) for pr, q, _, g, _ in answers):
            return no(mistake, f"On {case}: {hint}")
    if not got.any():
        return no(
            "none-kept", f"On {case} you kept no token: the likeliest token is always kept, however small top_p is."
        )
    if not got.all() and probs[got].min() < probs[~got].max():
        return no(
            "unsorted", f"On {case} you kept a token less likely than one you dropped: sort by probability first."
        )
    if got.sum() < want.sum():
        return no("too-few", f"Too few tokens on {case}: {_TOO_FEW}")
    return no("too-many", f"Too many tokens on {case}: expected {want.tolist()}, got {got.tolist()}.")


def _loss_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """(name, logits, targets, temperature): sizes, vocabularies and temperatures all vary."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for N, V, scale, temperatures in (
        (2000, 12, 2.0, (0.5, 1.0, 2.0)),
        (700, 31, 1.0, (0.8, 1.3)),
        (97, 5, 3.0, (0.6, 1.7)),
    ):
        logits = torch.randn(N, V, generator=g) * scale  # (N, V)
        targets = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]  # (N,): drawn from the model itself
        cases += [(f"logits of shape ({N}, {V}) at temperature {t}", logits, targets, t) for t in temperatures]
    return cases


def _bits(logits: torch.Tensor, targets: torch.Tensor, t: float = 1.0) -> float:
    return F.cross_entropy(logits.double() / t, targets).item() / LN2


_LOSS_HINTS = {  # the mistakes check_temperature_loss names, by id
    "nats": "That is the loss in nats; divide by log(2) for bits.",
    "multiplied": "Divide the logits by the temperature; you multiplied them.",
    "temperature-ignored": "The temperature is ignored: divide the logits by it before the softmax.",
    "total": "That is the total over the tokens: take the mean.",
    "log10": "That is log base 10: bits use log(2).",
    "sign": "The sign is flipped: the cross-entropy is -mean(log2 p(target)), a positive number.",
    "entropy": "That is the entropy of the model's distribution: score the targets, -log2 p(target).",
    "loss-divided": "Divide the logits by the temperature before the softmax, not the loss after it.",
}


def _loss_mistakes(logits: torch.Tensor, targets: torch.Tensor, t: float, want: float) -> list[tuple[float, str]]:
    """(the loss that mistake measures, its id) for each mistake in _LOSS_HINTS."""
    logp = (logits.double() / t).log_softmax(-1)
    return [
        (want * LN2, "nats"),
        (_bits(logits, targets, 1 / t), "multiplied"),  # logits * t
        (_bits(logits, targets), "temperature-ignored"),
        (-logp.gather(1, targets[:, None]).sum().item() / LN2, "total"),
        (want * LN2 / math.log(10), "log10"),
        (-want, "sign"),
        (-(logp.exp() * logp).sum(-1).mean().item() / LN2, "entropy"),
        (_bits(logits, targets) / t, "loss-divided"),
    ]


@checker
def check_temperature_loss(fn: Callable[[torch.Tensor, torch.Tensor, float], float]) -> str:
    """Experiment: fn(logits (N, V), targets (N,), temperature) -> mean cross-entropy in bits of softmax(logits / T).

    The checker runs the learner's measurement itself on logits, targets and temperatures of its own,
    so a typed number cannot pass. Each loss must match the checker's own to 1e-4, so on text drawn
    from the model temperature 1 comes out lowest.
    """

    def measured(logits: torch.Tensor, targets: torch.Tensor, t: float, case: str) -> float:
        return measure("the loss in bits", run(fn, logits.clone(), targets.clone(), t, case=case))[0]

    for case, logits, targets, t in _loss_cases():
        value = measured(logits, targets, t, case)
        want = _bits(logits, targets, t)
        if near(value, want, rel=1e-4):
            continue
        for wrong, mistake in _loss_mistakes(logits, targets, t, want):
            if not near(wrong, want, rel=1e-4) and near(value, wrong, rel=1e-4):
                return no(mistake, f"On {case}: {_LOSS_HINTS[mistake]}")
        # the same temperature on other logits: an answer that reads them gives another number
        _, other_logits, other_targets, _ = next(c for c in _loss_cases() if c[1].shape != logits.shape)
        try:
            again = measured(other_logits, other_targets, t, "other logits")
        except Wrong:
            again = None
        if again == value and not near(_bits(other_logits, other_targets, t), value, rel=1e-4):
            return no(
                "not-measured",
                f"On {case} expected {want:.4f} bits, got {value:.4f}, and the same number for other logits at that "
                "temperature. The checker runs your measurement on logits of its own, so it must compute the loss, "
                "not return a number.",
            )
        return no(
            "other",
            f"On {case} expected {want:.4f} bits, got {value:.4f}. Divide the logits by the temperature, take the "
            "cross-entropy with the targets in nats, and convert to bits (divide by ln 2). The checker runs your "
            "code on logits of its own: a number typed in from the chapter cannot match.",
        )
    return CORRECT
