"""Checkers for the exercises of the chapter "Inside the trained models"."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from .. import inside, surgery
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, run
from ._match import expect_tensor, same, spot

__all__ = [
    "check_head_contributions",
    "check_induction_scores",
    "check_find_induction_heads",
    "check_composition_score",
]


def _hinted(mistakes: list[tuple], hints: dict[str, str], prefix: str = "") -> list[tuple]:
    """(wrong result, id) pairs as `spot` reads them: (wrong result, id, the id's hint after `prefix`)."""
    return [(wrong, mistake, prefix + hints[mistake]) for wrong, mistake in mistakes]


def _by_hand(library: Callable, fn: Callable, *args, case: str):
    """fn(*args) run on `case`, with tl.inside's `library` refused: the exercise writes it by hand."""
    return run(fn, *args, case=case, forbidden=(library,), names=f"tl.inside.{library.__name__}")


# ---- Exercise 1: what each head writes into the residual stream ---------------------------------


def _contribution_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, heads (B, T, h, d_k), out_proj.weight (d, h * d_k)): heads, widths and lengths all differ."""
    g = _seeded(13)
    return [
        (
            f"heads of shape {(B, T, h, d_k)} and out_proj.weight of shape {(d, h * d_k)}",
            torch.randn(B, T, h, d_k, generator=g),
            torch.randn(d, h * d_k, generator=g),
        )
        for B, T, h, d_k, d in ((2, 5, 4, 3, 12), (1, 7, 2, 5, 10), (3, 4, 3, 4, 10))  # the last: d_model != h * d_k
    ]


_CONTRIBUTION_HINTS = {
    "split-rows": "You split out_proj.weight's rows: it has shape (d_model, h * d_k), and head i reads its "
    "columns i * d_k to (i + 1) * d_k. Split the columns: weight.view(d_model, h, d_k).",
    "strided-columns": "Head i owns d_k neighbouring columns of out_proj.weight (i * d_k to (i + 1) * d_k), not every "
    "h-th column: weight.view(d_model, h, d_k), head index first.",
    "averaged": "The heads' contributions add up to the attention output; they are not averaged: do not divide by h.",
    "head-0-columns": "Every head went through head 0's columns of out_proj.weight: head i uses its own d_k columns.",
    "running-sum": "Each head's contribution is its own, not a running sum over the heads before it.",
}


def _contribution_mistakes(heads: torch.Tensor, weight: torch.Tensor) -> list[tuple[torch.Tensor, str, str]]:
    h, d_k = heads.shape[2:]
    d = weight.shape[0]
    right = torch.einsum("bthk,dhk->bthd", heads, weight.view(d, h, d_k))
    mistakes = [
        (torch.einsum("bthk,hkd->bthd", heads, weight.reshape(h, d_k, d)), "split-rows"),
        (torch.einsum("bthk,dkh->bthd", heads, weight.view(d, d_k, h)), "strided-columns"),
        (right / h, "averaged"),
        (torch.einsum("bthk,dk->bthd", heads, weight[:, :d_k]), "head-0-columns"),
        (right.cumsum(2), "running-sum"),
    ]
    return _hinted(mistakes, _CONTRIBUTION_HINTS)


@checker
def check_head_contributions(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(heads (B, T, h, d_k), out_proj.weight (d_model, h * d_k)) -> each head's contribution (B, T, h, d_model).

    Head i's output times out_proj.weight's columns i * d_k .. (i + 1) * d_k; the h contributions sum
    to out_proj's output without its bias. Written by hand: tl.inside.head_contributions refuses to run.
    """
    for case, heads, weight in _contribution_cases():
        h, d_k = heads.shape[2:]
        want = torch.einsum("bthk,dhk->bthd", heads.double(), weight.double().view(-1, h, d_k))
        got = _by_hand(inside.head_contributions, fn, heads.clone(), weight.clone(), case=case)
        if same(got, want.sum(2)):
            return no(
                "summed",
                f"On {case} you returned the heads' sum, the attention output: keep one contribution per head.",
            )
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        spot(got, want, _contribution_mistakes(heads.double(), weight.double()))
        return no(
            "other",
            f"Not the heads' contributions on {case}: head i's output (d_k numbers) times out_proj.weight's "
            "columns i * d_k to (i + 1) * d_k gives d_model numbers.",
        )
    return CORRECT


