"""The book's one rule of evidence: is A better than B, by how much, and can these runs tell?

Every comparison a chapter draws ("GRPO beats SFT", "the probe beats fine-tuning") goes through `compare`:

- **Paired** where the two methods share their draws: the same seeds, the same test items, the same prompts. The
  test works on the differences A - B, one per pair, and asks how often flipping their signs at random gives a mean
  difference at least as far from 0 as the one measured (a sign-flip permutation test). Pairing takes out what the
  two share, such as a hard test item or an unlucky seed, so it sees smaller effects.
- **Unpaired** otherwise: how often splitting the pooled runs at random into groups of the same sizes gives a
  difference of means at least as far from 0 (a permutation test of two samples).
- Both are **exact** while the number of rearrangements is small enough to list (2^n sign flips up to n = 16 pairs,
  up to 50,000 splits); beyond that they draw `resamples` rearrangements at random, from a seeded generator.
- The p-value is two-sided: twice the smaller of the two one-sided ones, capped at 1 (as scipy.stats does).
- The **effect** is the mean difference (A - B), with a percentile **bootstrap interval** (95%): the pairs
  resampled when paired, each group on its own when not.
- The **verdict** is one of three sentences. "A beats B" or "B beats A" when p <= ALPHA (0.05, stated in the
  conventions page), the winner by the sign of the effect and whether higher is better; else "not separable with
  these runs".

What this means for seeds. Three paired seeds have 2^3 = 8 sign flips, so the smallest two-sided p is 2/8 = 0.25:
three seeds alone can never separate two methods. Three against three unpaired runs have 20 splits (smallest p =
0.1); five paired seeds 32 flips (0.0625); six paired seeds 64 (0.031). A chapter that compares over few seeds
therefore pairs over something with more draws as well (the test items, the prompts) or runs more seeds, and says
"not separable" when the verdict says so.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

__all__ = ["ALPHA", "CONFIDENCE", "Comparison", "compare", "permutation_p", "bootstrap_interval"]

ALPHA = 0.05  # a two-sided p at or below this separates two methods (book/conventions.md)
CONFIDENCE = 0.95  # the bootstrap interval's coverage
EXACT_FLIPS = 16  # paired: list all 2^n sign flips up to this many pairs
EXACT_SPLITS = 50_000  # unpaired: list every split up to this many
NOT_SEPARABLE = "not separable with these runs"


@dataclass(frozen=True)
class Comparison:
    """The outcome of `compare`: the effect (mean of A - B) with its interval, the p-value and the verdict."""

    names: tuple[str, str]
    effect: float  # mean(A - B): paired, the mean of the differences; unpaired, the difference of the means
    low: float  # the bootstrap interval of the effect
    high: float
    p: float  # two-sided
    paired: bool
    n: tuple[int, int]  # runs (or draws) of A and of B
    exact: bool  # the p-value counts every rearrangement (else `resamples` random ones)
    higher_is_better: bool
    alpha: float = ALPHA
    unit: str = "runs"

    @property
    def verdict(self) -> str:
        """ "A beats B", "B beats A" (with the names) or "not separable with these runs"."""
        if not self.p <= self.alpha or self.effect == 0:
            return NOT_SEPARABLE
        a_higher = self.effect > 0
        winner, loser = self.names if a_higher == self.higher_is_better else self.names[::-1]
        return f"{winner} beats {loser}"

    @property
    def separable(self) -> bool:
        return self.verdict != NOT_SEPARABLE

    def __str__(self) -> str:
        a, b = self.names
        how = f"paired over {self.n[0]} {self.unit}" if self.paired else f"{self.n[0]} against {self.n[1]} {self.unit}"
        test = "exact" if self.exact else "sampled"
        # a mean of differences that cancel leaves rounding (1e-17), not an effect: print it as the 0 it is
        effect = 0.0 if abs(self.effect) < 1e-9 * (self.high - self.low) else self.effect
        return (
            f"{self.verdict}: {a} - {b} = {effect:+.4g} ({CONFIDENCE:.0%} interval {self.low:+.4g} to "
            f"{self.high:+.4g}), {how}, {test} permutation p = {self.p:.3g} (threshold {self.alpha:g})"
        )


def _values(x, name: str) -> torch.Tensor:
    """A sequence of numbers (list, tuple, tensor, array) as a 1-D float64 tensor, or a ValueError naming it."""
    try:
        t = torch.as_tensor(x, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a sequence of numbers, got {type(x).__name__}") from None
    if t.numel() < 2:
        raise ValueError(f"{name} needs at least 2 runs to compare, got {t.numel()}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} holds a value that is not finite: {t[~torch.isfinite(t)][0].item()}")
    return t


def _runs(a, b, paired: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """a and b as float64 tensors, checked; paired runs must be as many on both sides."""
    a, b = _values(a, "a"), _values(b, "b")
    if paired and len(a) != len(b):
        raise ValueError(f"paired runs need as many of A as of B, got {len(a)} and {len(b)}")
    return a, b


CHUNK = 2**17  # draws per block: resampling works through `resamples` rows a block at a time (same stream, less memory)


def _blocks(resamples: int, per_row: int):
    """Row counts that add up to `resamples`, each block about CHUNK draws: a CPU generator hands out the same numbers
    whether they are drawn in one call or in several, so the blocks change the memory held, not the result."""
    rows = max(1, CHUNK // max(per_row, 1))
    for start in range(0, resamples, rows):
        yield min(rows, resamples - start)


def _two_sided(null: torch.Tensor, observed: float) -> float:
    """Twice the smaller one-sided p of `observed` among the statistics `null` (every rearrangement's, or a
    sample of them with the observed one counted in), capped at 1. A tolerance keeps ties of rounding as ties."""
    tolerance = 1e-12 * max(1.0, abs(observed))
    greater = (null >= observed - tolerance).double().mean().item()
    less = (null <= observed + tolerance).double().mean().item()
    return min(1.0, 2 * min(greater, less))


def permutation_p(a, b, *, paired: bool, resamples: int = 10_000, seed: int = 0) -> tuple[float, bool]:
    """(two-sided p of the mean difference A - B under the permutation null, whether every rearrangement was listed).

    Paired: a, b of the same length n, the signs of the n differences flipped (all 2^n when n <= EXACT_FLIPS).
    Unpaired: the pooled values split into groups of len(a) and len(b) (every split when there are at most
    EXACT_SPLITS). Else `resamples` random rearrangements from a generator seeded with `seed`, the observed one
    counted among them."""
    a, b = _runs(a, b, paired)
    g = torch.Generator().manual_seed(seed)
    if paired:
        d = a - b  # (n,)
        n = len(d)
        if n <= EXACT_FLIPS:
            bits = torch.arange(2**n)[:, None] >> torch.arange(n)  # (2^n, n): every sign pattern
            signs = 1.0 - 2.0 * (bits & 1).double()  # (2^n, n) of +1 and -1
            exact = True
        else:
            means = [d[None].mean(dim=1)]  # the observed arrangement counts among them
            for rows in _blocks(resamples, n):
                keep = torch.randint(0, 2, (rows, n), generator=g, dtype=torch.bool)  # (rows, n): True = +
                means.append(torch.where(keep, d, -d).mean(dim=1))  # (rows,): as (signs * d).mean, one pass fewer
            return _two_sided(torch.cat(means), d.mean().item()), False
        null = (signs * d).mean(dim=1)  # (rearrangements,)
        return _two_sided(null, d.mean().item()), exact
    pooled, n_a = torch.cat([a, b]), len(a)  # (n_a + n_b,)
    total = len(pooled)
    if math.comb(total, n_a) <= EXACT_SPLITS:
        groups = torch.tensor(list(itertools.combinations(range(total), n_a)))  # (splits, n_a): A's members
        in_a = torch.zeros(len(groups), total, dtype=torch.bool).scatter_(1, groups, True)  # (splits, total)
        exact = True
    else:
        observed = torch.zeros(1, total, dtype=torch.bool)
        observed[0, :n_a] = True
        null = [_split_differences(observed, pooled, n_a)]  # the observed split counts among them
        for rows in _blocks(resamples, total):
            order = torch.rand(rows, total, generator=g).argsort(dim=1)  # (rows, total): random splits
            in_a = torch.zeros(rows, total, dtype=torch.bool).scatter_(1, order[:, :n_a], True)
            null.append(_split_differences(in_a, pooled, n_a))
        return _two_sided(torch.cat(null), (a.mean() - b.mean()).item()), False
    return _two_sided(_split_differences(in_a, pooled, n_a), (a.mean() - b.mean()).item()), exact


def _split_differences(in_a: torch.Tensor, pooled: torch.Tensor, n_a: int) -> torch.Tensor:
    """in_a (splits, total): True for A's members -> (splits,): mean of A's members - mean of B's."""
    mean_a = (in_a * pooled).sum(dim=1) / n_a
    mean_b = (~in_a * pooled).sum(dim=1) / (len(pooled) - n_a)
    return mean_a - mean_b


