"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): a small model guesses, the large one checks.

A language model writes one token per forward pass, and a large model's pass costs about as much for k + 1 new
positions as for one. So let a small draft model write k tokens, run the large target model once over all of them,
and keep the longest prefix the target agrees with. The rule that keeps the target's own distribution: draft token
x, which the draft drew with probability q(x), is accepted with probability min(1, p(x) / q(x)), p the target's; at
the first rejection the token is drawn instead from the residual max(0, p - q), renormalised; if all k are
accepted, the target's distribution after them gives one more token for free. Each emitted token is then
distributed exactly as p: a token the draft proposes too rarely (q < p) is always accepted and made up by the
residual; one it proposes too often (q > p) is accepted only in the proportion p / q. At temperature 0 the rule
becomes: accept while the draft's token is the target's argmax, then write the target's argmax, so the text is the
target's greedy text whatever the draft.

`acceptance` and `residual` are the rule; `speculative_generate` runs it. This module keeps no cache (each pass reads
the whole prefix), which is plain to read and enough for the book's small models; the speed it measures is in target
passes per token. `tests/unit/test_speculative.py` proves the rule keeps p exactly (summed over every draft token,
with the module's own functions), checks the whole loop's samples against the target's distribution, and requires
the greedy text to equal the target's.
"""

from __future__ import annotations

import torch
from torch import nn

from .decoding import check_token_batch

__all__ = ["acceptance", "residual", "speculative_generate"]


def acceptance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The chance of keeping each draft token: min(1, p / q), elementwise over the vocabulary (..., V); where q is 0
    the draft never proposes the token, and the chance is 1 (it does not matter)."""
    return torch.where(q > 0, (p / q.clamp_min(torch.finfo(q.dtype).tiny)).clamp(max=1), torch.ones_like(p))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Where a rejected token is redrawn from: max(0, p - q), renormalised over the vocabulary (..., V). When p = q
    nothing is ever rejected; the result is then p itself (any distribution would do)."""
    left = (p - q).clamp_min(0)
    total = left.sum(-1, keepdim=True)
    return torch.where(total > 0, left / total.clamp_min(torch.finfo(p.dtype).tiny), p)


def _probabilities(model: nn.Module, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """ids (1, T) -> the model's next-token distributions at every position (T, V), in float64."""
    with torch.no_grad():
        logits = model(ids)[0].double()  # (T, V)
    if temperature == 0:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()  # greedy: all on the argmax
    return (logits / temperature).softmax(-1)


def _draw(probabilities: torch.Tensor, rng: torch.Generator | None) -> int:
    return int(torch.multinomial(probabilities, 1, generator=rng))


def speculative_generate(
    target: nn.Module,
    draft: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 1.0,
    rng: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """prompt (1, T0) -> (ids (1, T0 + max_new_tokens), counts): `max_new_tokens` tokens distributed as the target's
    at `temperature` (0: its greedy text), written by rounds of k draft tokens checked by one target pass.

    counts: "rounds" (target passes), "drafted", "accepted" (draft tokens kept), "acceptance" (accepted / drafted)
    and "tokens per target pass". Both models read the same ids (one vocabulary); rng draws every sample."""
    check_token_batch(prompt, "prompt")
    if prompt.shape[0] != 1:
        raise ValueError(f"speculative_generate writes one text: prompt must be (1, T0), got {tuple(prompt.shape)}")
    if k < 1 or max_new_tokens < 1 or temperature < 0:
        raise ValueError(f"need k >= 1, max_new_tokens >= 1 and temperature >= 0, got k={k}, "
                         f"max_new_tokens={max_new_tokens}, temperature={temperature}")  # fmt: skip
    for name, model in (("target", target), ("draft", draft)):
        total = prompt.shape[1] + max_new_tokens + k
        if total > model.config.max_len:
            raise ValueError(f"the {name} reads at most {model.config.max_len} positions; prompt, new tokens and one "
                             f"round's k draft tokens make {total}")  # fmt: skip
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"the two models must share a vocabulary, got {target.config.vocab_size} and "
                         f"{draft.config.vocab_size} ids")  # fmt: skip
    ids, device = prompt.tolist()[0], prompt.device  # the models' device: the prompt's, as generate has it
    start, rounds, drafted, accepted = len(ids), 0, 0, 0
    while len(ids) - start < max_new_tokens:
        guesses, q_rows = [], []
        for _ in range(k):  # the draft writes k tokens, one pass each
            q = _probabilities(draft, torch.tensor([ids + guesses], device=device), temperature)[-1]  # (V,)
            guesses.append(_draw(q, rng))
            q_rows.append(q)
        p_rows = _probabilities(target, torch.tensor([ids + guesses], device=device), temperature)[len(ids) - 1 :]
        rounds, drafted = rounds + 1, drafted + k
        for i, (x, q) in enumerate(zip(guesses, q_rows)):
            keep = acceptance(p_rows[i], q)[x]
            u = torch.rand((), generator=rng, dtype=torch.float64, device=device if rng is None else rng.device)
            if temperature == 0 or float(u) < keep:
                if temperature == 0 and keep < 1:  # greedy: the draft's token is not the target's argmax
                    ids.append(int(p_rows[i].argmax()))
                    break
                ids.append(x)
                accepted += 1
                continue
            ids.append(_draw(residual(p_rows[i], q), rng))  # rejected: redrawn where the draft fell short of p
            break
        else:  # all k kept: the target's next distribution is already computed
            ids.append(_draw(p_rows[k], rng))
    out = torch.tensor([ids[: start + max_new_tokens]], device=prompt.device)
    counts = {
        "rounds": rounds,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / drafted,
        "tokens per target pass": max_new_tokens / rounds,  # the tokens returned; a last round's extra are cut
    }
    return out, counts
