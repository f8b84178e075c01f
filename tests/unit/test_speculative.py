"""Speculative decoding (transformer_lib.speculative): the rule keeps the target's distribution, exactly and in
samples, and the greedy text is the target's."""

from __future__ import annotations

import copy

import pytest
import torch

import transformer_lib as tl
from transformer_lib import speculative

SMALL = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32, dropout=0.0)


def _distributions(V: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=g, dtype=torch.float64) ** 3
    q = torch.rand(V, generator=g, dtype=torch.float64) ** 3
    q_gaps = q.clone()
    q_gaps[: V // 2] = 0  # the draft never proposes half the tokens
    return [(p / p.sum(), q / q.sum()), (p / p.sum(), q_gaps / q_gaps.sum()), (p / p.sum(), p / p.sum())]


@pytest.mark.parametrize("V", [2, 5, 50])
def test_every_token_comes_out_with_the_targets_probability_exactly(V):
    """Summed over every token the draft could propose: kept with acceptance(p, q), else redrawn from residual(p, q).
    The chance of each output token is p's, to float64's rounding: the rule is exact, not approximate."""
    for p, q in _distributions(V, seed=V):
        keep = speculative.acceptance(p, q)  # (V,)
        rejected = (q * (1 - keep)).sum()  # the chance of a rejection, whatever was proposed
        out = q * keep + rejected * speculative.residual(p, q)  # (V,)
        torch.testing.assert_close(out, p, atol=1e-12, rtol=0)


def _models(seed: int, V: int = 4):
    torch.manual_seed(seed)
    target = tl.DecoderOnlyLM(vocab_size=V, **SMALL).eval()
    draft = tl.DecoderOnlyLM(vocab_size=V, **(SMALL | dict(d_model=8, d_ff=16))).eval()
    with torch.no_grad():  # sharper, different distributions, so that drafts are both kept and rejected
        target.head.weight.mul_(8)
        draft.head.weight.mul_(8)
    return target, draft


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_greedy_text_is_the_targets_whatever_the_draft(k):
    target, unrelated = _models(seed=k, V=11)
    near = copy.deepcopy(target)  # a draft that often agrees: the target with its output layer disturbed
    with torch.no_grad():
        near.head.weight.add_(torch.randn(near.head.weight.shape, generator=torch.Generator().manual_seed(k)) * 2)
    prompt = torch.tensor([[1, 2, 3]])
    want = target.generate(prompt, 20, temperature=0.0)
    for draft in (unrelated, near):
        written, counts = speculative.speculative_generate(target, draft, prompt, 20, k=k, temperature=0.0)
        assert torch.equal(written, want)
    assert 0 < counts["acceptance"] < 1 and counts["rounds"] < 20  # the near draft: kept in part, fewer passes


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_samples_follow_the_targets_distribution():
    """1,000 texts of two tokens from a vocabulary of 4: the 16 pairs' counts against the target's exact chances by
    a chi-square test. The test fails below p = 0.001 (its false-alarm rate); the seed is fixed, so it never flakes.
    The same test on the classic mistake (a rejected token redrawn from p instead of the residual) fails it."""
    from scipy.stats import chisquare

    target, draft = _models(seed=7)
    prompt = torch.tensor([[0, 1]])
    with torch.no_grad():
        first = target(prompt)[0, -1].double().softmax(-1)  # (4,)
        exact = torch.stack(
            [first[a] * target(torch.tensor([[0, 1, a]]))[0, -1].double().softmax(-1) for a in range(4)]
        ).flatten()  # fmt: skip  (16,): P(a, b) = p(a) p(b | a)

    def counts_of(runs: int) -> torch.Tensor:
        rng = torch.Generator().manual_seed(0)
        seen = torch.zeros(16)
        accepted = drafted = 0
        for _ in range(runs):
            out, c = speculative.speculative_generate(target, draft, prompt, 2, k=2, rng=rng)
            a, b = out[0, 2:].tolist()
            seen[4 * a + b] += 1
            accepted, drafted = accepted + c["accepted"], drafted + c["drafted"]
        assert 0.1 < accepted / drafted < 0.95  # the draft is neither the target nor useless
        return seen

    seen = counts_of(1000)
    assert chisquare(seen.numpy(), (exact * 1000).numpy()).pvalue > 1e-3  # measured: 0.99
    real = speculative.residual
    try:
        speculative.residual = lambda p, q: p  # the mistake: redraw from the target's whole distribution
        wrong = counts_of(1000)
    finally:
        speculative.residual = real
    assert chisquare(wrong.numpy(), (exact * 1000).numpy()).pvalue < 1e-3  # measured: 3e-53


def test_a_draft_that_is_the_target_is_always_kept():
    target, _ = _models(seed=3)
    out, counts = speculative.speculative_generate(target, target, torch.tensor([[2]]), 12, k=3,
                                                   rng=torch.Generator().manual_seed(1))  # fmt: skip
    assert counts["acceptance"] == 1.0 and counts["tokens per target pass"] == 4.0 and out.shape == (1, 13)
    # 10 tokens asked in rounds of 4: the third round writes 2 more than asked, which are cut and not counted
    out, counts = speculative.speculative_generate(target, target, torch.tensor([[2]]), 10, k=3,
                                                   rng=torch.Generator().manual_seed(1))  # fmt: skip
    assert out.shape == (1, 11) and counts["rounds"] == 3 and counts["tokens per target pass"] == 10 / 3


def test_bad_calls_are_refused_by_name():
    target, draft = _models(seed=1)
    other = tl.DecoderOnlyLM(vocab_size=5, **SMALL)
    prompt = torch.tensor([[1]])
    cases = [
        (dict(prompt=torch.tensor([[1], [2]])), r"one text: prompt must be \(1, T0\), got \(2, 1\)"),
        (dict(k=0), "need k >= 1"),
        (dict(temperature=-1.0), "temperature >= 0"),
        (dict(max_new_tokens=30), "the target reads at most 32 positions; prompt, new tokens and one round's"),
        (dict(draft=other), "must share a vocabulary, got 4 and 5 ids"),
    ]
    for change, message in cases:
        call = dict(target=target, draft=draft, prompt=prompt, max_new_tokens=4) | change
        with pytest.raises(ValueError, match=message):
            speculative.speculative_generate(**call)
