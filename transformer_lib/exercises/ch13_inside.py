"""Checkers for the exercises of the chapter "Inside the trained models"."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .. import inside, surgery
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, run
from ._match import expect_tensor, same, spot

__all__ = [
    "check_head_contributions",
    "check_induction_scores",
    "check_find_induction_heads",
    "check_composition_score",
]


def _named(got, want, mistakes: list[tuple], hints: dict[str, str], prefix: str) -> str:
    """The verdict on a wrong answer: the first known mistake (result, id) it equals (see `spot`), else "other"."""
    spot(got, want, [(wrong, mistake, prefix + hints[mistake]) for wrong, mistake in mistakes])
    return no("other", prefix + hints["other"])


def _by_hand(library: Callable, fn: Callable, *args, case: str):
    """fn(*args) run on `case`, with tl.inside's `library` refused: the exercise writes it by hand."""
    return run(fn, *args, case=case, forbidden=(library,), names=f"tl.inside.{library.__name__}")


_CONTRIBUTION_HINTS = {
    "split-rows": "Split out_proj.weight (d_model, h * d_k) by columns, not rows: weight.view(d_model, h, d_k).",
    "strided-columns": "Head i owns the columns i * d_k to (i + 1) * d_k of out_proj.weight, not every h-th column.",
    "averaged": "The heads' contributions add up to the attention output; they are not averaged: do not divide by h.",
    "head-0-columns": "Every head went through head 0's columns of out_proj.weight: head i uses its own d_k columns.",
    "running-sum": "Each head's contribution is its own, not a running sum over the heads before it.",
    "other": "not each head's contribution: head i's d_k outputs times out_proj.weight[:, i * d_k : (i + 1) * d_k].T.",
}


