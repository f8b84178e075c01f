"""Mutation suite for the checkers of chapter 14 (today's models, part two): classic mistakes are named."""

from __future__ import annotations

import pytest
import torch
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("14_modern_blocks_two", name, moe=tl.moe)


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_rotary_rows", ex.check_rotary_rows),
        ("solution_top_k_gates", ex.check_top_k_gates),
        ("solution_int8_rows", ex.check_int8_rows),
        ("solution_expert_use", ex.check_expert_use),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


# ---- the two rotary layouts ---------------------------------------------------------------------


def _order(d_k, r):
    return torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, d_k)))


def _per_head(w, h, order):
    return w.view(h, -1, w.shape[1])[:, order].reshape(w.shape)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda w, h, r: w.clone(), "interleaved"),
        (lambda w, h, r: _per_head(w, h, torch.argsort(_order(w.shape[0] // h, r))), "inverse"),
        (lambda w, h, r: w[_order(w.shape[0], w.shape[0])], "whole-matrix"),
        (lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, w.shape[0] // h)), "past-rotary-dim"),
        (lambda w, h, r: w[:, _order(w.shape[1], w.shape[1])], "columns"),
        (
            lambda w, h, r: torch.cat((w[: w.shape[0] // h][_order(w.shape[0] // h, r)], w[w.shape[0] // h :])),
            "first-head-only",
        ),
        (lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, r)).flip(0), "row-order"),
        (lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, r)) * 2, "other"),
        (lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, r))[:, :2], "shape"),
        (lambda w, h, r: tl.rotary_permutation(w.shape[0] // h, r), "by-hand"),
        (raising(IndexError("index 8 is out of bounds")), "raised"),
    ],
)
def test_rotary_rows_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_rotary_rows(wrong), mistake)


def test_rotary_rows_right_only_when_every_row_turns_fails_naming_the_input():
    """Right whenever rotary_dim = d_k (the first case), wrong on the second."""
    wrong = lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, w.shape[0] // h))  # noqa: E731
    rejected_as(ex.check_rotary_rows(wrong), "past-rotary-dim")


@pytest.mark.parametrize(
    "right",
    [
        lambda w, h, r: _per_head(w, h, _order(w.shape[0] // h, r)),
        lambda w, h, r: torch.cat(
            [
                torch.cat((head[0:r:2], head[1:r:2], head[r:]))
                for head in w.split(w.shape[0] // h)  # one head's (d_k, d_in) block at a time
            ]
        ),
        lambda w, h, r: w.index_select(
            0, torch.tensor([i * (w.shape[0] // h) + j for i in range(h) for j in _order(w.shape[0] // h, r).tolist()])
        ),
    ],
)
def test_rotary_rows_other_routes_pass(right):
    assert ex.check_rotary_rows(right) == ex.CORRECT


def test_rotary_rows_the_classic_mistake_really_changes_a_models_logits():
    """The hint's claim, measured: a rotate-half model with interleaved q/k rows gives other logits."""
    cfg = tl.TransformerConfig(
        vocab_size=17, d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="rope", rotary_layout="interleaved"
    )
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(cfg).eval()
    tokens = torch.randint(0, 17, (2, 9))
    right = tl.hf.with_rotary_layout(model, "half")
    wrong = tl.DecoderOnlyLM(cfg.replace(rotary_layout="half")).eval()
    wrong.load_state_dict(model.state_dict())
    assert torch.allclose(right(tokens), model(tokens), atol=1e-5)
    assert not torch.allclose(wrong(tokens), model(tokens), atol=1e-2)


# ---- top-k routing ------------------------------------------------------------------------------


def _gates(logits, k, keep=None):
    probs = logits.softmax(-1)
    top, chosen = probs.topk(k, -1)
    return torch.zeros_like(probs).scatter(-1, chosen, top / top.sum(-1, keepdim=True) if keep is None else keep(top))


def _exp_share(x):
    return x.exp() / x.exp().sum(-1, keepdim=True)


def _gates_by_exp(logits, k, stable=False):
    """The softmax written out, exp over its sum: without the max taken off, exp overflows above about 88."""
    e = (logits - logits.amax(-1, keepdim=True) if stable else logits).exp()  # (N, E)
    top, chosen = (e / e.sum(-1, keepdim=True)).topk(k, -1)  # (N, k) each
    return torch.zeros_like(logits).scatter(-1, chosen, top / top.sum(-1, keepdim=True))


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, k: _gates(x, k, keep=lambda top: top), "not-renormalised"),
        (
            lambda x, k: torch.zeros_like(x).scatter(
                -1,
                x.softmax(0).topk(k, -1).indices,
                x.softmax(0).topk(k, -1).values / x.softmax(0).topk(k, -1).values.sum(-1, keepdim=True),
            ),
            "softmax-axis",
        ),
        (
            lambda x, k: torch.zeros_like(x).scatter(
                -1, x.softmax(-1).topk(k, -1).indices, x.softmax(0).gather(1, x.softmax(-1).topk(k, -1).indices)
            ),
            "wrong-gates",
        ),
        (lambda x, k: torch.zeros_like(x).scatter(-1, x.topk(k, -1).indices, x.topk(k, -1).values), "raw-logits"),
        (
            lambda x, k: torch.zeros_like(x).scatter(
                -1, x.topk(k, -1, largest=False).indices, x.topk(k, -1, largest=False).values.softmax(-1)
            ),
            "least-likely",
        ),
        (lambda x, k: x.softmax(-1), "all-experts"),
        (lambda x, k: _gates(x, min(2, x.shape[1])), "fixed-k"),
        (lambda x, k: _gates(x, k).long(), "dtype"),
        (lambda x, k: _gates(x, k)[:, :k], "shape"),
        (lambda x, k: _gates(x, k) * 0.9, "wrong-gates"),
        (lambda x, k: _gates(x, k).roll(1, -1), "other"),
        (raising(RuntimeError("selected index k out of range")), "raised"),
        (_gates_by_exp, "overflow"),
        (lambda x, k: _gates_by_exp(x, k).nan_to_num(), "overflow"),  # the NaN of inf / inf made 0
        (  # exp of the k largest logits only, over their sum: the same overflow
            lambda x, k: torch.zeros_like(x).scatter(-1, x.topk(k, -1).indices, _exp_share(x.topk(k, -1).values)),
            "overflow",
        ),
    ],
)
def test_top_k_gates_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_top_k_gates(wrong), mistake)


def test_top_k_gates_right_only_for_k_2_fails_naming_the_input():
    rejected_as(ex.check_top_k_gates(lambda x, k: _gates(x, 2)), "fixed-k")  # on logits (5, 8) with k=3


@pytest.mark.parametrize(
    "right",
    [
        lambda x, k: _gates(x, k),
        lambda x, k: torch.zeros_like(x).scatter(-1, x.topk(k, -1).indices, x.topk(k, -1).values.softmax(-1)),
        lambda x, k: x.masked_fill(x < x.topk(k, -1).values[:, -1:], float("-inf")).softmax(-1),
        lambda x, k: _gates(x.double(), k),
        lambda x, k: _gates_by_exp(x, k, stable=True),
    ],
)
def test_top_k_gates_other_routes_pass(right):
    assert ex.check_top_k_gates(right) == ex.CORRECT


# ---- int8 ---------------------------------------------------------------------------------------


def _int8(w, scale_fn=lambda w: w.abs().amax(1, keepdim=True) / 127, rounding=torch.round):
    scale = scale_fn(w)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return rounding(w / scale).clamp(-127, 127).to(torch.int8), scale.squeeze(-1) if scale.dim() else scale


def _nan_row(w):  # the row of zeros divided by 0: its NaN kept (in float, where int8 cannot hold it)
    q = torch.round(w / (w.abs().amax(1, keepdim=True) / 127))
    return (q if q.isnan().any() else q.to(torch.int8)), w.abs().amax(1) / 127


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda w: _int8(w, lambda w: w.abs().max() / 127 * torch.ones(1)), "per-tensor"),
        (lambda w: _int8(w, lambda w: w.abs().max().expand(w.shape[0], 1) / 127), "per-tensor"),
        (lambda w: _int8(w, lambda w: w.abs().amax(0, keepdim=True) / 127), "per-column"),
        (lambda w: _int8(w, lambda w: w.abs().amax(1, keepdim=True)), "no-127"),
        (lambda w: _int8(w, lambda w: w.abs().amax(1, keepdim=True) / 255), "by-255"),
        (lambda w: _int8(w, lambda w: w.abs().amax(1, keepdim=True) / 128), "by-128"),
        (lambda w: _int8(w, lambda w: w.abs().amax(1, keepdim=True) / 100), "wrong-scale"),
        (lambda w: (_int8(w)[0], _int8(w)[1][:-1]), "scale-count"),
        (lambda w: ((_int8(w)[0].int() // 2).to(torch.int8), _int8(w)[1]), "other"),
        (lambda w: _int8(w, lambda w: w.amax(1, keepdim=True) / 127), "not-absolute"),
        (lambda w: _int8(w, rounding=torch.trunc), "truncated"),
        (lambda w: _int8(w, rounding=torch.floor), "floor"),
        (lambda w: (_int8(w)[0].float(), _int8(w)[1]), "dtype"),
        (
            lambda w: (torch.round(w / (w.abs().amax(1, keepdim=True) / 127)).to(torch.int8), w.abs().amax(1) / 127),
            "non-positive-scale",  # the row of zeros got scale 0
        ),
        (_nan_row, "not-finite"),
        (lambda w: _int8(w)[0], "not-a-pair"),
        (raising(ZeroDivisionError("float division by zero")), "raised"),
        (
            lambda w: torch.quantize_per_channel(w, w.abs().amax(1) / 127, torch.zeros(w.shape[0]), 0, torch.qint8),
            "by-hand",
        ),
    ],
)
def test_int8_rows_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_int8_rows(wrong), mistake)


def test_int8_rows_right_only_for_the_first_shape_fails_naming_another_input():
    """Per row on a (4, 6) weight, one scale for the whole matrix on every other."""
    wrong = lambda w: _int8(w) if w.shape == (4, 6) else _int8(w, lambda w: w.abs().max().expand(w.shape[0], 1) / 127)
    rejected_as(ex.check_int8_rows(wrong), "per-tensor")


def test_int8_rows_a_zero_row_may_take_any_positive_scale():
    def scale_two(w):
        q, s = _int8(w)
        return q, torch.where(w.abs().amax(1) > 0, s, torch.full_like(s, 2.0))

    assert ex.check_int8_rows(scale_two) == ex.CORRECT


@pytest.mark.parametrize(
    "right",
    [
        lambda w: _int8(w),
        lambda w: (lambda q, s: (q, s[:, None]))(*_int8(w)),  # scale as a column (out, 1)
        lambda w: tuple(t if t.dtype == torch.int8 else t.float() for t in _int8(w.double())),  # in float64, then int8
    ],
)
def test_int8_rows_other_routes_pass(right):
    assert ex.check_int8_rows(right) == ex.CORRECT


# ---- experiment: expert use ---------------------------------------------------------------------


def _use(model, ids, measure, eval_mode=True):
    if eval_mode:
        model.eval()
    with torch.no_grad(), tl.moe.router_logits(model) as logits:
        model(ids)
    return torch.stack([measure(x, model.config.experts_per_token) for x in logits])


def _slots(x, k):
    return torch.bincount(x.topk(k, -1).indices.flatten(), minlength=x.shape[-1]).float()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda m, ids: _use(m, ids, lambda x, k: _slots(x, 1) / x.shape[0]), "first-choice"),
        (lambda m, ids: _use(m, ids, lambda x, k: x.softmax(-1).mean(0)), "mean-probability"),
        (lambda m, ids: _use(m, ids, _slots), "counts"),
        (lambda m, ids: _use(m, ids, lambda x, k: _slots(x, k) / x.shape[0]), "per-token"),
        (lambda m, ids: _use(m, ids, lambda x, k: _slots(x, k) / (x.shape[0] * k)).flip(0), "reversed-layers"),
        (lambda m, ids: _use(m, ids, lambda x, k: _slots(x, k) / (x.shape[0] * k), eval_mode=False), "dropout"),
        (
            lambda m, ids: _use(m, torch.zeros_like(ids), lambda x, k: _slots(x, k) / (x.shape[0] * k)),
            "other",
        ),
        (lambda m, ids: tl.moe.expert_use(m, ids), "by-hand"),
        (lambda m, ids: torch.full((3, 4), 0.25), "uniform"),
        (lambda m, ids: torch.full((2, 4), 0.25), "shape"),
        (raising(TypeError("'NoneType' object is not iterable")), "raised"),
    ],
)
def test_expert_use_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_expert_use(wrong), mistake)


