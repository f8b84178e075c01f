"""Model surgery: each copy computes the same function as the model it came from, with its inside moved
as promised (heads renumbered, the other rotary layout, one silent layer in front), and the original
is left as it was."""

import pytest
import torch

import transformer_lib as tl
from transformer_lib import inside, surgery


def _model(**overrides):
    cfg = dict(vocab_size=23, d_model=32, num_heads=4, num_layers=2, norm_first=True, max_len=32)
    torch.manual_seed(5)
    model = tl.DecoderOnlyLM(**(cfg | overrides)).eval()
    with torch.no_grad():  # sharp attention, so that a head in the wrong place shows
        for layer in model.decoder.layers:
            layer.self_attn.q_proj.weight.mul_(6.0)
    return model


def _tokens():
    return torch.randint(0, 23, (3, 17), generator=torch.Generator().manual_seed(1))


def _patterns(model, tokens):
    _, cache = inside.run_with_cache(model, tokens)
    return [cache[f"decoder.layers.{i}.self_attn.pattern"] for i in range(len(model.decoder.layers))]


@pytest.mark.parametrize("overrides", [{}, {"positional": "rope", "norm": "rms", "activation": "swiglu"}])
def test_permuted_heads_give_the_same_logits_with_each_head_where_the_order_puts_it(overrides):
    model, x = _model(**overrides), _tokens()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    orders = [[2, 0, 3, 1], [3, 2, 1, 0]]
    twin = surgery.permute_heads(model, orders)
    with torch.no_grad():
        torch.testing.assert_close(twin(x), model(x), atol=1e-5, rtol=0)
    old, new = _patterns(model, x), _patterns(twin, x)
    for i, order in enumerate(orders):
        torch.testing.assert_close(new[i], old[i][:, order], atol=1e-5, rtol=0)  # new head j is old head order[j]
        assert not torch.allclose(new[i], old[i], atol=1e-3)  # the heads did move
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the original untouched


def test_permute_heads_refuses_what_it_cannot_do():
    model = _model()
    with pytest.raises(ValueError, match="one order per layer: the model has 2 layers, got 1"):
        surgery.permute_heads(model, [[0, 1, 2, 3]])
    with pytest.raises(ValueError, match=r"layer 1: an order of the 4 heads 0..3, got \[0, 1, 2, 2\]"):
        surgery.permute_heads(model, [[0, 1, 2, 3], [0, 1, 2, 2]])
    with pytest.raises(ValueError, match="grouped-query attention"):
        surgery.permute_heads(_model(num_kv_heads=2), [[1, 0, 2, 3], [0, 1, 2, 3]])
    with pytest.raises(TypeError, match="takes a DecoderOnlyLM, got Linear"):
        surgery.permute_heads(torch.nn.Linear(2, 2), [])


@pytest.mark.parametrize(
    "overrides",
    [
        {"attention_only": True, "positional": "learned"},
        {},
        {"parallel_block": True, "positional": "rope"},
        {"num_experts": 4, "experts_per_token": 2},
    ],
)
def test_a_prepended_layer_writes_nothing_and_moves_every_head_one_layer_down(overrides):
    model, x = _model(**overrides), _tokens()
    state = torch.random.get_rng_state()
    twin = surgery.prepend_layer(model, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's generator untouched
    assert len(twin.decoder.layers) == 3 and twin.config.num_layers == 3
    with torch.no_grad():
        torch.testing.assert_close(twin(x), model(x), atol=1e-5, rtol=0)
    old, new = _patterns(model, x), _patterns(twin, x)
    for i in range(2):
        torch.testing.assert_close(new[i + 1], old[i], atol=1e-5, rtol=0)
    assert not torch.allclose(new[0], old[0], atol=1e-3)  # the new layer's own heads, measured like the others
    again = surgery.prepend_layer(model, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), twin.parameters()))  # the seed decides


def test_prepend_layer_refuses_a_post_ln_model():
    with pytest.raises(ValueError, match="pre-LN or parallel"):
        surgery.prepend_layer(_model(norm_first=False))


def test_the_copies_stay_on_the_device_and_dtype_of_the_model():
    model = _model(positional="rope").double()
    for twin in (
        surgery.permute_heads(model, [[1, 0, 2, 3]] * 2),
        surgery.prepend_layer(model),
        surgery.with_rotary_layout(model, "interleaved"),
    ):
        assert {p.dtype for p in twin.parameters()} == {torch.float64}
        assert {p.device for p in twin.parameters()} == {next(model.parameters()).device}


def test_hf_reexports_the_rotary_layout_surgery():
    assert tl.hf.with_rotary_layout is surgery.with_rotary_layout