def _contributions(heads: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """tl.inside.head_contributions of heads (B, T, h, d_k), read by an attention layer with this out_proj.weight."""
    mha = nn.Module()  # what head_contributions reads of an attention layer (d_model need not be h * d_k here)
    mha.out_proj = nn.Module()
    mha.out_proj.weight = weight
    mha.d_model, mha.num_heads, mha.d_k = weight.shape[0], *heads.shape[2:]
    return inside.head_contributions(nn.ModuleDict({"attn": mha}), {"attn.heads": heads}, "attn.heads")


@checker
def check_head_contributions(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(heads (B, T, h, d_k), out_proj.weight (d_model, h * d_k)) -> each head's contribution (B, T, h, d_model)."""
    g = _seeded(13)
    for B, T, h, d_k, d in ((2, 5, 4, 3, 12), (1, 7, 2, 5, 10), (3, 4, 3, 4, 10)):  # the last: d_model != h * d_k
        case = f"heads of shape {(B, T, h, d_k)} and out_proj.weight of shape {(d, h * d_k)}"
        heads, weight = torch.randn(B, T, h, d_k, generator=g), torch.randn(d, h * d_k, generator=g)
        x, w = heads.double(), weight.double()
        want = _contributions(x, w)
        got = _by_hand(inside.head_contributions, fn, heads.clone(), weight.clone(), case=case)
        if same(got, want.sum(2)):
            return no("summed", f"On {case} you returned the heads' sum, the attention output: keep one per head.")
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        mistakes = [
            (torch.einsum("bthk,hkd->bthd", x, w.reshape(h, d_k, d)), "split-rows"),
            (torch.einsum("bthk,dkh->bthd", x, w.view(d, d_k, h)), "strided-columns"),
            (want / h, "averaged"),
            (torch.einsum("bthk,dk->bthd", x, w[:, :d_k]), "head-0-columns"),
            (want.cumsum(2), "running-sum"),
        ]
        return _named(got, want, mistakes, _CONTRIBUTION_HINTS, f"On {case}: ")
    return CORRECT


def _targets(tokens: torch.Tensor, shift: int = 1, diagonal: int = 0) -> torch.Tensor:
    """[b, t, s]: key s is `shift` after a copy j of tokens[t] (s = j + shift), and s <= t + diagonal."""
    T = tokens.shape[1]
    same_token = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): tokens[t] == tokens[j]
    out = torch.zeros_like(same_token)
    out[:, :, shift:] = same_token[:, :, : T - shift]
    return out & torch.ones(T, T, dtype=torch.bool).tril(diagonal)


def _score(pattern: torch.Tensor, targets: torch.Tensor, reduce: Callable = torch.sum) -> torch.Tensor:
    """The induction score with these targets [b, t, s] in place of the right ones (reduce: how they add up)."""
    mass = reduce(pattern * targets[:, None].to(pattern), -1)  # (B, h, T)
    return mass.permute(1, 0, 2)[:, targets.any(-1)].mean(-1)  # (h,)


_SCORE_HINTS = {
    "divided-by-targets": "Sum the attention over the targets; do not divide it by how many a position has.",
    "wrapped-shift": "Your shift wraps around (torch.roll?): key 0 follows nothing, so it is never a target.",
    "position-by-position": "Average over the counted positions of the whole batch at once, not position by position.",
    "duplicate-token": "That is a duplicate-token score: the target is the key after the earlier copy, s = j + 1.",
    "transposed": "pattern[b, h, t, s] is query t's attention on key s (rows are queries): you read it transposed.",
    "all-positions": "Average only over the positions whose token appeared before: the others have no key to find.",
    "sequence-by-sequence": "Average over every counted position of the batch together, not sequence by sequence.",
    "max-not-sum": "Sum the attention over all the keys that follow an earlier copy, not only the largest one.",
    "latest-copy": "Sum over every earlier copy of the token, not only the latest one.",
    "excludes-self": "Keys up to and including t count: when tokens[t - 1] == tokens[t], key t itself is a target.",
    "off-by-one": "Off by one: the key to look at is s = j + 1, just after the earlier copy j, not j + 2.",
    "other": "not the induction scores: for each query t, sum the attention on the keys s <= t with tokens[s - 1] "
    "== tokens[t], then average over the positions that have such a key.",
}


def _score_mistakes(pattern: torch.Tensor, tokens: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """(the score as a known mistake computes it, the mistake's id), in the order they are looked for."""
    T = tokens.shape[1]
    right = _targets(tokens)
    wrapped = right.clone()
    wrapped[:, :, 0] = tokens == tokens[:, -1:]  # torch.roll wraps the last key round to key 0
    mass, counted = (pattern * right[:, None].to(pattern)).sum(-1), right.any(-1)  # (B, h, T), (B, T)
    by_position = [mass[:, :, t][counted[:, t]].mean(0) for t in range(T) if counted[:, t].any()]  # batch means
    per_target = pattern / right.sum(-1).clamp(min=1)[:, None, :, None]  # each row over its number of targets
    by_sequence = [inside.induction_scores(p[None], t[None]) for p, t in zip(pattern, tokens)]  # each has a repeat
    return [
        (_score(per_target, right), "divided-by-targets"),
        (_score(pattern, wrapped), "wrapped-shift"),
        (torch.stack(by_position).mean(0), "position-by-position"),  # then the mean over positions
        (inside.induction_scores(F.pad(pattern, (1, -1)), tokens), "duplicate-token"),  # keys moved one to the right
        (inside.induction_scores(pattern.transpose(-1, -2), tokens), "transposed"),
        (mass.mean((0, 2)), "all-positions"),
        (torch.stack(by_sequence).mean(0), "sequence-by-sequence"),
        (_score(pattern, right, torch.amax), "max-not-sum"),
        (_score(pattern, right & (right.flip(-1).cumsum(-1).flip(-1) == 1)), "latest-copy"),  # the latest only
        (_score(pattern, _targets(tokens, diagonal=-1)), "excludes-self"),
        (_score(pattern, _targets(tokens, shift=2)), "off-by-one"),
    ]


@checker
def check_induction_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(pattern (B, h, T, T), tokens (B, T)) -> each head's induction score (h,), written by hand."""
    g = _seeded(21)
    block = torch.randint(0, 50, (2, 6), generator=g)
    text = torch.randint(0, 5, (3, 10), generator=g)  # a small vocabulary: many repeats, some adjacent
    mixed = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 1, 2], [1, 1, 2, 1, 2, 1, 2, 3, 3]])
    for case, h, tokens in (
        ("a random block of 6 tokens shown twice (B=2, h=3, T=12)", 3, block.repeat(1, 2)),
        ("text from 5 tokens with many repeats (B=3, h=2, T=10)", 2, text),
        ("two sequences with 2 and 7 repeated positions (B=2, h=4, T=9)", 4, mixed),
    ):
        B, T = tokens.shape
        scores = torch.randn(B, h, T, T, generator=g) * 2  # random attention weights (B, h, T, T), causal
        pattern = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        want = inside.induction_scores(pattern.double(), tokens)
        got = _by_hand(inside.induction_scores, fn, pattern.clone(), tokens.clone(), case=case)
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        return _named(got, want, _score_mistakes(pattern.double(), tokens), _SCORE_HINTS, f"On {case}: ")
    return CORRECT


def _layer_scores(model: nn.Module, tokens: torch.Tensor, score: Callable = inside.induction_scores) -> torch.Tensor:
    """score(pattern, tokens) (h,) of every layer's attention pattern, `model` run on `tokens`: (layers, h)."""
    _, cache = inside.run_with_cache(model, tokens)
    layers = range(len(model.decoder.layers))
    return torch.stack([score(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens) for i in layers])


