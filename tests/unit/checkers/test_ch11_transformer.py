"""Mutation suite for the checkers of chapter 11 (encoder-decoder): classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import notebook_solution, raising, rejected_as

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
    ("wrong", "mistake"),
    [
        (lambda t: (t[:, 1:], t[:, :-1]), "swapped"),
        (lambda t: (t, t[:, 1:]), "input-unshifted"),
        (lambda t: (t[:, :-1], t), "labels-unshifted"),
        (lambda t: (t, t), "unshifted"),
        (lambda t: (t, t.roll(-1, 1)), "roll"),
        (lambda t: (t[:, :-2], t[:, 2:]), "shifted-by-two"),
        (lambda t: (t[:, :6], t[:, 1:7]), "fixed-length"),  # right on the first input, of length 7
        (lambda t: (t[:, :-2], t[:, 1:-1]), "fixed-length"),
        (lambda t: (t[:, :-1], t[:, 1:].flip(0)), "other"),
        (lambda t: (t[0, :-1], t[0, 1:]), "other"),  # one row, not the batch
        (lambda t: t[:, :-1], "not-a-pair"),
        (lambda t: (t[:, :-1].tolist(), t[:, 1:]), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_shift_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_shift(wrong), mistake)


@pytest.mark.parametrize(
    "right",
    [lambda t: (t[..., :-1], t[..., 1:]), lambda t: (t.narrow(1, 0, t.shape[1] - 1), t.narrow(1, 1, t.shape[1] - 1))],
)
def test_shift_other_routes_pass(right):
    assert ex.check_shift(right) == ex.CORRECT


# ---- loss positions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda y, p: y == p, "reversed"),
        (lambda y, p: y != 0, "pad-ignored"),
        (lambda y, p: y > 0, "pad-ignored"),
        (lambda y, p: (y != p) & (y != 2), "eos-counted"),
        (lambda y, p: torch.ones_like(y, dtype=torch.bool), "all-counted"),
        (lambda y, p: (y != p) & (torch.arange(y.shape[1]) < 3), "other"),
        (lambda y, p: (y != p).long(), "dtype"),
        (lambda y, p: (y != p).float(), "dtype"),  # what differs is the dtype, not the shape
        (lambda y, p: (y == p).long(), "dtype"),
        (lambda y, p: (y != p)[:, None, None, :], "shape"),
        (lambda y, p: (y != p).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_loss_positions_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_loss_positions(wrong), mistake)


@pytest.mark.parametrize(
    "right", [lambda y, p: ~(y == p), lambda y, p: y.ne(p).to(torch.bool), lambda y, p: (y - p) != 0]
)
def test_loss_positions_other_routes_pass(right):
    assert ex.check_loss_positions(right) == ex.CORRECT


# ---- greedy decoding ----------------------------------------------------------------------------


def _greedy(model, src, bos, eos, n, keep_eos=True, stop=True, use_eos=None, use_bos=None, steps=None, pick=None):
    memory = model.encode(src, model.make_src_mask(src))
    out = torch.tensor([[bos if use_bos is None else use_bos]])
    eos = eos if use_eos is None else use_eos
    for _ in range(n if steps is None else steps):
        logits = model.decode(out, memory, model.make_src_mask(src))[:, -1]
        next_id = logits.argmax(-1, keepdim=True) if pick is None else pick(logits, eos)
        if next_id.item() == eos and stop:
            return torch.cat([out, next_id], 1) if keep_eos else out
        out = torch.cat([out, next_id], 1)
    return out


def _never_eos(logits, eos):  # the argmax among the other tokens: runs on past <eos>
    return logits.index_fill(-1, torch.tensor([eos]), float("-inf")).argmax(-1, keepdim=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, keep_eos=False), "eos-dropped"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, stop=False), "past-eos"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, pick=_never_eos), "never-stops"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, use_eos=2), "tokenizer-eos"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, use_bos=1), "no-bos"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, steps=60), "too-long"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, steps=2), "stopped-early"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n, pick=lambda lg, e: lg.argmin(-1, keepdim=True)), "other"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n)[:, 1:], "no-bos"),
        (lambda m, s, b, e, n: m.greedy_decode(s, b, e, n), "by-hand"),
        (lambda m, s, b, e, n: tl.greedy_decode(m, s, b, e, n), "by-hand"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n)[0], "shape"),
        (lambda m, s, b, e, n: _greedy(m, s, b, e, n).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_greedy_mistakes_are_named(numbers_model, wrong, mistake):
    model, src_tok, tgt_tok, _, _ = numbers_model
    with torch.no_grad():
        rejected_as(ex.check_greedy(wrong, model, src_tok, tgt_tok, NUMBERS), mistake)


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


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_greedy_on_an_untrained_model():
    """A small untrained model and the checker's own numbers: no trained checkpoint needed."""
    src_tok, tgt_tok = tl.CharTokenizer("0123456789"), tl.CharTokenizer("abcdefgh ")
    model = tl.Transformer(
        vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        num_layers=1,
        d_ff=32,
        dropout=0.0,
    ).eval()
    appended = lambda m, s, b, e, n: torch.cat([_greedy(m, s, b, e, n), torch.full((1, 1), tgt_tok.stoi["a"])], 1)
    with torch.no_grad():
        assert ex.check_greedy(_greedy, model, src_tok, tgt_tok) == ex.CORRECT
        rejected_as(
            ex.check_greedy(lambda m, s, b, e, n: m.greedy_decode(s, b, e, n), model, src_tok, tgt_tok), "by-hand"
        )
        rejected_as(ex.check_greedy(lambda *a: _greedy(*a)[:, 1:], model, src_tok, tgt_tok), "no-bos")
        rejected_as(ex.check_greedy(appended, model, src_tok, tgt_tok), "too-long")  # one token past max_new_tokens


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
    ("wrong", "mistake"),
    [
        (lambda *a: _accuracy(*a, ignore_ablate=True), "not-ablated"),
        (lambda m, s, t, ablate: _accuracy(m, s, t, not ablate), "always-ablated"),
        (lambda *a: _accuracy(*a, count_pad=True), "pad-counted"),
        (lambda *a: _accuracy(*a, no_shift=True), "unshifted"),
        (lambda *a: _accuracy(*a, percent=True), "percent"),
        (lambda m, s, t, ablate: 0.5, "other"),
        (lambda m, s, t, ablate: "high", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_memory_ablation_mistakes_are_named(numbers_model, wrong, mistake):
    model, _, _, src, tgt = numbers_model
    rejected_as(ex.check_memory_ablation(wrong, model, src, tgt), mistake)


def test_memory_ablation_on_an_untrained_model_whose_memory_matters():
    tl.set_seed(0)
    model = tl.Transformer(
        vocab_size=12, tgt_vocab_size=9, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0
    ).eval()
    src = torch.randint(1, 12, (64, 6), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(1, 9, (64, 7), generator=torch.Generator().manual_seed(2))
    tgt[:32, 5:] = 0  # padding at the end of half the rows
    with torch.no_grad():  # make the encoder's output matter, so that zeroing it changes the predictions
        for layer in model.decoder.layers:
            layer.cross_attn.out_proj.weight.mul_(30.0)
    assert ex.check_memory_ablation(_accuracy, model, src, tgt) == ex.CORRECT
    rejected_as(ex.check_memory_ablation(lambda *a: _accuracy(*a, ignore_ablate=True), model, src, tgt), "not-ablated")
    rejected_as(ex.check_memory_ablation(lambda *a: _accuracy(*a, count_pad=True), model, src, tgt), "pad-counted")


@pytest.mark.slow
def test_memory_ablation_rejects_numbers_measured_once_and_typed_in(numbers_model):
    model, _, _, src, tgt = numbers_model
    typed = {ablate: _accuracy(model, src, tgt, ablate) for ablate in (False, True)}
    rejected_as(ex.check_memory_ablation(lambda m, s, t, ablate: typed[ablate], model, src, tgt), "not-measured")


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
