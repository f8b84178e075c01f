"""Mutation suite for the checkers of chapter 11 (encoder-decoder): classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import notebook_solution, raising, rejected

import transformer_lib as tl
from transformer_lib import exercises as ex
from transformer_lib import recipes

NUMBERS = ("00305", "61718", "7")  # fewer than the checker's own, to keep the suite fast


def _notebook_solution(name: str, **names):
    return notebook_solution("11_transformer", name, **names)


_raises = raising(IndexError("index 5 is out of bounds for dimension 1 with size 5"))


@pytest.fixture(scope="module")
def numbers_model():
    model, _ = tl.load_checkpoint("numbers_to_words")
    src_tok, tgt_tok, _, _, test_src, test_tgt = recipes.numbers_to_words_data()
    return model.eval(), src_tok, tgt_tok, test_src[:150], test_tgt[:150]


def test_the_notebook_solutions_pass():
    assert ex.check_shift(_notebook_solution("solution_shift")) == ex.CORRECT
    assert ex.check_loss_positions(_notebook_solution("solution_loss_positions")) == ex.CORRECT


@pytest.mark.slow
def test_the_notebook_solutions_of_the_trained_model_pass(numbers_model):
    model, src_tok, tgt_tok, src, tgt = numbers_model
    assert ex.check_greedy(_notebook_solution("solution_greedy"), model, src_tok, tgt_tok, NUMBERS) == ex.CORRECT
    ablation = _notebook_solution("solution_memory_ablation", device=torch.device("cpu"))
    assert ex.check_memory_ablation(ablation, model, src, tgt) == ex.CORRECT


# ---- shift --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda t: (t[:, 1:], t[:, :-1]), "Swapped"),
        (lambda t: (t, t[:, 1:]), "decoder input is not shifted"),
        (lambda t: (t[:, :-1], t), "labels are not shifted"),
        (lambda t: (t, t), "Nothing is shifted"),
        (lambda t: (t, t.roll(-1, 1)), "wraps"),
        (lambda t: (t[:, :-2], t[:, 2:]), "Shifted by two"),
        (lambda t: (t[:, :6], t[:, 1:7]), "fixed lengths"),
        (lambda t: t[:, :-1], "Return a pair"),
        (lambda t: (t[:, :-1].tolist(), t[:, 1:]), "should be a tensor"),
        (_raises, "raised IndexError on targets of shape (2, 7)"),
    ],
)
def test_shift_mistakes_are_named(wrong, phrase):
    rejected(ex.check_shift(wrong), phrase)


@pytest.mark.parametrize(
    "right",
    [lambda t: (t[..., :-1], t[..., 1:]), lambda t: (t.narrow(1, 0, t.shape[1] - 1), t.narrow(1, 1, t.shape[1] - 1))],
)
def test_shift_other_routes_pass(right):
    assert ex.check_shift(right) == ex.CORRECT


# ---- loss positions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda y, p: y == p, "Reversed"),
        (lambda y, p: y != 0, "ignores pad_id"),
        (lambda y, p: y > 0, "ignores pad_id"),
        (lambda y, p: (y != p) & (y != 2), "<eos> label is counted"),
        (lambda y, p: torch.ones_like(y, dtype=torch.bool), "Every position is counted"),
        (lambda y, p: (y != p).long(), "positions are right but the dtype is torch.int64"),
        (lambda y, p: (y != p)[:, None, None, :], "expected shape"),
        (lambda y, p: (y != p).tolist(), "Return a tensor"),
        (_raises, "raised IndexError on labels of shape (2, 6) with pad_id=0"),
    ],
)
def test_loss_positions_mistakes_are_named(wrong, phrase):
    rejected(ex.check_loss_positions(wrong), phrase)


def test_loss_positions_hints_say_what_differs_not_the_same_shape_twice():
    feedback = ex.check_loss_positions(lambda y, p: (y != p).float())
    assert "dtype is torch.float32" in feedback and "(2, 5), got (2, 5)" not in feedback


@pytest.mark.parametrize(
    "right", [lambda y, p: ~(y == p), lambda y, p: y.ne(p).to(torch.bool), lambda y, p: (y - p) != 0]
)
def test_loss_positions_other_routes_pass(right):
    assert ex.check_loss_positions(right) == ex.CORRECT


# ---- greedy decoding ----------------------------------------------------------------------------


def _greedy(model, src, bos, eos, n, keep_eos=True, stop=True, use_eos=None, use_bos=None, steps=None):
    memory = model.encode(src, model.make_src_mask(src))
    out = torch.tensor([[bos if use_bos is None else use_bos]])
    eos = eos if use_eos is None else use_eos
    for _ in range(n if steps is None else steps):
        next_id = model.decode(out, memory, model.make_src_mask(src))[:, -1].argmax(-1, keepdim=True)
        if next_id.item() == eos and stop:
            return torch.cat([out, next_id], 1) if keep_eos else out
        out = torch.cat([out, next_id], 1)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, keep_eos=False), "no <eos> at the end"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, stop=False), "goes on after <eos>"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, use_eos=2), "not at the eos_id it was given"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, use_bos=1), "Start the output with bos_id"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, steps=60), "at most max_new_tokens"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n)[:, 1:], "Start the output with bos_id"),
        (lambda m, s, b, e, n: m.greedy_decode(s, b, e, n), "by hand"),
        (lambda m, s, b, e, n: tl.greedy_decode(m, s, b, e, n), "by hand"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n)[0], "(1, n) tensor"),
        (_raises, "raised IndexError on the number 00305"),
    ],
)
def test_greedy_mistakes_are_named(numbers_model, wrong, phrase):
    model, src_tok, tgt_tok, _, _ = numbers_model
    with torch.no_grad():
        rejected(ex.check_greedy(wrong, model, src_tok, tgt_tok, NUMBERS), phrase)


@pytest.mark.slow
def test_greedy_by_another_route_passes(numbers_model):
    model, src_tok, tgt_tok, _, _ = numbers_model

    def cached(m, src, bos, eos, n):  # one token fed per step, earlier keys and values kept
        memory, mask = m.encode(src, m.make_src_mask(src)), m.make_src_mask(src)
        caches, out = m.new_cache(capacity=n), torch.tensor([[bos]])
        for _ in range(n):
            next_id = m.decode(out[:, -1:], memory, mask, caches=caches)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, next_id], 1)
            if next_id.item() == eos:
                break
        return out

    with torch.no_grad():
        assert ex.check_greedy(cached, model, src_tok, tgt_tok, NUMBERS) == ex.CORRECT
        assert ex.check_greedy(_greedy, model, src_tok, tgt_tok, NUMBERS) == ex.CORRECT
    assert tl.greedy_decode(model, torch.tensor([src_tok.encode("7")]), 1, 2, 5).shape[0] == 1  # given back


# ---- memory ablation ----------------------------------------------------------------------------


@torch.no_grad()
def _accuracy(model, src, tgt, ablate, ignore_ablate=False, count_pad=False, no_shift=False, percent=False):
    mask = model.make_src_mask(src)
    memory = model.encode(src, mask)
    if ablate and not ignore_ablate:
        memory = torch.zeros_like(memory)
    logits = model.decode(tgt[:, :-1], memory, mask)
    labels = tgt[:, :-1] if no_shift else tgt[:, 1:]
    hit = logits.argmax(-1) == labels
    value = hit.float().mean() if count_pad else hit[labels != model.pad_id].float().mean()
    return value.item() * (100 if percent else 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda *a: _accuracy(*a, ignore_ablate=True), "With ablate=True nothing changed"),
        (lambda *a: _accuracy(*a, count_pad=True), "padding is counted"),
        (lambda *a: _accuracy(*a, no_shift=True), "tgt[:, 1:]"),
        (lambda *a: _accuracy(*a, percent=True), "percentage"),
        (lambda m, s, t, ablate: 0.5, "expected a token accuracy"),
        (lambda m, s, t, ablate: "high", "as a number"),
        (_raises, "raised IndexError on the data you gave, ablate=False"),
    ],
)
def test_memory_ablation_mistakes_are_named(numbers_model, wrong, phrase):
    model, _, _, src, tgt = numbers_model
    rejected(ex.check_memory_ablation(wrong, model, src, tgt), phrase)


@pytest.mark.slow
def test_memory_ablation_rejects_numbers_measured_once_and_typed_in(numbers_model):
    model, _, _, src, tgt = numbers_model
    typed = {ablate: _accuracy(model, src, tgt, ablate) for ablate in (False, True)}
    rejected(ex.check_memory_ablation(lambda m, s, t, ablate: typed[ablate], model, src, tgt), "again")


@pytest.mark.slow
def test_memory_ablation_by_another_route_passes(numbers_model):
    model, _, _, src, tgt = numbers_model

    def counted(m, s, t, ablate):  # sums then divides, one row at a time
        right = total = 0
        for row in range(len(s)):
            hits = _accuracy(m, s[row : row + 1], t[row : row + 1], ablate)
            n = int((t[row, 1:] != m.pad_id).sum())
            right, total = right + round(hits * n), total + n
        return torch.tensor(right / total)

    assert ex.check_memory_ablation(counted, model, src, tgt) == ex.CORRECT