def _heads_above(model: nn.Module, tokens: torch.Tensor, score: Callable = inside.induction_scores) -> list[tuple]:
    """The (layer, head) pairs, sorted, whose score is above 0.5."""
    return [tuple(pair) for pair in (_layer_scores(model, tokens, score) > 0.5).nonzero().tolist()]


def _weakened(model: nn.Module, tokens: torch.Tensor) -> nn.Module | None:
    """A copy whose strongest induction head is blurred (queries shrunk) to a score in (0.3, 0.48), else None:
    below the threshold, but above half the best score (a relative threshold keeps it)."""
    scores = _layer_scores(model, tokens)
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    for factor in (0.6, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1):
        twin = copy.deepcopy(model).eval()
        mha = twin.decoder.layers[layer].self_attn
        rows = slice(head * mha.d_k, (head + 1) * mha.d_k)
        with torch.no_grad():
            mha.q_proj.weight[rows] *= factor
            if mha.q_proj.bias is not None:
                mha.q_proj.bias[rows] *= factor
        if 0.3 < float(_layer_scores(twin, tokens)[layer, head]) < 0.48:
            return twin
    return None


_FIND_HINTS = {
    "typed-answer": "{pairs} are the heads as the chapter numbered them; measure the model, the checker renumbers it.",
    "other-tokens": "your function did not run the model on the tokens it was given: measure on `tokens`.",
    "one-based": "count layers and heads from 0, as model.decoder.layers and the hook names do.",
    "none-found": "you found no head, but this model has induction heads {want}. Score every layer's pattern with "
    "tl.inside.induction_scores (not the previous-token score) and keep those above 0.5.",
    "previous-token": "those heads attend to the previous token (offset 1). An induction head attends to the token "
    "after the earlier copy of the current one: use tl.inside.induction_scores.",
    "inverted": "that is every head except the induction heads: keep those above 0.5.",
    "relative-threshold": "you also kept {extra}, whose scores are below 0.5: keep exactly the heads above 0.5.",
    "one-layer": "you looked at layer {pairs[0][0]} only; score the heads of every layer.",
    "other": "expected the heads {want}, got {pairs}: score every layer's pattern on `tokens`, keep those above 0.5.",
}


def _judge(fn: Callable, model: nn.Module, tokens: torch.Tensor, case: str, unpermuted: list) -> None:
    """Raise the verdict on the experiment fn(model, tokens); nothing if it finds the model's induction heads.
    unpermuted: the heads of the model as the chapter numbered them, before the checker renumbered them."""
    want = _heads_above(model, tokens)
    before = [p.detach().clone() for p in model.parameters()]
    seen = []  # what the model was run on: the checker's tokens, not data of the learner's own
    watch = model.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        got = run(fn, model, tokens.clone(), case=case)
    finally:  # hooks left or weights changed: named before any other verdict
        watch.remove()
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            hint = "Your experiment left hooks on the model: tl.inside.capture and run_with_cache remove theirs."
            raise Wrong("hooks-left", hint)
        if any(not torch.equal(a, b) for a, b in zip(before, model.parameters())):
            raise Wrong("changed-weights", "Your experiment changed the model's weights: measure without changing it.")
    try:
        pairs = sorted((int(a), int(b)) for a, b in got)
    except (TypeError, ValueError):
        hint = f"Return a list of (layer, head) pairs, got {type(got).__name__}: {got!r}"
        raise Wrong("not-pairs", hint[:300]) from None

    def wrong(mistake: str) -> Wrong:
        extra = sorted(set(pairs) - set(want))
        return Wrong(mistake, f"On {case}: " + _FIND_HINTS[mistake].format(pairs=pairs, want=want, extra=extra))

    if pairs == unpermuted and want != unpermuted:
        raise wrong("typed-answer")
    if not any(torch.is_tensor(a) and len(a) == len(tokens) and a.equal(tokens[:, : a.shape[1]]) for a in seen):
        raise wrong("other-tokens")
    if pairs == want:
        return
    if pairs in (sorted((a - 1, b - 1) for a, b in want), sorted((a + 1, b + 1) for a, b in want)):
        raise wrong("one-based")
    if not pairs:  # and want is not
        raise wrong("none-found")
    if pairs == _heads_above(model, tokens, lambda p, _: inside.head_scores(p, 1)):
        raise wrong("previous-token")
    every = {(i, j) for i in range(len(model.decoder.layers)) for j in range(model.config.num_heads)}
    if pairs == sorted(every - set(want)):
        raise wrong("inverted")
    if set(want) < set(pairs):
        raise wrong("relative-threshold")
    if pairs == [p for p in want if p[0] == pairs[0][0]]:
        raise wrong("one-layer")
    raise wrong("other")


