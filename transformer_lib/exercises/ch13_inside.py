"""Checkers for the exercises of the chapter "Inside the trained models"."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import inside, surgery
from ._common import CORRECT, _measured, _seeded, attempt
from ._match import first_mistake, same, tensor_problem

__all__ = [
    "check_head_contributions",
    "check_induction_scores",
    "check_find_induction_heads",
    "check_composition_score",
]


# ---- Exercise 1: what each head writes into the residual stream ---------------------------------


def _contribution_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, heads (B, T, h, d_k), out_proj.weight (d, h * d_k)): heads, widths and lengths all differ."""
    g = _seeded(13)
    cases = []
    for B, T, h, d_k, d in ((2, 5, 4, 3, 12), (1, 7, 2, 5, 10), (3, 4, 3, 4, 10)):  # the last: d_model != h * d_k
        cases.append(
            (
                f"heads of shape {(B, T, h, d_k)} and out_proj.weight of shape {(d, h * d_k)}",
                torch.randn(B, T, h, d_k, generator=g),
                torch.randn(d, h * d_k, generator=g),
            )
        )
    return cases


def _contribution_mistakes(heads: torch.Tensor, weight: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    B, T, h, d_k = heads.shape
    d = weight.shape[0]
    mistakes = [
        (
            torch.einsum("bthk,hkd->bthd", heads, weight.reshape(h, d_k, d)),
            "You split out_proj.weight's rows: it has shape (d_model, h * d_k), and head i reads its "
            "columns i * d_k to (i + 1) * d_k. Split the columns: weight.view(d_model, h, d_k).",
        ),
        (
            torch.einsum("bthk,dkh->bthd", heads, weight.view(d, d_k, h)),
            "Head i owns d_k neighbouring columns of out_proj.weight (i * d_k to (i + 1) * d_k), not every "
            "h-th column: weight.view(d_model, h, d_k), head index first.",
        ),
        (
            torch.einsum("bthk,dhk->bthd", heads, weight.view(d, h, d_k)) / h,
            "The heads' contributions add up to the attention output; they are not averaged: do not divide by h.",
        ),
        (
            torch.einsum("bthk,dk->bthd", heads, weight[:, :d_k]),
            "Every head went through head 0's columns of out_proj.weight: head i uses its own d_k columns.",
        ),
        (
            torch.einsum("bthk,dhk->bthd", heads, weight.view(d, h, d_k)).cumsum(2),
            "Each head's contribution is its own, not a running sum over the heads before it.",
        ),
    ]
    return mistakes


def check_head_contributions(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(heads (B, T, h, d_k), out_proj.weight (d_model, h * d_k)) -> each head's contribution (B, T, h, d_model).

    Head i's output times out_proj.weight's columns i * d_k .. (i + 1) * d_k; the h contributions sum
    to out_proj's output without its bias. Written by hand: tl.inside.head_contributions refuses to run.
    """
    for case, heads, weight in _contribution_cases():
        h, d_k = heads.shape[2:]
        want = torch.einsum("bthk,dhk->bthd", heads.double(), weight.double().view(-1, h, d_k))
        got, hint = attempt(
            fn,
            heads.clone(),
            weight.clone(),
            case=case,
            forbidden=(inside.head_contributions,),
            names="tl.inside.head_contributions",
        )
        if hint:
            return hint
        if isinstance(got, torch.Tensor) and got.shape == heads.shape[:2] + (weight.shape[0],):
            summed = want.sum(2)
            if same(got, summed):
                return f"On {case} you returned the heads' sum, the attention output: keep one contribution per head."
        problem = tensor_problem(got, want, case)
        if problem:
            return problem
        if same(got, want):
            continue
        found = first_mistake(got, want, _contribution_mistakes(heads.double(), weight.double()))
        if found:
            return found
        return (
            f"Not the heads' contributions on {case}: head i's output (d_k numbers) times out_proj.weight's "
            "columns i * d_k to (i + 1) * d_k gives d_model numbers."
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
    allowed = torch.ones(T, T, dtype=torch.bool).tril(0 if include_self else -1)
    if shift == 0:
        allowed = torch.ones(T, T, dtype=torch.bool).tril(-1)  # the earlier copies, not t itself
    return out & allowed


def _score(pattern: torch.Tensor, targets: torch.Tensor, per_sequence: bool = False, reduce: str = "sum"):
    mass = pattern * targets[:, None].to(pattern)  # (B, h, T, T)
    mass = mass.sum(-1) if reduce == "sum" else mass.amax(-1)  # (B, h, T)
    counted = targets.any(-1)  # (B, T)
    if per_sequence:
        rows = [mass[b][:, counted[b]].mean(-1) for b in range(mass.shape[0]) if counted[b].any()]
        return torch.stack(rows).mean(0)  # (h,)
    return mass.permute(1, 0, 2)[:, counted].mean(-1)  # (h,)


def _score_mistakes(pattern: torch.Tensor, tokens: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    right = _targets(tokens)
    everywhere = (pattern * right[:, None].to(pattern)).sum(-1).mean((0, 2))  # (h,): over every position
    last = right & (right.flip(-1).cumsum(-1).flip(-1) == 1)  # only the latest target of each query
    T = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T)
    rolled = torch.roll(same, 1, dims=-1) & torch.ones(T, T, dtype=torch.bool).tril()  # wraps key T-1 to key 0
    future = torch.zeros_like(same)
    future[:, :, 1:] = same[:, :, :-1]  # s = j + 1 for every j, later ones included: no s <= t
    mass = pattern * right[:, None].to(pattern)  # (B, h, T, T)
    counted = right.any(-1)  # (B, T)
    per_target = (mass.sum(-1) / right.sum(-1).clamp(min=1)[:, None]).permute(1, 0, 2)[:, counted].mean(-1)
    by_position = torch.stack(
        [mass.sum(-1)[:, :, t][counted[:, t]].mean(0) for t in range(T) if counted[:, t].any()]
    ).mean(0)  # (h,): each position's mean over the batch first, then over positions
    return [
        (
            per_target,
            "Sum the attention over the targets; do not divide it by their number. A head that splits its "
            "attention over two earlier copies still attends fully to what followed them.",
        ),
        (
            _score(pattern, rolled),
            "Your shift wraps around (torch.roll?): key 0 follows nothing, so it is never a target. Shift "
            "without wrapping: targets[..., 1:] = same[..., :-1].",
        ),
        (
            by_position,
            "Average over the counted positions of the whole batch at once, not position by position: "
            "positions counted in fewer sequences would weigh as much as the others.",
        ),
        (
            _score(pattern, _targets(tokens, shift=0)),
            "That is the attention on the earlier copy of the token itself (a duplicate-token head). An "
            "induction head attends to the token just after the earlier copy: key s where tokens[s - 1] == tokens[t].",
        ),
        (
            _score(pattern.transpose(-1, -2), right),
            "pattern[b, h, t, s] is how much query t attends to key s: rows are queries, columns keys. "
            "Your answer reads it transposed.",
        ),
        (
            everywhere,
            "Average only over the positions whose token appeared before: the others have no key to find, "
            "and counting them as 0 drags every score down.",
        ),
        (
            _score(pattern, future),
            "Only keys up to t count (s <= t): a position whose token appears again only later has no target "
            "yet, and must not be counted.",
        ),
        (
            _score(pattern, right, per_sequence=True),
            "Average over every counted position of the batch together, not sequence by sequence: "
            "sequences with more repeats count for more.",
        ),
        (
            _score(pattern, right, reduce="max"),
            "Sum the attention over all the keys that follow an earlier copy; the largest one alone is not the score.",
        ),
        (
            _score(pattern, last),
            "Sum over every earlier copy of the token, not only the latest one.",
        ),
        (
            _score(pattern, _targets(tokens, include_self=False)),
            "Keys up to and including t count: when tokens[t - 1] == tokens[t], key t itself follows an earlier copy.",
        ),
        (
            _score(pattern, _targets(tokens, shift=2)),
            "Off by one: the key to look at is s = j + 1, just after the earlier copy j, not j + 2.",
        ),
    ]


def check_induction_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(pattern (B, h, T, T), tokens (B, T)) -> each head's induction score (h,).

    At query t, the keys s with 1 <= s <= t and tokens[s - 1] == tokens[t]; the attention on them,
    summed, averaged over the batch's positions that have at least one. Written by hand:
    tl.inside.induction_scores refuses to run.
    """
    for case, pattern, tokens in _score_cases():
        want = _score(pattern.double(), _targets(tokens))
        got, hint = attempt(
            fn,
            pattern.clone(),
            tokens.clone(),
            case=case,
            forbidden=(inside.induction_scores,),
            names="tl.inside.induction_scores",
        )
        if hint:
            return hint
        problem = tensor_problem(got, want, case)
        if problem:
            return problem
        if same(got, want):
            continue
        found = first_mistake(got, want, _score_mistakes(pattern.double(), tokens))
        if found:
            return found
        return (
            f"Not the induction scores on {case}: for each query t, sum the attention on the keys s <= t with "
            "tokens[s - 1] == tokens[t], then average over the positions that have such a key."
        )
    return CORRECT


# ---- Exercise 3 (experiment): find the induction heads of a model ---------------------------------


def _weakened(model: torch.nn.Module, tokens: torch.Tensor) -> torch.nn.Module | None:
    """A copy whose strongest induction head is blurred (its queries shrunk) until it scores between 0.3 and
    0.48: below the threshold, but above half the best score. None if no shrinking lands there."""
    import copy

    best, layer, head = 0.0, 0, 0
    _, cache = inside.run_with_cache(model, tokens)
    for i in range(len(model.decoder.layers)):
        scores = inside.induction_scores(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens)
        if scores.max() > best:
            best, layer, head = float(scores.max()), i, int(scores.argmax())
    for factor in (0.6, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1):
        twin = copy.deepcopy(model).eval()
        mha = twin.decoder.layers[layer].self_attn
        with torch.no_grad():
            mha.q_proj.weight[head * mha.d_k : (head + 1) * mha.d_k] *= factor
            if mha.q_proj.bias is not None:
                mha.q_proj.bias[head * mha.d_k : (head + 1) * mha.d_k] *= factor
        _, cache = inside.run_with_cache(twin, tokens)
        score = float(inside.induction_scores(cache[f"decoder.layers.{layer}.self_attn.pattern"], tokens)[head])
        if 0.3 < score < 0.48:
            return twin
    return None


def _induction_heads(model: torch.nn.Module, tokens: torch.Tensor, threshold: float = 0.5) -> list[tuple[int, int]]:
    _, cache = inside.run_with_cache(model, tokens)
    found = []
    for i in range(len(model.decoder.layers)):
        scores = inside.induction_scores(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens)
        found += [(i, h) for h in range(len(scores)) if scores[h] > threshold]
    return found


def _previous_heads(model: torch.nn.Module, tokens: torch.Tensor, threshold: float = 0.5) -> list[tuple[int, int]]:
    _, cache = inside.run_with_cache(model, tokens)
    found = []
    for i in range(len(model.decoder.layers)):
        scores = inside.head_scores(cache[f"decoder.layers.{i}.self_attn.pattern"], 1)
        found += [(i, h) for h in range(len(scores)) if scores[h] > threshold]
    return found


def _as_pairs(got) -> list[tuple[int, int]] | None:
    try:
        pairs = [(int(a), int(b)) for a, b in got]
    except (TypeError, ValueError):
        return None
    return sorted(pairs)


def _hooks_left(model: torch.nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


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
    vocab = cfg.vocab_size
    with torch.random.fork_rng():  # the untrained model's weights from a seed of the checker's, not the caller's
        torch.manual_seed(31)
        untrained = DecoderOnlyLM(cfg).to(device).eval()
    unpermuted = None
    cases = []
    for k, n in enumerate((12, 20)):
        block = torch.randint(1, vocab, (16, n), generator=g)
        tokens = torch.cat([block, block], 1).to(device)  # (16, 2n)
        orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        while any(order == sorted(order) for order in orders):  # every layer really renumbered
            orders = [torch.randperm(h, generator=g).tolist() for _ in model.decoder.layers]
        renumbered = surgery.permute_heads(model, orders)
        cases.append((f"the model with its heads renumbered ({k + 1}) on blocks of {n} tokens", renumbered, tokens))
        if k == 0:
            unpermuted = _induction_heads(model, tokens)
    cases.append(("an untrained model of the same shape on blocks of 12 tokens", untrained, cases[0][2]))
    if model.config.attention_only:
        deeper = surgery.prepend_layer(model, seed=32)
        cases.append(("the model with one more layer in front, which writes nothing", deeper, cases[1][2]))
    weak = _weakened(cases[0][1], cases[0][2])
    if weak is not None:
        cases.append(("the model with one induction head blurred to a score just under 0.5", weak, cases[0][2]))
    for case, subject, tokens in cases:
        want = sorted(_induction_heads(subject, tokens))
        before = [p.detach().clone() for p in subject.parameters()]
        seen = []  # what the model was run on: the checker's tokens, not data of the learner's own
        watch = subject.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[0]))
        try:
            got, hint = attempt(fn, subject, tokens.clone(), case=case)
        finally:
            watch.remove()
        if _hooks_left(subject):
            return (
                "Your experiment left hooks on the model: use tl.inside.capture or run_with_cache, which remove them."
            )
        if any(not torch.equal(a, b) for a, b in zip(before, subject.parameters())):
            return "Your experiment changed the model's weights: measure without changing it."
        if hint:
            return hint
        pairs = _as_pairs(got)
        if pairs is None:
            return f"Return a list of (layer, head) pairs, got {type(got).__name__}: {got!r}"[:300]
        if unpermuted is not None and pairs == sorted(unpermuted) and want != sorted(unpermuted):
            return (
                f"On {case}: {pairs} are the heads of the model as the chapter numbered them. The checker renumbered "
                "the heads, so the answer must come from measuring the model you are given."
            )
        used = any(
            isinstance(a, torch.Tensor) and a.shape[0] == tokens.shape[0] and torch.equal(a, tokens[:, : a.shape[1]])
            for a in seen
        )
        if not used:
            return (
                f"On {case}: your function did not run the model on the tokens it was given. Measure on `tokens`: "
                "the checker passes blocks of its own."
            )
        if pairs == want:
            continue
        if pairs == sorted((a - 1, b - 1) for a, b in want) or pairs == sorted((a + 1, b + 1) for a, b in want):
            return f"On {case}: count layers and heads from 0, as model.decoder.layers and the hook names do."
        if not pairs and want:
            return (
                f"On {case}: you found no head, but this model has induction heads {want}. Score every layer's "
                "pattern with tl.inside.induction_scores (not the previous-token score) and keep those above 0.5."
            )
        previous = sorted(_previous_heads(subject, tokens))
        if pairs and pairs == previous:
            return (
                f"On {case}: those are the heads that attend to the previous token (offset 1). An induction head "
                "attends to the token after the earlier copy of the current one: use tl.inside.induction_scores."
            )
        every = [(i, j) for i in range(len(subject.decoder.layers)) for j in range(h)]
        if pairs == sorted(set(every) - set(want)):
            return f"On {case}: that is every head except the induction heads: keep the scores above 0.5."
        if set(want) < set(pairs):
            return (
                f"On {case}: you also kept {sorted(set(pairs) - set(want))}, whose scores are below 0.5. Keep "
                "exactly the heads whose induction score is above 0.5, not a threshold relative to the best head."
            )
        for i in range(len(subject.decoder.layers)):
            if pairs and pairs == [p for p in want if p[0] == i] and pairs != want:
                return f"On {case}: you looked at layer {i} only; score the heads of every layer."
        return (
            f"On {case}: expected the heads {want}, got {pairs}. Capture every layer's attention pattern on the "
            "tokens you are given, score each head with tl.inside.induction_scores, and keep those above 0.5."
        )
    return CORRECT


# ---- Exercise 4: the composition score ------------------------------------------------------------


def _composition(reader: torch.Tensor, writer: torch.Tensor, order: str = "fro") -> float:
    r, w = reader.double(), writer.double()
    n = torch.linalg.matrix_norm
    return float(n(r @ w, ord=order) / (n(r, ord=order) * n(w, ord=order)))


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
    for case, reader, writer in cases:
        got, hint = attempt(
            fn,
            reader.clone(),
            writer.clone(),
            case=case,
            forbidden=(inside.composition_score,),
            names="tl.inside.composition_score",
        )
        if hint:
            return hint
        measured = _measured("the score", got)
        if isinstance(measured, str):
            return measured
        value, want = measured[0], _composition(reader, writer)
        if abs(value - want) <= 1e-4 * max(1.0, abs(want)):
            continue
        r, w = reader.double(), writer.double()
        n = torch.linalg.matrix_norm
        mistakes = [
            (_composition(writer, reader), "The product is reader @ writer: the reader reads what the writer writes."),
            (float(n(r @ w)), "Divide by the norms of the reader and of the writer: the score is a ratio."),
            (float(n(r @ w) / n(r)), "Divide by both norms, the writer's too."),
            (float(n(r @ w) / n(w)), "Divide by both norms, the reader's too."),
            (_composition(reader, writer, order=2), "Use the Frobenius norm (the default of matrix_norm), not ord=2."),
            (want**2, "That is the square of the score: take the norms, not the sums of squares."),
            (
                float((r * w).sum() / (n(r) * n(w))),
                "That multiplies the matrices element by element: the score needs the matrix product, reader @ writer.",
            ),
        ]
        found = first_mistake(value, want, mistakes)
        if found:
            return f"On {case}: {found}"
        return (
            f"On {case} expected {want:.4f}, got {value:.4f}: the Frobenius norm of reader @ writer over the "
            "product of their Frobenius norms."
        )
    return CORRECT
