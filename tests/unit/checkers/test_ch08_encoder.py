"""Mutation suite for the checkers of chapter 08 (the encoder): classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _mutation import notebook_solution, raising, rejected_as
from torch import nn

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("08_encoder", name)


_raises = raising(RuntimeError("The size of tensor a (8) must match the size of tensor b (6)"))


class _Layer(nn.Module):  # the learner's MyEncoderLayer (post-LN forward)
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = tl.MultiHeadAttention(d_model, num_heads)
        self.feed_forward = tl.FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        z = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(z + self.feed_forward(z))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_mean_pool", ex.check_mean_pool),
        ("solution_first_pool", ex.check_first_pool),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


def test_the_notebook_pre_ln_solution_passes():
    assert ex.check_pre_ln_layer(_notebook_solution("solution_pre_ln_layer"), _Layer) == ex.CORRECT


# ---- mean pooling -------------------------------------------------------------------------------


def _keep(m):
    return m[:, 0, 0, :, None].float()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda h, m: h.mean(1), "padding-averaged"),
        (lambda h, m: (h * _keep(m)).sum(1) / h.shape[1], "divided-by-S"),
        (lambda h, m: (h * _keep(m)).sum(1) / 5, "divided-by-S"),  # S of the first input, whatever the input
        (lambda h, m: (h * _keep(m)).sum(1), "sum"),
        (lambda h, m: (h * (1 - _keep(m))).sum(1) / (1 - _keep(m)).sum(1).clamp(min=1), "pads-only"),
        (lambda h, m: h[:, 0], "first-position"),
        (lambda h, m: (h * _keep(m)).sum(1) / 3, "other"),
        (lambda h, m: ((h * _keep(m)).sum(1) / _keep(m).sum(1))[:, :2], "shape"),
        (lambda h, m: ((h * _keep(m)).sum(1) / _keep(m).sum(1)).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_mean_pool_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_mean_pool(wrong), mistake)


def test_mean_pool_right_only_for_one_input_fails_naming_the_input():
    feedback = ex.check_mean_pool(lambda h, m: (h * _keep(m)).sum(1) / (_keep(m).sum(1) + (h.shape[0] == 4)))
    rejected_as(feedback, "other")
    assert "pad id 3" in feedback


@pytest.mark.parametrize(
    "right",
    [
        lambda h, m: (h * _keep(m)).sum(1) / _keep(m).sum(1),
        lambda h, m: torch.stack([h[b, m[b, 0, 0]].mean(0) for b in range(h.shape[0])]),
        lambda h, m: torch.einsum("bs,bsd->bd", m[:, 0, 0].double(), h.double()) / m[:, 0, 0].sum(-1, keepdim=True),
        lambda h, m: h.masked_fill(~m[:, 0, 0, :, None], 0).sum(1) / m.sum((1, 2, 3))[:, None],
    ],
)
def test_mean_pool_other_routes_pass(right):
    assert ex.check_mean_pool(right) == ex.CORRECT


# ---- pre-LN layer -------------------------------------------------------------------------------


def _attn(layer, q, m):
    return layer.self_attn(q, q, q, m)[0]


def _pre(layer, x, m, first="norm1", second="norm2", mask=True, final=False):
    n1, n2 = getattr(layer, first), getattr(layer, second)
    z = x + _attn(layer, n1(x), m if mask else None)
    out = z + layer.feed_forward(n2(z))
    return layer.norm2(out) if final else out


def _no_residual(layer, z):  # the feed-forward sublayer on z = attn(norm1(x)), which lost its residual x
    return z + layer.feed_forward(layer.norm2(z))


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda layer, x, m: layer(x, m), "post-ln"),
        (lambda layer, x, m: _pre(layer, x, m, second="norm1"), "norm1-twice"),
        (lambda layer, x, m: _pre(layer, x, m, first="norm2"), "norm2-twice"),
        (lambda layer, x, m: _pre(layer, x, m, first="norm2", second="norm1"), "norms-swapped"),
        (lambda layer, x, m: _pre(layer, x, m, mask=False), "mask-ignored"),
        (lambda layer, x, m: _pre(layer, x, m, final=True), "final-norm"),
        (lambda layer, x, m: layer.feed_forward(layer.norm2(x + _attn(layer, layer.norm1(x), m))), "no-ff-residual"),
        (lambda layer, x, m: _no_residual(layer, _attn(layer, layer.norm1(x), m)), "no-attention-residual"),
        (lambda layer, x, m: x + _attn(layer, layer.norm1(x), m) + layer.feed_forward(layer.norm2(x)), "ff-reads-x"),
        (lambda layer, x, m: x + _attn(layer, x, m), "other"),
        (lambda layer, x, m: _pre(layer, x, m)[:, :-1], "shape"),
        (_raises, "raised"),
    ],
)
def test_pre_ln_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_pre_ln_layer(wrong, _Layer), mistake)


def test_pre_ln_right_only_for_one_width_fails_naming_the_input():
    def only_16(layer, x, m):
        return _pre(layer, x, m) if x.shape[-1] == 16 else x

    feedback = ex.check_pre_ln_layer(only_16, _Layer)
    rejected_as(feedback, "other")
    assert "d_model=24" in feedback


def test_pre_ln_a_layer_class_that_cannot_be_built_is_named():
    class Broken(_Layer):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__(d_model, num_heads * 5, d_ff)  # 5 * num_heads heads do not divide d_model

    rejected_as(ex.check_pre_ln_layer(_pre, Broken), "raised")


@pytest.mark.parametrize(
    "right",
    [
        _pre,
        lambda layer, x, m: (
            lambda z: z + layer.feed_forward(F.layer_norm(z, z.shape[-1:], layer.norm2.weight, layer.norm2.bias))
        )(x + _attn(layer, layer.norm1(x), m)),
    ],
)
def test_pre_ln_other_routes_pass(right):
    assert ex.check_pre_ln_layer(right, _Layer) == ex.CORRECT


# ---- first-token pooling ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda h: h[:, -1], "last-position"),
        (lambda h: h.mean(1), "mean-pooling"),
        (lambda h: h[:, 1], "position-1"),
        (lambda h: h.max(1).values, "max-pooling"),
        (lambda h: h[:, :1], "kept-axis"),
        (lambda h: h[0], "first-sequence"),
        (lambda h: h[:, 0] if h.shape[0] == 3 else h[:, 0] * 2, "other"),
        (lambda h: h[:, 0].tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_first_pool_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_first_pool(wrong), mistake)


@pytest.mark.parametrize("right", [lambda h: h.select(1, 0), lambda h: h.narrow(1, 0, 1).squeeze(1).double()])
def test_first_pool_other_routes_pass(right):
    assert ex.check_first_pool(right) == ex.CORRECT


# ---- head ablation ------------------------------------------------------------------------------


def _bracket_classifier(examples: int):
    """An untrained small bracket classifier and `examples` labelled strings: (model, x, y)."""
    tl.set_seed(0)
    tok = tl.CharTokenizer("()[]")
    x, y = tl.encode_labelled(tl.brackets_task(examples, seed=3, max_pairs=4), tok, bos=True)
    model = tl.EncoderClassifier(
        vocab_size=tok.vocab_size,
        num_classes=2,
        d_model=16,
        num_heads=2,
        num_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=32,
    ).eval()
    return model, x, y


@pytest.fixture(scope="module")
def classifier():
    return _bracket_classifier(120)


def _head_off(model, x, y, layer, head, restore=True, switch_off=True, scale=1.0, flip=False):
    attn = model.encoder.layers[layer].self_attn
    saved = attn.out_proj.weight.detach().clone()
    with torch.no_grad():
        if switch_off:
            attn.out_proj.weight[:, head * attn.d_k : (head + 1) * attn.d_k] = 0.0
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
        if restore:
            attn.out_proj.weight.copy_(saved)
    return scale * (1 - accuracy if flip else accuracy)


def _rows_off(model, x, y, layer, head):
    """The classic slip: zero the head's d_k rows of out_proj.weight (its outputs), not the columns that read it."""
    attn = model.encoder.layers[layer].self_attn
    saved = attn.out_proj.weight.detach().clone()
    with torch.no_grad():
        attn.out_proj.weight[head * attn.d_k : (head + 1) * attn.d_k, :] = 0.0
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
        attn.out_proj.weight.copy_(saved)
    return accuracy