@checker
def check_find_induction_heads(fn: Callable, model: nn.Module) -> str:
    """Experiment: fn(model, tokens (B, 2n)) -> the (layer, head) pairs, 0-based, whose induction score is above 0.5;
    run on models and blocks of the checker's own, so an answer typed from the chapter's output fails."""
    from ..models import DecoderOnlyLM

    model = model.eval()
    device, h, g = next(model.parameters()).device, model.config.num_heads, _seeded(31)
    with torch.random.fork_rng():  # the untrained model's weights from a seed of the checker's, not the caller's
        torch.manual_seed(31)
        untrained = DecoderOnlyLM(model.config).to(device).eval()
    cases = []
    for k, n in enumerate((12, 20)):
        tokens = torch.randint(1, model.config.vocab_size, (16, n), generator=g).repeat(1, 2).to(device)  # (16, 2n)
        orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        while any(order == sorted(order) for order in orders):  # every layer really renumbered
            orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        case = f"the model with its heads renumbered ({k + 1}) on blocks of {n} tokens"
        cases.append((case, surgery.permute_heads(model, orders), tokens))
    unpermuted = _heads_above(model, cases[0][2])
    cases.append(("an untrained model of the same shape on blocks of 12 tokens", untrained, cases[0][2]))
    if model.config.attention_only:
        deeper = surgery.prepend_layer(model, seed=32)
        cases.append(("the model with one more layer in front, which writes nothing", deeper, cases[1][2]))
    if (weak := _weakened(cases[0][1], cases[0][2])) is not None:
        cases.append(("the model with one induction head blurred to a score just under 0.5", weak, cases[0][2]))
    for case, subject, tokens in cases:
        _judge(fn, subject, tokens, case, unpermuted)
    return CORRECT


_COMPOSITION_HINTS = {
    "reversed": "The product is reader @ writer: the reader reads what the writer writes.",
    "unnormalised": "Divide by the norms of the reader and of the writer: the score is a ratio.",
    "no-writer-norm": "Divide by both norms, the writer's too.",
    "no-reader-norm": "Divide by both norms, the reader's too.",
    "spectral-norm": "Use the Frobenius norm (the default of matrix_norm), not ord=2.",
    "squared": "That is the square of the score: take the norms, not the sums of squares.",
    "elementwise": "That multiplies element by element: the score needs the matrix product reader @ writer.",
    "other": "the score is the Frobenius norm of reader @ writer over the product of their Frobenius norms.",
}


@checker
def check_composition_score(fn: Callable[[torch.Tensor, torch.Tensor], float]) -> str:
    """fn(reader (d, d), writer (d, d)) -> ||reader @ writer||_F / (||reader||_F ||writer||_F), written by hand."""
    g = _seeded(41)
    cases = []
    for d, rank in ((8, 8), (16, 4), (5, 2)):  # circuits of low rank, as a head's are
        reader = torch.randn(d, rank, generator=g) @ torch.randn(rank, d, generator=g)
        writer = torch.randn(d, rank, generator=g) @ torch.randn(rank, d, generator=g) * 3.0
        cases.append((f"a reader and a writer of shape {(d, d)} and rank {rank}", reader, writer))
    u, v, w = (torch.randn(6, 1, generator=g) for _ in range(3))
    cases.append(("a reader that reads exactly the one direction the writer writes", u @ v.T, v @ w.T))
    n = torch.linalg.matrix_norm
    for case, reader, writer in cases:
        r, w = reader.double(), writer.double()
        want = float(inside.composition_score(r, w))
        got = _by_hand(inside.composition_score, fn, reader.clone(), writer.clone(), case=case)
        value = measure("the score", got)[0]
        if abs(value - want) <= 1e-4 * max(1.0, abs(want)):
            continue
        mistakes = [
            (float(inside.composition_score(w, r)), "reversed"),
            (float(n(r @ w)), "unnormalised"),
            (float(n(r @ w) / n(r)), "no-writer-norm"),
            (float(n(r @ w) / n(w)), "no-reader-norm"),
            (float(n(r @ w, ord=2) / (n(r, ord=2) * n(w, ord=2))), "spectral-norm"),
            (want**2, "squared"),
            (float((r * w).sum() / (n(r) * n(w))), "elementwise"),
        ]
        return _named(value, want, mistakes, _COMPOSITION_HINTS, f"On {case} expected {want:.4f}, got {value:.4f}: ")
    return CORRECT