def test_expert_use_right_only_for_top_2_fails_naming_the_top_1_model():
    """k = 2 written in: right on the first model (top-2), wrong on the second (top-1)."""
    wrong = lambda m, ids: _use(m, ids, lambda x, k: _slots(x, 2) / (x.shape[0] * 2))
    rejected_as(ex.check_expert_use(wrong), "other")  # on the top-1 model


def test_expert_use_a_typed_table_fails_on_the_checkers_own_models():
    """The first model's answer, typed in, is wrong for the second model."""
    typed = {}

    def remember(m, ids):
        if not typed:
            typed["table"] = _use(m, ids, lambda x, k: _slots(x, k) / (x.shape[0] * k))  # measured once, then replayed
        return typed["table"]

    rejected_as(ex.check_expert_use(remember), "shape")  # the second model has 2 layers, not 3


@pytest.mark.parametrize(
    "right",
    [
        lambda m, ids: _use(m, ids, lambda x, k: _slots(x, k) / (x.shape[0] * k)),
        lambda m, ids: [r for r in _use(m, ids, lambda x, k: _slots(x, k) / _slots(x, k).sum())],  # a list of rows
        lambda m, ids: _use(
            m, ids, lambda x, k: torch.nn.functional.one_hot(x.topk(k, -1).indices, x.shape[-1]).float().mean((0, 1))
        ),
    ],
)
def test_expert_use_other_routes_pass(right):
    assert ex.check_expert_use(right) == ex.CORRECT