# ---- Exercise 2: the induction score on any text ------------------------------------------------


def _causal_pattern(B: int, h: int, T: int, g: torch.Generator) -> torch.Tensor:
    """Random causal attention weights (B, h, T, T): each row sums to 1 over the keys up to the query."""
    scores = torch.randn(B, h, T, T, generator=g) * 2
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1)


def _score_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, pattern (B, h, T, T), tokens (B, T)): repeated blocks, text with scattered repeats, and
    sequences with different numbers of repeated positions in one batch."""
    g = _seeded(21)
    block = torch.randint(0, 50, (2, 6), generator=g)
    repeated = torch.cat([block, block], 1)  # (2, 12)
    text = torch.randint(0, 5, (3, 10), generator=g)  # a small vocabulary: many repeats, some adjacent
    mixed = torch.stack([torch.tensor([1, 2, 3, 4, 5, 6, 7, 1, 2]), torch.tensor([1, 1, 2, 1, 2, 1, 2, 3, 3])])
    return [
        ("a random block of 6 tokens shown twice (B=2, h=3, T=12)", _causal_pattern(2, 3, 12, g), repeated),
        ("text from 5 tokens with many repeats (B=3, h=2, T=10)", _causal_pattern(3, 2, 10, g), text),
        ("two sequences with 2 and 7 repeated positions (B=2, h=4, T=9)", _causal_pattern(2, 4, 9, g), mixed),
    ]


def _targets(tokens: torch.Tensor, shift: int = 1, include_self: bool = True) -> torch.Tensor:
    """[b, t, s]: key s is `shift` after an earlier (or the same, at shift 0) copy of tokens[t]; s <= t."""
    T = tokens.shape[1]
    same_token = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): tokens[t] == tokens[j]
    out = torch.zeros_like(same_token)
    out[:, :, shift:] = same_token[:, :, : T - shift]
    allowed = torch.ones(T, T, dtype=torch.bool).tril(0 if include_self and shift else -1)  # shift 0: earlier copies
    return out & allowed


def _score(pattern: torch.Tensor, targets: torch.Tensor, per_sequence: bool = False, reduce: str = "sum"):
    mass = pattern * targets[:, None].to(pattern)  # (B, h, T, T)
    mass = mass.sum(-1) if reduce == "sum" else mass.amax(-1)  # (B, h, T)
    counted = targets.any(-1)  # (B, T)
    if per_sequence:
        rows = [mass[b][:, counted[b]].mean(-1) for b in range(mass.shape[0]) if counted[b].any()]
        return torch.stack(rows).mean(0)  # (h,)
    return mass.permute(1, 0, 2)[:, counted].mean(-1)  # (h,)


_SCORE_HINTS = {
    "divided-by-targets": "Sum the attention over the targets; do not divide it by their number. A head that splits "
    "its attention over two earlier copies still attends fully to what followed them.",
    "wrapped-shift": "Your shift wraps around (torch.roll?): key 0 follows nothing, so it is never a target. Shift "
    "without wrapping: targets[..., 1:] = same[..., :-1].",
    "position-by-position": "Average over the counted positions of the whole batch at once, not position by position: "
    "positions counted in fewer sequences would weigh as much as the others.",
    "duplicate-token": "That is the attention on the earlier copy of the token itself (a duplicate-token head). An "
    "induction head attends to the token just after the earlier copy: key s where tokens[s - 1] == tokens[t].",
    "transposed": "pattern[b, h, t, s] is how much query t attends to key s: rows are queries, columns keys. "
    "Your answer reads it transposed.",
    "all-positions": "Average only over the positions whose token appeared before: the others have no key to find, "
    "and counting them as 0 drags every score down.",
    "future-keys": "Only keys up to t count (s <= t): a position whose token appears again only later has no target "
    "yet, and must not be counted.",
    "sequence-by-sequence": "Average over every counted position of the batch together, not sequence by sequence: "
    "sequences with more repeats count for more.",
    "max-not-sum": "Sum the attention over all the keys that follow an earlier copy; the largest one alone is not the "
    "score.",
    "latest-copy": "Sum over every earlier copy of the token, not only the latest one.",
    "excludes-self": "Keys up to and including t count: when tokens[t - 1] == tokens[t], key t itself follows an "
    "earlier copy.",
    "off-by-one": "Off by one: the key to look at is s = j + 1, just after the earlier copy j, not j + 2.",
}


def _score_mistakes(pattern: torch.Tensor, tokens: torch.Tensor) -> list[tuple[torch.Tensor, str, str]]:
    right = _targets(tokens)
    T = tokens.shape[1]
    same_token = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T)
    rolled = torch.roll(same_token, 1, dims=-1) & torch.ones(T, T, dtype=torch.bool).tril()  # wraps key T-1 to 0
    future = torch.zeros_like(same_token)
    future[:, :, 1:] = same_token[:, :, :-1]  # s = j + 1 for every j, later ones included: no s <= t
    last = right & (right.flip(-1).cumsum(-1).flip(-1) == 1)  # only the latest target of each query
    mass = (pattern * right[:, None].to(pattern)).sum(-1)  # (B, h, T)
    counted = right.any(-1)  # (B, T)
    per_target = (mass / right.sum(-1).clamp(min=1)[:, None]).permute(1, 0, 2)[:, counted].mean(-1)
    by_position = [mass[:, :, t][counted[:, t]].mean(0) for t in range(T) if counted[:, t].any()]  # batch means
    mistakes = [
        (per_target, "divided-by-targets"),
        (_score(pattern, rolled), "wrapped-shift"),
        (torch.stack(by_position).mean(0), "position-by-position"),  # then the mean over positions
        (_score(pattern, _targets(tokens, shift=0)), "duplicate-token"),
        (inside.induction_scores(pattern.transpose(-1, -2), tokens), "transposed"),
        (mass.mean((0, 2)), "all-positions"),
        (_score(pattern, future), "future-keys"),
        (_score(pattern, right, per_sequence=True), "sequence-by-sequence"),
        (_score(pattern, right, reduce="max"), "max-not-sum"),
        (_score(pattern, last), "latest-copy"),
        (_score(pattern, _targets(tokens, include_self=False)), "excludes-self"),
        (_score(pattern, _targets(tokens, shift=2)), "off-by-one"),
    ]
    return _hinted(mistakes, _SCORE_HINTS)


@checker
def check_induction_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(pattern (B, h, T, T), tokens (B, T)) -> each head's induction score (h,).

    At query t, the keys s with 1 <= s <= t and tokens[s - 1] == tokens[t]; the attention on them,
    summed, averaged over the batch's positions that have at least one. Written by hand:
    tl.inside.induction_scores refuses to run.
    """
    for case, pattern, tokens in _score_cases():
        want = inside.induction_scores(pattern.double(), tokens)
        got = _by_hand(inside.induction_scores, fn, pattern.clone(), tokens.clone(), case=case)
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        spot(got, want, _score_mistakes(pattern.double(), tokens))
        return no(
            "other",
            f"Not the induction scores on {case}: for each query t, sum the attention on the keys s <= t with "
            "tokens[s - 1] == tokens[t], then average over the positions that have such a key.",
        )
    return CORRECT


