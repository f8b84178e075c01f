"""tl.evidence, the book's one rule of evidence, against scipy.stats on numbers of our own: the exact permutation
p-values equal scipy's, the sampled ones and the bootstrap intervals fall within their sampling error of scipy's,
and the verdicts follow the p-value, the sign and the direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_lib import evidence

stats = pytest.importorskip("scipy.stats")


def _mean_difference(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _data(seed: int, n_a: int, n_b: int, shift: float) -> tuple[list[float], list[float]]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(n_a, generator=g, dtype=torch.float64) + shift).tolist()
    b = torch.randn(n_b, generator=g, dtype=torch.float64).tolist()
    return a, b


@pytest.mark.parametrize(("seed", "n", "shift"), [(0, 3, 2.0), (1, 5, 0.3), (2, 8, 1.0), (3, 12, 0.5), (4, 16, -0.4)])
def test_the_exact_paired_p_value_is_scipys(seed, n, shift):
    a, b = _data(seed, n, n, shift)
    p, exact = evidence.permutation_p(a, b, paired=True)
    theirs = stats.permutation_test(
        (np.array(a), np.array(b)), _mean_difference, permutation_type="samples", n_resamples=np.inf, vectorized=True
    )
    assert exact and p == pytest.approx(theirs.pvalue, rel=1e-9)


@pytest.mark.parametrize(
    ("seed", "n_a", "n_b", "shift"), [(5, 3, 3, 3.0), (6, 4, 6, 0.8), (7, 5, 5, -1.5), (8, 7, 9, 0.2)]
)
def test_the_exact_unpaired_p_value_is_scipys(seed, n_a, n_b, shift):
    a, b = _data(seed, n_a, n_b, shift)
    p, exact = evidence.permutation_p(a, b, paired=False)
    theirs = stats.permutation_test(
        (np.array(a), np.array(b)),
        _mean_difference,
        permutation_type="independent",
        n_resamples=np.inf,
        vectorized=True,
    )
    assert exact and p == pytest.approx(theirs.pvalue, rel=1e-9)


@pytest.mark.slow  # scipy lists all 2^20 sign flips
@pytest.mark.parametrize("paired", [True, False])
def test_a_sampled_p_value_is_within_its_sampling_error_of_scipys_exact_one(paired):
    a, b = _data(9, 20, 20, 0.45)  # 2^20 flips or C(40, 20) splits: too many to list here, so they are sampled
    p, exact = evidence.permutation_p(a, b, paired=paired, resamples=20_000)
    kind = "samples" if paired else "independent"
    if paired:
        theirs = stats.permutation_test(
            (np.array(a), np.array(b)), _mean_difference, permutation_type=kind, n_resamples=np.inf, vectorized=True
        ).pvalue
    else:  # scipy samples too (C(40, 20) is 1.4e11), with far more draws than ours
        theirs = stats.permutation_test(
            (np.array(a), np.array(b)),
            _mean_difference,
            permutation_type=kind,
            n_resamples=400_000,
            vectorized=True,
            rng=np.random.default_rng(0),
        ).pvalue
    assert not exact
    assert abs(p - theirs) <= 5 * math.sqrt(theirs * (1 - theirs) / 20_000) + 1e-3, (p, theirs)


@pytest.mark.parametrize(("paired", "n_a", "n_b"), [(True, 12, 12), (False, 10, 15)])
def test_the_bootstrap_interval_is_scipys_percentile_interval(paired, n_a, n_b):
    a, b = _data(10, n_a, n_b, 0.7)
    low, high = evidence.bootstrap_interval(a, b, paired=paired, resamples=40_000)
    theirs = stats.bootstrap(
        (np.array(a), np.array(b)),
        _mean_difference,
        paired=paired,
        vectorized=True,
        method="percentile",
        n_resamples=40_000,
        rng=np.random.default_rng(1),
    ).confidence_interval
    width = theirs.high - theirs.low
    assert abs(low - theirs.low) <= 0.03 * width and abs(high - theirs.high) <= 0.03 * width, ((low, high), theirs)


def test_the_verdict_follows_the_p_value_the_sign_and_the_direction():
    a, b = [3.0, 3.2, 2.9, 3.1, 3.3, 3.0], [2.0, 2.1, 1.9, 2.2, 2.0, 1.8]  # A higher on every one of six pairs
    higher = evidence.compare(a, b, paired=True, names=("GRPO", "SFT"))
    assert higher.p == pytest.approx(2 / 64) and higher.verdict == "GRPO beats SFT" and higher.separable
    lower = evidence.compare(a, b, paired=True, names=("GRPO", "SFT"), higher_is_better=False)  # a loss
    assert lower.verdict == "SFT beats GRPO"
    assert evidence.compare(b, a, paired=True, names=("SFT", "GRPO")).verdict == "GRPO beats SFT"
    assert evidence.compare(a, a, paired=True).verdict == evidence.NOT_SEPARABLE  # no difference at all: p = 1
    line = str(higher)
    assert line.startswith("GRPO beats SFT: GRPO - SFT = +1") and "paired over 6 runs" in line and "exact" in line
    # differences that cancel print as 0, not as the 1e-17 their floating-point mean leaves
    cancel = evidence.compare([0.1, 0.7, 0.2, 0.4], [0.3, 0.5, 0.4, 0.2], paired=True, names=("A", "B"))
    assert cancel.effect != 0 and abs(cancel.effect) < 1e-15 and "A - B = +0 (" in str(cancel)


def test_three_seeds_alone_can_never_separate_two_methods():
    """The smallest two-sided p of three paired seeds is 2/8, of three against three 2/20: a chapter that compares
    three seeds says "not separable", however large the gap."""
    paired = evidence.compare([10.0, 11.0, 12.0], [0.0, 0.5, 1.0], paired=True)
    unpaired = evidence.compare([10.0, 11.0, 12.0], [0.0, 0.5, 1.0], paired=False)
    assert paired.p == pytest.approx(0.25) and unpaired.p == pytest.approx(0.1)
    assert paired.verdict == unpaired.verdict == evidence.NOT_SEPARABLE
    assert unpaired.low > 0  # the interval is far from 0; the rule is the p-value, and it says these runs cannot tell


def test_sampled_tests_are_seeded_and_say_so():
    a, b = _data(11, 30, 30, 0.2)
    first, again = (evidence.compare(a, b, paired=True, seed=3) for _ in range(2))
    assert first == again and not first.exact and "sampled permutation" in str(first)


@pytest.mark.parametrize("paired", [True, False])
def test_resampling_a_block_at_a_time_changes_nothing(monkeypatch, paired):
    """The sampled tests and the bootstrap draw their rows in blocks of about CHUNK numbers; one generator hands out
    the same stream whatever the blocks, so the p-value and the interval are the same to the last bit."""
    a, b = _data(5, 40, 40 if paired else 35, 0.3)
    whole = evidence.compare(a, b, paired=paired, resamples=2_000)
    monkeypatch.setattr(evidence, "CHUNK", 7 * 40)  # blocks of 7 rows, the last one shorter
    blocks = evidence.compare(a, b, paired=paired, resamples=2_000)
    assert blocks == whole and not whole.exact


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "message"),
    [
        ([1.0, 2.0], [1.0, 2.0, 3.0], {"paired": True}, "paired runs need as many of A as of B, got 2 and 3"),
        ([1.0], [2.0, 3.0], {"paired": False}, "needs at least 2 runs to compare, got 1"),
        ([1.0, float("nan")], [2.0, 3.0], {"paired": False}, "holds a value that is not finite: nan"),
        ("abc", [2.0, 3.0], {"paired": False}, "must be a sequence of numbers, got str"),
        ([1.0, 2.0], [2.0, 3.0], {"paired": False, "alpha": 5}, "alpha must be between 0 and 1, got 5"),
        ([1.0, 2.0], [2.0, 3.0], {"paired": False, "names": ("only one",)}, "names must be two strings"),
    ],
)
def test_bad_input_is_refused_by_name(a, b, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evidence.compare(a, b, **kwargs)