def bootstrap_interval(
    a, b, *, paired: bool, confidence: float = CONFIDENCE, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean difference A - B: the pairs resampled together when paired,
    each group on its own when not, `resamples` times from a generator seeded with `seed`."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    a, b = _runs(a, b, paired)
    g = torch.Generator().manual_seed(seed)
    if paired:
        means = _resampled_means(a - b, resamples, g)  # (resamples,)
    else:  # all of A's draws, then all of B's
        means = _resampled_means(a, resamples, g) - _resampled_means(b, resamples, g)  # (resamples,)
    tail = (1 - confidence) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return low, high


def _resampled_means(x: torch.Tensor, resamples: int, g: torch.Generator) -> torch.Tensor:
    """(n,) -> (resamples,): the means of `resamples` samples of x drawn with replacement, a block at a time."""
    n = len(x)
    return torch.cat([x[torch.randint(n, (rows, n), generator=g)].mean(dim=1) for rows in _blocks(resamples, n)])


def compare(
    a,
    b,
    *,
    paired: bool,
    names: tuple[str, str] = ("A", "B"),
    higher_is_better: bool = True,
    unit: str = "runs",
    alpha: float = ALPHA,
    resamples: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Compare the results of two methods, a and b (one number per run, seed or test item): the effect mean(A - B)
    with its bootstrap interval, the permutation p-value and the verdict (see the module's docstring).

    paired=True when the i-th result of A and of B share their draws (the same seed, the same test item).
    higher_is_better=False for a loss or an error rate. `unit` names what one result is, for the printed line.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if not (isinstance(names, (tuple, list)) and len(names) == 2 and all(isinstance(n, str) for n in names)):
        raise ValueError(f"names must be two strings, got {names!r}")
    a_values, b_values = _values(a, names[0]), _values(b, names[1])
    p, exact = permutation_p(a_values, b_values, paired=paired, resamples=resamples, seed=seed)
    low, high = bootstrap_interval(a_values, b_values, paired=paired, resamples=resamples, seed=seed)
    effect = (a_values - b_values).mean().item() if paired else (a_values.mean() - b_values.mean()).item()
    return Comparison(
        names=(names[0], names[1]),
        effect=effect,
        low=low,
        high=high,
        p=p,
        paired=paired,
        n=(len(a_values), len(b_values)),
        exact=exact,
        higher_is_better=higher_is_better,
        alpha=alpha,
        unit=unit,
    )