# ---- Exercise 3 (experiment): find the induction heads of a model ---------------------------------


def _layer_scores(model: torch.nn.Module, tokens: torch.Tensor, score: Callable) -> list[torch.Tensor]:
    """score(pattern, tokens) (h,) for every layer's attention pattern of `model` on `tokens`."""
    _, cache = inside.run_with_cache(model, tokens)
    return [score(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens) for i in range(len(model.decoder.layers))]


def _heads_above(model: torch.nn.Module, tokens: torch.Tensor, score: Callable) -> list[tuple[int, int]]:
    """The (layer, head) pairs, sorted, whose score is above 0.5."""
    scores = _layer_scores(model, tokens, score)
    return sorted((i, h) for i, s in enumerate(scores) for h in range(len(s)) if s[h] > 0.5)


def _weakened(model: torch.nn.Module, tokens: torch.Tensor) -> torch.nn.Module | None:
    """A copy whose strongest induction head is blurred (its queries shrunk) until it scores between 0.3 and
    0.48: below the threshold, but above half the best score. None if no shrinking lands there."""
    scores = _layer_scores(model, tokens, inside.induction_scores)
    layer = max(range(len(scores)), key=lambda i: float(scores[i].max()))
    head = int(scores[layer].argmax())
    for factor in (0.6, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1):
        twin = copy.deepcopy(model).eval()
        mha = twin.decoder.layers[layer].self_attn
        rows = slice(head * mha.d_k, (head + 1) * mha.d_k)
        with torch.no_grad():
            mha.q_proj.weight[rows] *= factor
            if mha.q_proj.bias is not None:
                mha.q_proj.bias[rows] *= factor
        if 0.3 < float(_layer_scores(twin, tokens, inside.induction_scores)[layer][head]) < 0.48:
            return twin
    return None


