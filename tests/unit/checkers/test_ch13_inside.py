"""Mutation suite for the checkers of chapter 13 (inside the trained models): classic mistakes are named."""

from __future__ import annotations

import pytest
import torch
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex
from transformer_lib import inside


def _notebook_solution(name: str):
    return notebook_solution("13_inside", name, inside=inside)


@pytest.fixture(scope="module")
def induction_model():
    return tl.load_checkpoint("induction")[0]


def test_the_notebook_solutions_pass(induction_model):
    assert ex.check_head_contributions(_notebook_solution("solution_head_contributions")) == ex.CORRECT
    assert ex.check_induction_scores(_notebook_solution("solution_induction_scores")) == ex.CORRECT
    solution = _notebook_solution("solution_find_induction_heads")
    assert ex.check_find_induction_heads(solution, induction_model) == ex.CORRECT


# ---- each head's contribution -------------------------------------------------------------------


def _blocks(w, h, d_k):
    return w.view(w.shape[0], h, d_k)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, w: torch.einsum("bthk,hkd->bthd", x, w.reshape(x.shape[2], x.shape[3], -1)), "split-rows"),
        (lambda x, w: torch.einsum("bthk,dkh->bthd", x, w.view(w.shape[0], x.shape[3], x.shape[2])), "strided-columns"),
        (lambda x, w: torch.einsum("bthk,dhk->bthd", x, _blocks(w, *x.shape[2:])) / x.shape[2], "averaged"),
        (lambda x, w: torch.einsum("bthk,dk->bthd", x, w[:, : x.shape[3]]), "head-0-columns"),
        (lambda x, w: torch.einsum("bthk,dhk->bthd", x, _blocks(w, *x.shape[2:])).cumsum(2), "running-sum"),
        (lambda x, w: x.flatten(-2) @ w.T, "summed"),
        (lambda x, w: torch.einsum("bthk,dhk->bthd", x, _blocks(w, *x.shape[2:])).tolist(), "not-a-tensor"),
        (raising(RuntimeError("shape '[6, 4, 3]' is invalid for input of size 144")), "raised"),
        (lambda x, w: torch.einsum("bthk,dhk->bthd", x, _blocks(w, *x.shape[2:])) * 1.1, "other"),
    ],
)
def test_head_contribution_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_head_contributions(wrong), mistake)


def test_head_contributions_must_be_written_by_hand(induction_model):
    mha = induction_model.decoder.layers[0].self_attn

    def library(heads, weight):
        return inside.head_contributions(induction_model, {"x.heads": heads}, "x.heads")

    rejected_as(ex.check_head_contributions(library), "by-hand")
    assert mha is induction_model.decoder.layers[0].self_attn  # the model is untouched


def test_head_contributions_right_for_one_shape_only_fails():
    def four_heads_only(x, w):
        return torch.einsum("bthk,dhk->bthd", x, w.view(w.shape[0], 4, -1)) if x.shape[2] == 4 else x

    rejected_as(ex.check_head_contributions(four_heads_only), "shape")  # on heads (1, 7, 2, 5)


def test_other_routes_to_the_contributions_pass():
    def by_loop(x, w):
        d_k = x.shape[3]
        return torch.stack([x[:, :, i] @ w[:, i * d_k : (i + 1) * d_k].T for i in range(x.shape[2])], dim=2)

    assert ex.check_head_contributions(by_loop) == ex.CORRECT


# ---- the induction score ------------------------------------------------------------------------


def _targets(tokens, shift=1, up_to_self=True, earlier_copy=False):
    T = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]
    out = torch.zeros_like(same)
    out[:, :, shift:] = same[:, :, : T - shift]
    if earlier_copy:
        return same & torch.ones(T, T, dtype=torch.bool).tril(-1)
    return out & torch.ones(T, T, dtype=torch.bool).tril(0 if up_to_self else -1)


def _pooled(pattern, targets):
    mass = (pattern * targets[:, None]).sum(-1)  # (B, h, T)
    return mass.permute(1, 0, 2)[:, targets.any(-1)].mean(-1)


def _per_sequence(p, t):
    targets = _targets(t)
    mass = (p * targets[:, None]).sum(-1)
    return torch.stack([mass[b][:, targets[b].any(-1)].mean(-1) for b in range(len(t))]).mean(0)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda p, t: _pooled(p, _targets(t, earlier_copy=True)), "duplicate-token"),
        (lambda p, t: _pooled(p.transpose(-1, -2), _targets(t)), "transposed"),
        (lambda p, t: (p * _targets(t)[:, None]).sum(-1).mean((0, 2)), "all-positions"),
        (_per_sequence, "sequence-by-sequence"),
        (lambda p, t: _pooled(p, _targets(t, up_to_self=False)), "excludes-self"),
        (lambda p, t: _pooled(p, _targets(t, shift=2)), "off-by-one"),
        (lambda p, t: _pooled(p, _targets(t)).tolist(), "not-a-tensor"),
        (lambda p, t: _pooled(p, _targets(t))[:2], "shape"),
        (raising(IndexError("index 12 is out of bounds for dimension 2 with size 12")), "raised"),
        (lambda p, t: _pooled(p, _targets(t)) + 0.05, "other"),
    ],
)
def test_induction_score_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_induction_scores(wrong), mistake)


