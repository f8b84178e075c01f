"""The inside page's claims about induction on repeated random strings, recomputed: seed by seed, the best head's
score against even attention's on the same string (book/playground/inside.md, 'Does this model have an induction
head?')."""

from __future__ import annotations

import statistics

import torch

import transformer_lib as tl
from playground_build.inside import repeated_random
from transformer_lib import recipes


def _even(ids: list[int]) -> float:
    """The page's evenScore: each position spreads its weight alike over the t + 1 keys it sees."""
    counted = [(sum(ids[s - 1] == ids[t] for s in range(1, t + 1)), t) for t in range(len(ids))]
    counted = [(n, t) for n, t in counted if n]
    return sum(n / (t + 1) for n, t in counted) / len(counted)


def test_the_best_head_against_even_attention_seed_by_seed():
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, _ = recipes.shakespeare_data("char")
    ratios, evens = {}, []
    for seed in range(30):
        ids = tok.encode(repeated_random(tok, seed, 24))
        tokens = torch.tensor([ids])
        _, cache = tl.inside.run_with_cache(model, tokens)
        layers = range(len(model.decoder.layers))
        best = max(float(tl.inside.induction_scores(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens).max())
                   for i in layers)  # fmt: skip
        evens.append(_even(ids))
        ratios[seed] = best / evens[-1]
    assert round(min(ratios.values()), 2) == 0.83 and round(max(ratios.values()), 2) == 2.58
    assert round(statistics.median(ratios.values()), 2) == 1.08
    assert [s for s, r in ratios.items() if r > 2] == [21]
    assert round(1 / max(evens)) == 14 and round(1 / min(evens)) == 35
