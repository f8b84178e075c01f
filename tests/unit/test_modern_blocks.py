"""The blocks of today's models as config fields: RMSNorm, the SwiGLU feed-forward, bias-free linears."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lib as tl


def test_rms_norm_equals_torch_rms_norm():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16) * 4 + 2
    ours = tl.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.rand(16) + 0.5)
    theirs = nn.RMSNorm(16, eps=1e-6)
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
    # and by hand: the root mean square of every output vector is the gain's scale, not its mean
    plain = tl.RMSNorm(16)(x)
    torch.testing.assert_close(plain.pow(2).mean(-1), torch.ones(3, 7), atol=1e-4, rtol=0)
    assert not torch.allclose(plain.mean(-1), torch.zeros(3, 7), atol=1e-2)  # no mean is subtracted


def test_norm_field_reaches_every_norm_of_every_stack():
    cfg = tl.TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, d_ff=32, norm="rms",
                               norm_first=True)  # fmt: skip
    model = tl.Transformer(cfg)
    norms = [m for m in model.modules() if isinstance(m, (tl.LayerNorm, tl.RMSNorm))]
    assert norms and all(isinstance(m, tl.RMSNorm) for m in norms)
    assert len(norms) == 2 * 2 + 3 * 2 + 2  # encoder layers, decoder layers, one final norm per stack


def test_swiglu_feed_forward_by_hand():
    torch.manual_seed(1)
    ff = tl.FeedForward(8, 12, activation="swiglu", bias=False)
    x = torch.randn(2, 5, 8)
    want = (F.silu(x @ ff.linear1.weight.T) * (x @ ff.linear3.weight.T)) @ ff.linear2.weight.T
    torch.testing.assert_close(ff(x), want)


def test_two_thirds_width_keeps_the_parameter_count():
    relu = tl.FeedForward(96, 384, bias=False)
    swiglu = tl.FeedForward(96, 384 * 2 // 3, activation="swiglu", bias=False)
    assert tl.count_parameters(relu) == tl.count_parameters(swiglu) == 2 * 96 * 384


def test_bias_field_removes_every_projection_bias():
    cfg = tl.TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, d_ff=32, bias=False,
                               activation="swiglu", norm="rms")  # fmt: skip
    lm = tl.DecoderOnlyLM(cfg)
    layer = lm.decoder.layers[0]
    linears = [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.out_proj,
               layer.feed_forward.linear1, layer.feed_forward.linear2, layer.feed_forward.linear3]  # fmt: skip
    assert all(m.bias is None for m in linears)
    out = lm(torch.randint(1, 11, (2, 6)))
    assert out.shape == (2, 6, 11) and torch.isfinite(out).all()


def test_clear_errors_for_the_new_fields():
    with pytest.raises(ValueError, match=r"norm must be one of \('layer', 'rms'\), got 'batch'"):
        tl.TransformerConfig(norm="batch")
    with pytest.raises(ValueError, match="activation must be one of .*'swiglu'.*got 'swish'"):
        tl.TransformerConfig(activation="swish")
    with pytest.raises(ValueError, match="bias must be True or False, got 'no'"):
        tl.TransformerConfig(bias="no")


def test_torch_nn_interop_refuses_blocks_it_does_not_have():
    layer = tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, norm="rms")
    with pytest.raises(ValueError, match="norm='rms'"):
        tl.to_torch(layer)
    theirs = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    with pytest.raises(ValueError, match="activation differs: ours is 'swiglu'"):
        tl.load_from_torch(tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, activation="swiglu"), theirs)
    no_bias = tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, dropout=0.0, bias=False)
    with pytest.raises(ValueError, match="bias differs: ours is False"):
        tl.load_from_torch(no_bias, theirs)