def _rolled(p, t):  # the shift by torch.roll, which wraps the last key round to key 0
    T = t.shape[1]
    targets = torch.roll(t[:, :, None] == t[:, None, :], 1, dims=-1) & torch.ones(T, T, dtype=torch.bool).tril()
    return _pooled(p, targets)


def _future_too(p, t):  # no s <= t: positions whose token comes again later are counted too
    same = t[:, :, None] == t[:, None, :]
    targets = torch.zeros_like(same)
    targets[:, :, 1:] = same[:, :, :-1]
    return _pooled(p, targets)


def _per_target(p, t):
    targets = _targets(t)
    mass = (p * targets[:, None]).sum(-1) / targets.sum(-1).clamp(min=1)[:, None]
    return mass.permute(1, 0, 2)[:, targets.any(-1)].mean(-1)


def _position_first(p, t):
    targets = _targets(t)
    mass, counted = (p * targets[:, None]).sum(-1), targets.any(-1)
    return torch.stack([mass[:, :, i][counted[:, i]].mean(0) for i in range(t.shape[1]) if counted[:, i].any()]).mean(0)


def _largest_target(p, t):  # the most attended target alone, not their sum
    targets = _targets(t)
    return (p * targets[:, None]).amax(-1).permute(1, 0, 2)[:, targets.any(-1)].mean(-1)


def _latest_copy(p, t):  # only the key after the latest earlier copy
    targets = _targets(t)
    return _pooled(p, targets & (targets.flip(-1).cumsum(-1).flip(-1) == 1))


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_rolled, "wrapped-shift"),
        (_future_too, "all-positions"),  # every case's last token repeats: it counts every position
        (_per_target, "divided-by-targets"),
        (_position_first, "position-by-position"),
        (_largest_target, "max-not-sum"),
        (_latest_copy, "latest-copy"),
    ],
)
def test_more_induction_score_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_induction_scores(wrong), mistake)


def test_a_view_sized_by_the_wrong_dimension_fails_where_d_model_is_not_h_times_d_k():
    def wrong_size(x, w):
        return torch.einsum("bthk,dhk->bthd", x, w.view(w.shape[1], x.shape[2], x.shape[3]))

    rejected_as(ex.check_head_contributions(wrong_size), "raised")  # on out_proj.weight (10, 12)


def test_the_library_induction_score_is_refused():
    rejected_as(ex.check_induction_scores(lambda p, t: inside.induction_scores(p, t)), "by-hand")


def test_a_score_right_on_repeated_blocks_only_fails_on_other_text():
    def offset_only(p, t):  # head_scores at offset n - 1: right on blocks shown twice, not on other text
        n = t.shape[1] // 2
        return p.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)[..., 1:].mean((0, 2))

    rejected_as(ex.check_induction_scores(offset_only), "other")


# ---- the experiment: find the induction heads ---------------------------------------------------


def _found(model, tokens, score, threshold=0.5):
    _, cache = inside.run_with_cache(model, tokens)
    out = []
    for i in range(len(model.decoder.layers)):
        s = score(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens)
        out += [(i, h) for h in range(len(s)) if s[h] > threshold]
    return out


def _last_layer_only(model, tokens):  # the layer index typed in: right while the induction heads sit in layer 1
    _, cache = inside.run_with_cache(model, tokens)
    scores = inside.induction_scores(cache["decoder.layers.1.self_attn.pattern"], tokens)
    return [(1, h) for h in range(len(scores)) if scores[h] > 0.5]


def _own_data(model, tokens):  # measured on the chapter's test blocks, whatever it is given
    return _found(model, tl.recipes.induction_test()[:16], inside.induction_scores)