def _as_pairs(got) -> list[tuple[int, int]] | None:
    try:
        pairs = [(int(a), int(b)) for a, b in got]
    except (TypeError, ValueError):
        return None
    return sorted(pairs)


def _left_alone(model: torch.nn.Module, before: list[torch.Tensor]) -> None:
    """Raise the verdict for an experiment that left hooks on the model or changed its weights."""
    if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
        raise Wrong(
            "hooks-left",
            "Your experiment left hooks on the model: use tl.inside.capture or run_with_cache, which remove them.",
        )
    if any(not torch.equal(a, b) for a, b in zip(before, model.parameters())):
        raise Wrong("changed-weights", "Your experiment changed the model's weights: measure without changing it.")


@checker
def check_find_induction_heads(fn: Callable, model: torch.nn.Module) -> str:
    """Experiment: fn(model, tokens (B, 2n)) -> the (layer, head) pairs, 0-based, whose induction score on
    `tokens` is above 0.5.

    The checker runs the learner's measurement itself, on copies of `model` whose heads it has
    renumbered in every layer (the same model, heads in another order), on an untrained model of the
    same shape, on a copy with one more layer in front (every head one layer down), on a copy with
    one induction head blurred to just under 0.5, and on blocks of lengths and seeds of its own. It
    compares with its own measurement. An answer typed from the chapter's output cannot pass.
    """
    from ..models import DecoderOnlyLM

    model = model.eval()
    device = next(model.parameters()).device
    cfg = model.config
    h = cfg.num_heads
    g = _seeded(31)
    with torch.random.fork_rng():  # the untrained model's weights from a seed of the checker's, not the caller's
        torch.manual_seed(31)
        untrained = DecoderOnlyLM(cfg).to(device).eval()
    cases = []
    for k, n in enumerate((12, 20)):
        block = torch.randint(1, cfg.vocab_size, (16, n), generator=g)
        tokens = torch.cat([block, block], 1).to(device)  # (16, 2n)
        orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        while any(order == sorted(order) for order in orders):  # every layer really renumbered
            orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        renumbered = surgery.permute_heads(model, orders)
        cases.append((f"the model with its heads renumbered ({k + 1}) on blocks of {n} tokens", renumbered, tokens))
    unpermuted = _heads_above(model, cases[0][2], inside.induction_scores)
    cases.append(("an untrained model of the same shape on blocks of 12 tokens", untrained, cases[0][2]))
    if cfg.attention_only:
        deeper = surgery.prepend_layer(model, seed=32)
        cases.append(("the model with one more layer in front, which writes nothing", deeper, cases[1][2]))
    weak = _weakened(cases[0][1], cases[0][2])
    if weak is not None:
        cases.append(("the model with one induction head blurred to a score just under 0.5", weak, cases[0][2]))
    for case, subject, tokens in cases:
        want = _heads_above(subject, tokens, inside.induction_scores)
        before = [p.detach().clone() for p in subject.parameters()]
        seen = []  # what the model was run on: the checker's tokens, not data of the learner's own
        watch = subject.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[0]))
        try:
            got = run(fn, subject, tokens.clone(), case=case)
        finally:
            watch.remove()
            _left_alone(subject, before)  # hooks left or weights changed: named before any other verdict
        pairs = _as_pairs(got)
        if pairs is None:
            return no("not-pairs", f"Return a list of (layer, head) pairs, got {type(got).__name__}: {got!r}"[:300])
        if pairs == unpermuted and want != unpermuted:
            return no(
                "typed-answer",
                f"On {case}: {pairs} are the heads of the model as the chapter numbered them. The checker renumbered "
                "the heads, so the answer must come from measuring the model you are given.",
            )
        if not any(
            isinstance(a, torch.Tensor) and a.shape[0] == tokens.shape[0] and torch.equal(a, tokens[:, : a.shape[1]])
            for a in seen
        ):
            return no(
                "other-tokens",
                f"On {case}: your function did not run the model on the tokens it was given. Measure on `tokens`: "
                "the checker passes blocks of its own.",
            )
        if pairs == want:
            continue
        if pairs in (sorted((a - 1, b - 1) for a, b in want), sorted((a + 1, b + 1) for a, b in want)):
            return no(
                "one-based", f"On {case}: count layers and heads from 0, as model.decoder.layers and the hook names do."
            )
        if not pairs and want:
            return no(
                "none-found",
                f"On {case}: you found no head, but this model has induction heads {want}. Score every layer's "
                "pattern with tl.inside.induction_scores (not the previous-token score) and keep those above 0.5.",
            )
        if pairs and pairs == _heads_above(subject, tokens, lambda p, _: inside.head_scores(p, 1)):
            return no(
                "previous-token",
                f"On {case}: those are the heads that attend to the previous token (offset 1). An induction head "
                "attends to the token after the earlier copy of the current one: use tl.inside.induction_scores.",
            )
        every = {(i, j) for i in range(len(subject.decoder.layers)) for j in range(h)}
        if pairs == sorted(every - set(want)):
            return no(
                "inverted", f"On {case}: that is every head except the induction heads: keep the scores above 0.5."
            )
        if set(want) < set(pairs):
            return no(
                "relative-threshold",
                f"On {case}: you also kept {sorted(set(pairs) - set(want))}, whose scores are below 0.5. Keep "
                "exactly the heads whose induction score is above 0.5, not a threshold relative to the best head.",
            )
        if pairs and pairs != want and pairs == [p for p in want if p[0] == pairs[0][0]]:
            return no(
                "one-layer", f"On {case}: you looked at layer {pairs[0][0]} only; score the heads of every layer."
            )
        return no(
            "other",
            f"On {case}: expected the heads {want}, got {pairs}. Capture every layer's attention pattern on the "
            "tokens you are given, score each head with tl.inside.induction_scores, and keep those above 0.5.",
        )
    return CORRECT


