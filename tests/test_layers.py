import pytest
import torch
from torch import nn

import transformer_lib as tl


@pytest.mark.parametrize("d_model", [1, 7, 64])
def test_layer_norm_matches_torch(d_model):
    ours, ref = tl.LayerNorm(d_model), nn.LayerNorm(d_model)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
        ours.weight.copy_(ref.weight)
        ours.bias.copy_(ref.bias)
    x = torch.randn(3, 5, d_model) * 4 + 2
    assert torch.allclose(ours(x), ref(x), atol=1e-5)
    # and the closed form the chapter builds by hand: biased variance, eps inside the root, per-feature affine
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    by_hand = (x - mean) / torch.sqrt(var + ours.eps) * ours.weight + ours.bias
    assert torch.allclose(ours(x), by_hand, atol=1e-5)


def test_layer_norm_has_one_gain_and_bias_per_feature():
    ln = tl.LayerNorm(10)
    assert ln.weight.shape == (10,) and ln.bias.shape == (10,)


def test_feed_forward_acts_on_each_position_independently():
    ff = tl.FeedForward(8, 32)
    x = torch.randn(2, 6, 8)
    full = ff(x)
    for t in range(6):
        assert torch.allclose(full[:, t], ff(x[:, t]), atol=1e-6)


def test_add_norm_post_and_pre():
    x = torch.randn(2, 3, 4)
    sub = lambda y: 2 * y
    post = tl.AddNorm(4, norm_first=False)
    pre = tl.AddNorm(4, norm_first=True)
    assert torch.allclose(post(x, sub), post.norm(x + 2 * x), atol=1e-6)
    assert torch.allclose(pre(x, sub), x + 2 * pre.norm(x), atol=1e-6)


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\], got 'tanh'"):
        tl.FeedForward(4, 8, activation="tanh")