def test_head_ablation_measured_on_the_notebooks_data_alone_fails(classifier):
    model, x, y = classifier
    own = lambda m, xs, ys, layer, head: _head_off(m, x, y, layer, head)  # ignores the data it is given
    rejected_as(ex.check_head_ablation(own, *classifier), "given-data-ignored")


def test_head_ablation_notebook_solution_passes(classifier):
    assert ex.check_head_ablation(_notebook_solution("solution_head_ablation"), *classifier) == ex.CORRECT


def test_head_ablation_constants_and_typed_numbers_fail(classifier):
    model, x, y = classifier
    typed = {(i, j): ex.ch08_encoder._accuracy_without_head(model, x, y, i, j) for i in range(2) for j in range(2)}
    rejected_as(ex.check_head_ablation(lambda m, xs, ys, i, j: typed[(i, j)], *classifier), "given-data-ignored")
    rejected_as(ex.check_head_ablation(lambda *a: 0.5, *classifier), "not-measured")


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda *a: _head_off(*a, restore=False), "model-changed"),
        (lambda *a: _head_off(*a, switch_off=False), "all-heads-on"),
        (_rows_off, "other"),  # the head's rows zeroed: the wrong side of out_proj
        (lambda m, x, y, layer, head: _head_off(m, x, y, 0, head), "other"),  # right for layer 0 only
        (lambda m, x, y, layer, head: _head_off(m, x, y, layer, 0), "other"),  # right for head 0 only
        (lambda *a: _head_off(*a, scale=100.0), "percentage"),
        (lambda *a: _head_off(*a, flip=True), "error-rate"),
        (lambda *a: "high", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_head_ablation_mistakes_are_named(classifier, wrong, mistake):
    rejected_as(ex.check_head_ablation(wrong, *classifier), mistake)


def test_head_ablation_puts_back_the_weights_an_answer_changed(classifier):
    assert ex.check_head_ablation(lambda *a: _head_off(*a), *classifier) == ex.CORRECT
    rejected_as(ex.check_head_ablation(lambda *a: _head_off(*a, restore=False), *classifier), "model-changed")
    assert ex.check_head_ablation(_head_off, *classifier) == ex.CORRECT  # the checker restored the weights
    rejected_as(ex.check_head_ablation(lambda *a: None, *classifier), "todo")


def test_head_ablation_on_a_larger_set_names_the_full_accuracy():
    model, x, y = _bracket_classifier(200)
    assert ex.check_head_ablation(_head_off, model, x, y) == ex.CORRECT
    rejected_as(ex.check_head_ablation(lambda *a: _head_off(*a, switch_off=False), model, x, y), "all-heads-on")


def test_head_ablation_gives_the_model_back_and_accepts_another_route(classifier):
    model, x, y = classifier

    def by_hook(model, x, y, layer, head):  # zero the head's input to out_proj with a pre-hook
        attn = model.encoder.layers[layer].self_attn

        def zero(module, args):
            z = args[0].clone()
            z[..., head * attn.d_k : (head + 1) * attn.d_k] = 0
            return (z,)

        handle = attn.out_proj.register_forward_pre_hook(zero)
        try:
            return tl.classification_accuracy(model, x, y)
        finally:
            handle.remove()

    assert ex.check_head_ablation(by_hook, model, x, y) == ex.CORRECT
    assert ex.check_head_ablation(_head_off, model, x, y) == ex.CORRECT
