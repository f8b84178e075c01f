"""Checkers for the exercises of the language-model chapter (Shakespeare)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ._common import CORRECT, _measured, attempt
from ._match import near as _close
from ._match import tensor_problem

__all__ = ["check_bits_per_char", "check_nucleus_set", "check_temperature_loss"]


def check_bits_per_char(fn: Callable[[float, int, int], float]) -> str:
    """fn(nats_per_token, num_tokens, num_chars) -> bits per character of the whole text."""
    cases = ((1.0, 10, 10), (2.2, 400, 1000), (0.7, 50, 120), (3.1, 900, 2500), (1.6, 64, 64), (4.5, 30, 11))
    values = []
    for nats, tokens, chars in cases:
        case = f"{nats} nats per token, {tokens} tokens and {chars} characters"
        got, hint = attempt(fn, nats, tokens, chars, case=case)
        if hint:
            return hint
        measured = _measured("the bits per character", got)
        if isinstance(measured, str):
            return measured
        values.append(measured[0])

    def right(n, t, c):
        return n * t / c / math.log(2)

    wrong = [(c, v) for c, v in zip(cases, values) if not _close(v, right(*c))]
    if not wrong:
        return CORRECT
    mistakes = [
        (lambda n, t, c: n * t / c, "That is nats per character. Divide by log(2) to get bits."),
        (
            lambda n, t, c: n / math.log(2),
            "That is bits per token. Spread the token's bits over its characters: times tokens / chars.",
        ),
        (lambda n, t, c: n, "That is nats per token: multiply by num_tokens / num_chars and divide by log(2)."),
        (
            lambda n, t, c: n * c / t / math.log(2),
            "Upside down: total bits are nats_per_token * num_tokens / log(2); divide them by num_chars.",
        ),
        (
            lambda n, t, c: n * c / t,
            "Upside down and in nats: total nats are nats_per_token * num_tokens; divide by num_chars, then by log(2).",
        ),
        (lambda n, t, c: n * t / c * math.log(2), "Multiplied by log(2): to turn nats into bits, divide by log(2)."),
        (lambda n, t, c: n * t / c / math.log(10), "That is log base 10: bits use log(2)."),
        (lambda n, t, c: n * t / math.log(2), "That is the total in bits: divide by num_chars for bits per character."),
        (
            lambda n, t, c: n / c / math.log(2),
            "Multiply by num_tokens: the text's total is nats_per_token * num_tokens.",
        ),
    ]
    (n, t, c), value = wrong[0]
    for mistake, named in mistakes:
        if all(_close(v, mistake(*case)) for case, v in zip(cases, values)):
            return named
    return f"For {n} nats per token, {t} tokens and {c} characters expected {right(n, t, c):.4f}, got {value:.4f}."


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
    cases = []
    for probs, ps in exact:
        for p in ps:
            cases.append((torch.tensor(probs), p))
    for V, ps in ((9, (0.3, 0.9)), (23, (0.5, 0.95)), (4, (0.99,))):
        probs = (torch.randn(V, generator=g) * 1.5).softmax(-1)
        for p in ps:
            cases.append((probs, p))
    return cases


def _nucleus_mistakes(probs: torch.Tensor, p: float) -> list[tuple[torch.Tensor, str]]:
    d = probs.double()
    s, order = d.sort(descending=True)
    c = s.cumsum(0)
    drop = c > p  # Hugging Face's rule: drop past top_p, shifted right by one, keeps one too many at the boundary
    shifted = torch.cat([torch.zeros(1, dtype=torch.bool), drop[:-1]])
    unsorted = torch.zeros_like(shifted)
    return [
        (
            unsorted.scatter(0, order, ~shifted),
            "One token too many at the boundary: when the likelier tokens already sum to exactly top_p, the set "
            "is complete. Keep a token only while the mass *before* it is short of top_p (strictly less).",
        ),
        (
            unsorted.scatter(0, order, c < p),
            "Too few tokens: the token whose probability carries the mass past top_p belongs to the set too.",
        ),
        ((d.cumsum(0) - d) < p, "You summed the tokens in the order given: sort by probability first."),
        ((c - s) < p, "Your mask is in sorted order: scatter it back to the tokens' own order."),
    ]


def check_nucleus_set(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> str:
    """fn(probs (V,), top_p) -> (V,) bool: the smallest set of likeliest tokens whose mass reaches top_p.

    Probabilities come shuffled, some exact in binary so that the likelier tokens can sum to exactly
    top_p. A mistake is named only when the answer follows it on every input.
    """
    answers = []
    for probs, p in _nucleus_cases():
        case = f"probs={[round(v, 5) for v in probs.tolist()]}, top_p={p}"
        want = _kept(probs, p)
        got, hint = attempt(fn, probs.clone(), p, case=case)
        if hint:
            return hint
        problem = tensor_problem(got, want, case, kind="bool")
        if problem:
            return problem
        answers.append((probs, p, case, got, want))
    wrong = [a for a in answers if not torch.equal(a[3], a[4])]
    if not wrong:
        return CORRECT
    for index in range(len(_nucleus_mistakes(*answers[0][:2]))):
        if all(torch.equal(got, _nucleus_mistakes(probs, p)[index][0]) for probs, p, _, got, _w in answers):
            probs, p, case, got, want = wrong[0]
            return f"On {case}: {_nucleus_mistakes(probs, p)[index][1]}"
    probs, p, case, got, want = wrong[0]
    if not got.any():
        return f"On {case} you kept no token: the likeliest token is always kept, however small top_p is."
    if not got.all() and probs[got].min() < probs[~got].max():
        return f"On {case} you kept a token less likely than one you dropped: sort by probability first."
    if got.sum() < want.sum():
        return (
            f"Too few tokens on {case}: the token whose probability carries the mass past top_p belongs to the set too."
        )
    return f"Too many tokens on {case}: expected {want.tolist()}, got {got.tolist()}."


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
        for t in temperatures:
            cases.append((f"logits of shape ({N}, {V}) at temperature {t}", logits, targets, t))
    return cases


def check_temperature_loss(fn: Callable[[torch.Tensor, torch.Tensor, float], float]) -> str:
    """Experiment: fn(logits (N, V), targets (N,), temperature) -> mean cross-entropy in bits of softmax(logits / T).

    The checker runs the learner's measurement itself on logits, targets and temperatures of its own,
    so a typed number cannot pass; on text drawn from the model, temperature 1 must come out lowest.
    """
    results = {}
    for case, logits, targets, t in _loss_cases():
        got, hint = attempt(fn, logits.clone(), targets.clone(), t, case=case)
        if hint:
            return hint
        measured = _measured("the loss in bits", got)
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = F.cross_entropy(logits.double() / t, targets).item() / math.log(2)
        results[case] = value
        if _close(value, want, rel=1e-4):
            continue
        log2 = math.log(2)
        logp = (logits.double() / t).log_softmax(-1)
        picked = logp.gather(1, targets[:, None])[:, 0]
        mistakes = [
            (want * log2, "That is the loss in nats; divide by log(2) for bits."),
            (
                F.cross_entropy(logits.double() * t, targets).item() / log2,
                "Divide the logits by the temperature; you multiplied them.",
            ),
            (
                F.cross_entropy(logits.double(), targets).item() / log2,
                "The temperature is ignored: divide the logits by it before the softmax.",
            ),
            (-picked.sum().item() / log2, "That is the total over the tokens: take the mean."),
            (want * log2 / math.log(10), "That is log base 10: bits use log(2)."),
            (-want, "The sign is flipped: the cross-entropy is -mean(log2 p(target)), a positive number."),
            (
                -(logp.exp() * logp).sum(-1).mean().item() / log2,
                "That is the entropy of the model's distribution: score the targets, -log2 p(target).",
            ),
            (
                F.cross_entropy(logits.double(), targets).item() / log2 / t,
                "Divide the logits by the temperature before the softmax, not the loss after it.",
            ),
        ]
        for wrong, named in mistakes:
            if not _close(wrong, want, rel=1e-4) and _close(value, wrong, rel=1e-4):
                return f"On {case}: {named}"
        # the same temperature on other logits: an answer that reads them gives another number
        _, other_logits, other_targets, _ = next(c for c in _loss_cases() if c[1].shape != logits.shape)
        other_want = F.cross_entropy(other_logits.double() / t, other_targets).item() / math.log(2)
        again, _ = attempt(fn, other_logits.clone(), other_targets.clone(), t, case="other logits")
        repeated = _measured("", again)
        if not isinstance(repeated, str) and repeated[0] == value and not _close(other_want, value, rel=1e-4):
            return (
                f"On {case} expected {want:.4f} bits, got {value:.4f}, and the same number for other logits at that "
                "temperature. The checker runs your measurement on logits of its own, so it must compute the loss, "
                "not return a number."
            )
        return (
            f"On {case} expected {want:.4f} bits, got {value:.4f}. Divide the logits by the temperature, take the "
            "cross-entropy with the targets in nats, and convert to bits (divide by ln 2). The checker runs your "
            "code on logits of its own: a number typed in from the chapter cannot match."
        )
    first = [v for case, v in results.items() if "(2000, 12)" in case]
    if not first[1] < min(first[0], first[2]):
        return "On text drawn from the model itself, temperature 1 should give the lowest loss."
    return CORRECT
