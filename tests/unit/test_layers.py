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


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_residual_wiring_is_pre_or_post_ln(norm_first):
    layer = tl.EncoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.0, norm_first=norm_first).eval()
    x = torch.randn(2, 5, 8)
    attn = lambda y: layer.self_attn(y, y, y)[0]
    if norm_first:  # x + sublayer(norm(x))
        z = x + attn(layer.norm1(x))
        want = z + layer.feed_forward(layer.norm2(z))
    else:  # norm(x + sublayer(x))
        z = layer.norm1(x + attn(x))
        want = layer.norm2(z + layer.feed_forward(z))
    assert torch.allclose(layer(x), want, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_residual_wiring_is_pre_or_post_ln(norm_first):
    layer = tl.DecoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.0, norm_first=norm_first).eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    self_attn = lambda y: layer.self_attn(y, y, y)[0]
    cross = lambda y: layer.cross_attn(y, memory, memory)[0]
    if norm_first:
        z = x + self_attn(layer.norm1(x))
        z = z + cross(layer.norm2(z))
        want = z + layer.feed_forward(layer.norm3(z))
    else:
        z = layer.norm1(x + self_attn(x))
        z = layer.norm2(z + cross(z))
        want = layer.norm3(z + layer.feed_forward(z))
    assert torch.allclose(layer(x, memory), want, atol=1e-6)


def test_arguments_past_the_first_three_are_keyword_only():
    """Swapping two options by position cannot pass silently: they must be named."""
    with pytest.raises(TypeError):
        tl.MultiHeadAttention(8, 2, 0.0, True)
    with pytest.raises(TypeError):
        tl.FeedForward(8, 16, 0.0, "gelu")
    with pytest.raises(TypeError):
        tl.MoEFeedForward(8, 16, 4, 2)
    with pytest.raises(TypeError):
        tl.TokenEmbedding(10, 8, False)
    mha = tl.MultiHeadAttention(8, 2, 0.1, bias=False, rotary=True, rotary_layout="interleaved", rotary_dim=2)
    assert (mha.rotary_layout, mha.rotary_dim, mha.q_proj.bias) == ("interleaved", 2, None)


def test_one_list_of_activations_and_of_rotary_layouts():
    from transformer_lib import config, layers, positional

    assert tuple(layers._FUNCTIONS) == config.ACTIVATIONS
    assert positional.ROTARY_LAYOUTS is config.ROTARY_LAYOUTS
    for name in config.ACTIVATIONS:
        tl.FeedForward(4, 8, activation=name)
    names = r"\('relu', 'gelu', 'gelu_tanh', 'swiglu', 'quick_gelu'\)"
    with pytest.raises(ValueError, match=rf"activation must be one of {names}"):
        tl.FeedForward(4, 8, activation="tanh")


@pytest.mark.parametrize("shared", [True, False])
def test_a_parallel_block_reads_one_norm_or_one_each(shared):
    """GPT-J: x + attn(n1(x)) + ff(n1(x)); GPT-NeoX: x + attn(n1(x)) + ff(n2(x)), in both layers."""
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(d_model=16, num_heads=2, d_ff=32, dropout=0.0, norm_first=True, parallel_block=True)
    cfg = cfg.replace(shared_norm=shared)
    x = torch.randn(2, 5, 16)
    enc, dec = tl.EncoderLayer(cfg).eval(), tl.DecoderLayer(cfg, cross_attention=False).eval()
    for layer, ff_norm in ((enc, enc.norm2), (dec, dec.norm3)):
        assert (ff_norm is None) == shared and layer.attn_norm is layer.norm1
        assert layer.ff_norm is (layer.norm1 if shared else ff_norm)
        with torch.no_grad():
            ff_norm = layer.norm1 if shared else ff_norm
            if not shared:
                ff_norm.weight.normal_()  # a norm of its own, so that using norm1 instead shows
            h = layer.norm1(x)
            want = x + layer.self_attn(h, h, h)[0] + layer.feed_forward(ff_norm(x))
            torch.testing.assert_close(layer(x), want, atol=1e-6, rtol=0)


def test_shared_norm_belongs_to_a_parallel_block():
    with pytest.raises(ValueError, match="shared_norm=False .* needs parallel_block=True"):
        tl.TransformerConfig(norm_first=True, shared_norm=False)
    with pytest.raises(ValueError, match="shared_norm must be True or False"):
        tl.TransformerConfig(norm_first=True, parallel_block=True, shared_norm=0)
    with pytest.raises(ValueError, match="a parallel block has no cross-attention"):
        tl.DecoderLayer(d_model=8, num_heads=2, norm_first=True, parallel_block=True)


def test_the_residual_wiring_is_one_function_for_both_layers():
    import inspect

    for layer in (tl.EncoderLayer, tl.DecoderLayer):
        source = inspect.getsource(layer.forward)
        assert "residual(" in source and "norm_first" not in source and "parallel_block" not in source