# ---- Exercise 4: the composition score ------------------------------------------------------------

_COMPOSITION_HINTS = {
    "reversed": "The product is reader @ writer: the reader reads what the writer writes.",
    "unnormalised": "Divide by the norms of the reader and of the writer: the score is a ratio.",
    "no-writer-norm": "Divide by both norms, the writer's too.",
    "no-reader-norm": "Divide by both norms, the reader's too.",
    "spectral-norm": "Use the Frobenius norm (the default of matrix_norm), not ord=2.",
    "squared": "That is the square of the score: take the norms, not the sums of squares.",
    "elementwise": "That multiplies the matrices element by element: the score needs the matrix product, "
    "reader @ writer.",
}


@checker
def check_composition_score(fn: Callable[[torch.Tensor, torch.Tensor], float]) -> str:
    """fn(reader (d, d), writer (d, d)) -> ||reader @ writer||_F / (||reader||_F ||writer||_F), a number.

    Written by hand: tl.inside.composition_score refuses to run. The cases have several widths,
    circuits of low rank (as a head's are), a pair where the reader reads exactly what the writer
    writes, and matrices whose products in the two orders differ.
    """
    g = _seeded(41)
    cases = []
    for d, rank in ((8, 8), (16, 4), (5, 2)):
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
        spot(value, want, _hinted(mistakes, _COMPOSITION_HINTS, prefix=f"On {case}: "))
        return no(
            "other",
            f"On {case} expected {want:.4f}, got {value:.4f}: the Frobenius norm of reader @ writer over the "
            "product of their Frobenius norms.",
        )
    return CORRECT