def _relative_threshold(model, tokens):
    _, cache = inside.run_with_cache(model, tokens)
    found = []
    for i in range(len(model.decoder.layers)):
        s = inside.induction_scores(cache[f"decoder.layers.{i}.self_attn.pattern"], tokens)
        found += [(i, h) for h in range(len(s)) if s[h] > 0.5 * s.max() and s.max() > 0.5]
    return found


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda m, t: [(1, 0), (1, 1), (1, 2)], "typed-answer"),
        (lambda m, t: [(a + 1, b + 1) for a, b in _found(m, t, inside.induction_scores)], "one-based"),
        (lambda m, t: _found(m, t, lambda p, tok: inside.head_scores(p, 1), 0.3), "other"),
        (lambda m, t: _found(m, t, lambda p, tok: inside.head_scores(p, 1), 0.5), "none-found"),
        (lambda m, t: _found(m, t, lambda p, tok: -inside.induction_scores(p, tok), -0.5), "inverted"),
        (lambda m, t: [p for p in _found(m, t, inside.induction_scores) if p[0] == 0], "none-found"),
        (lambda m, t: _found(m, t[:, : t.shape[1] // 2], lambda p, tok: inside.head_scores(p, 1), 0.99), "none-found"),
        (_last_layer_only, "none-found"),  # nothing in layer 1 of the model with a layer in front
        (_own_data, "other-tokens"),
        (_relative_threshold, "relative-threshold"),
        (lambda m, t: "layer 2", "not-pairs"),
        (raising(KeyError("decoder.layers.0.attn.pattern")), "raised"),
    ],
)
def test_find_induction_heads_mistakes_are_named(wrong, mistake, induction_model):
    rejected_as(ex.check_find_induction_heads(wrong, induction_model), mistake)


def test_find_induction_heads_that_leaves_hooks_or_changes_weights_is_refused(induction_model):
    def leaves_a_hook(m, t):
        m.decoder.layers[0].register_forward_hook(lambda *a: None)
        return _found(m, t, inside.induction_scores)

    rejected_as(ex.check_find_induction_heads(leaves_a_hook, induction_model), "hooks-left")

    def zeroes_a_head(m, t):
        with torch.no_grad():
            m.decoder.layers[1].self_attn.out_proj.weight[:, :16] = 0
        return _found(m, t, inside.induction_scores)

    rejected_as(ex.check_find_induction_heads(zeroes_a_head, induction_model), "changed-weights")


def test_the_checker_leaves_the_callers_model_alone(induction_model):
    before = {k: v.clone() for k, v in induction_model.state_dict().items()}
    ex.check_find_induction_heads(lambda m, t: _found(m, t, inside.induction_scores), induction_model)
    assert all(torch.equal(before[k], v) for k, v in induction_model.state_dict().items())


def test_stubs_are_not_answered_and_a_student_stub_raises_a_friendly_error(induction_model):
    def student_stub(*args):
        raise tl.NotYetDone("exercise 13")

    checks = [
        lambda fn: ex.check_head_contributions(fn),
        lambda fn: ex.check_induction_scores(fn),
        lambda fn: ex.check_find_induction_heads(fn, induction_model),
    ]
    for check in checks:
        rejected_as(check(lambda *args: None), "todo")
        with pytest.raises(tl.NotYetDone, match="exercise 13 is not done yet"):
            check(student_stub)


# ---- Exercise 4: the composition score ------------------------------------------------------------


def _score(r, w):
    return (torch.linalg.matrix_norm(r @ w) / (torch.linalg.matrix_norm(r) * torch.linalg.matrix_norm(w))).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda r, w: _score(w, r), "reversed"),
        (lambda r, w: torch.linalg.matrix_norm(r @ w).item(), "unnormalised"),
        (lambda r, w: (torch.linalg.matrix_norm(r @ w) / torch.linalg.matrix_norm(r)).item(), "no-writer-norm"),
        (lambda r, w: (torch.linalg.matrix_norm(r @ w) / torch.linalg.matrix_norm(w)).item(), "no-reader-norm"),
        (
            lambda r, w: (
                torch.linalg.matrix_norm(r @ w, ord=2)
                / (torch.linalg.matrix_norm(r, ord=2) * torch.linalg.matrix_norm(w, ord=2))
            ).item(),
            "spectral-norm",
        ),
        (lambda r, w: _score(r, w) ** 2, "squared"),
        (lambda r, w: ((r * w).sum() / (r.norm() * w.norm())).item(), "elementwise"),
        (lambda r, w: tl.inside.composition_score(r, w), "by-hand"),
        (lambda r, w: 0.5, "other"),
        (lambda r, w: "high", "not-a-number"),
    ],
)
def test_composition_score_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_composition_score(wrong), mistake)


def test_composition_score_accepts_other_routes():
    assert ex.check_composition_score(_score) == ex.CORRECT
    assert ex.check_composition_score(lambda r, w: torch.tensor(_score(r, w))) == ex.CORRECT
    by_trace = lambda r, w: float(torch.trace((r @ w).T @ (r @ w)).sqrt() / ((r**2).sum().sqrt() * w.norm()))  # noqa: E731
    assert ex.check_composition_score(by_trace) == ex.CORRECT


def test_composition_score_right_for_one_input_only_is_rejected():
    """1.0 is right only where the reader reads exactly what the writer writes; a score fitted to the square,
    full-rank case only fails on low-rank circuits."""
    rejected_as(ex.check_composition_score(lambda r, w: 1.0), "other")
    only_full_rank = lambda r, w: _score(r, w) if torch.linalg.matrix_rank(r) == r.shape[0] else 0.3  # noqa: E731
    rejected_as(ex.check_composition_score(only_full_rank), "other")  # on the case of rank 4
