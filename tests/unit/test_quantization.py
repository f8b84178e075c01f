"""int8 per-channel weights: PyTorch's own quantizer agrees, the error bound holds, the model shrinks."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import transformer_lib as tl
from transformer_lib import quantization as qz


def test_per_channel_int8_equals_pytorchs_quantize_per_channel_and_stays_within_half_a_step():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 40, generator=g) * torch.tensor([0.01, 0.1, 1.0, 3.0, 0.5, 2.0])[:, None]
    w[3, 7] = 25.0  # one large weight in a row: that row's step grows, the others' do not
    q, scale = qz.quantize_per_channel(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127 and scale.shape == (6,)
    with warnings.catch_warnings():  # PyTorch marks its quantized tensors deprecated; they are still the reference
        warnings.simplefilter("ignore", UserWarning)
        reference = torch.quantize_per_channel(w, scale.double(), torch.zeros(6, dtype=torch.long), 0, torch.qint8)
    assert torch.equal(q, reference.int_repr())  # PyTorch's quantizer, given the same scales
    torch.testing.assert_close(qz.dequantize(q, scale), reference.dequantize())
    error = (qz.dequantize(q, scale) - w).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()
    assert scale[3] > 5 * scale[2]  # the row with the outlier pays for it alone
    q0, s0 = qz.quantize_per_channel(torch.zeros(2, 3))
    assert torch.equal(q0, torch.zeros(2, 3, dtype=torch.int8)) and torch.equal(s0, torch.ones(2))
    with pytest.raises(ValueError, match="2-D float tensor"):
        qz.quantize_per_channel(torch.ones(3, dtype=torch.int64))


def test_a_quantized_model_computes_with_the_dequantized_weights_and_is_about_four_times_smaller():
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(
        vocab_size=30,
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=256,
        dropout=0.0,
        norm_first=True,
        tie_embeddings=True,
    ).eval()
    small = qz.quantize_model(copy.deepcopy(model))
    linears = [m for m in small.modules() if isinstance(m, torch.nn.Linear)]
    assert [n for n, m in small.named_modules() if isinstance(m, torch.nn.Linear)] == ["head"]  # tied: kept
    assert len(linears) == 1 and sum(isinstance(m, qz.Int8Linear) for m in small.modules()) == 2 * 6
    x = torch.randint(1, 30, (2, 12))
    with torch.no_grad():
        want = copy.deepcopy(model)
        for name, m in want.named_modules():  # the same model with each quantized weight put back as floats
            if isinstance(m, torch.nn.Linear) and name != "head":
                m.weight.copy_(qz.dequantize(*qz.quantize_per_channel(m.weight)))
        torch.testing.assert_close(small(x), want(x), atol=1e-5, rtol=1e-5)
        assert (small(x) - model(x)).abs().max() < 0.05
    linear_bytes = sum(
        m.weight.numel() * 4 for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "head"
    )
    saved = qz.model_bytes(model) - qz.model_bytes(small)
    assert saved > 0.7 * linear_bytes  # 4 bytes -> 1 per weight, plus one scale per row


def test_the_shipped_shakespeare_model_in_int8_keeps_its_bits_per_character_at_under_a_third_of_the_size():
    import math

    model, _ = tl.load_checkpoint("shakespeare_char")
    valid = tl.recipes.shakespeare_data("char")[2][: 32 * 128 + 1]  # 32 windows of the held-out play
    small = qz.quantize_model(copy.deepcopy(model))
    fp32 = tl.lm_eval_loss(model, valid, 128) / math.log(2)
    int8 = tl.lm_eval_loss(small, valid, 128) / math.log(2)
    print(
        f"fp32 {fp32:.4f} bits per character, {qz.model_bytes(model) / 1e6:.2f} MB; "
        f"int8 {int8:.4f}, {qz.model_bytes(small) / 1e6:.2f} MB"
    )
    assert abs(int8 - fp32) < 0.02
    assert qz.model_bytes(small) < 0.35 * qz.model_bytes(model)


def test_zero_point_int8_equals_pytorchs_observer_and_quantizer_and_stays_within_half_a_step():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 100, generator=g) * torch.rand(64, 1, generator=g) * 3 + torch.randn(64, 1, generator=g) * 0.5
    w[5] = w[5].abs()  # a row with no negative weight: its zero point is 0
    w[6] = -w[6].abs()  # and one with no positive weight: 255
    q, scale, zero_point = qz.quantize_per_channel_zero_point(w)
    assert q.dtype == torch.uint8 and zero_point.dtype == torch.uint8 and scale.shape == zero_point.shape == (64,)
    assert zero_point[5] == 0 and zero_point[6] == 255
    with warnings.catch_warnings():  # PyTorch marks its quantized tensors deprecated; they are still the reference
        warnings.simplefilter("ignore", UserWarning)
        observer = torch.ao.quantization.PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.quint8, qscheme=torch.per_channel_affine
        )
        observer(w)
        ref_scale, ref_zero_point = observer.calculate_qparams()  # PyTorch's own choice of scale and zero point
        reference = torch.quantize_per_channel(w, ref_scale, ref_zero_point, 0, torch.quint8)
    torch.testing.assert_close(scale, ref_scale)
    assert torch.equal(zero_point.long(), ref_zero_point.long())
    assert torch.equal(q, reference.int_repr())
    torch.testing.assert_close(qz.dequantize(q, scale, zero_point), reference.dequantize())
    error = (qz.dequantize(q, scale, zero_point) - w).abs()
    assert (error <= scale[:, None] / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="2-D float tensor"):
        qz.quantize_per_channel_zero_point(torch.ones(3, 4, dtype=torch.int64))


def test_zero_point_int8_by_hand_and_where_it_beats_absmax():
    # lo = -1, hi = 3: scale 4 / 255, zero point round(63.75) = 64; 0.5 / scale = 31.875 -> 32; 3 / scale -> 191
    q, scale, zero_point = qz.quantize_per_channel_zero_point(torch.tensor([[-1.0, 0.0, 0.5, 3.0]]))
    assert q.tolist() == [[0, 64, 96, 255]] and zero_point.tolist() == [64]
    torch.testing.assert_close(scale, torch.tensor([4.0 / 255]))
    assert qz.dequantize(q, scale, zero_point)[0, 1] == 0.0  # zero stays exactly zero
    q0, s0, z0 = qz.quantize_per_channel_zero_point(torch.zeros(2, 3))
    assert q0.eq(0).all() and s0.eq(1).all() and z0.eq(0).all()
    # weights all of one sign (ReLU outputs, say): absmax spends half its grid on values that never occur
    w = torch.rand(8, 200, generator=torch.Generator().manual_seed(1))
    absmax_error = (qz.dequantize(*qz.quantize_per_channel(w)) - w).abs().mean()
    zero_point_error = (qz.dequantize(*qz.quantize_per_channel_zero_point(w)) - w).abs().mean()
    assert zero_point_error < 0.6 * absmax_error  # a step of max / 255 instead of max / 127


def test_a_zero_point_layer_computes_with_its_dequantized_weight_and_a_bad_scheme_is_refused():
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 10)
    layer = qz.Int8Linear(linear, scheme="zero_point")
    x = torch.randn(3, 5, 24)
    want = torch.nn.functional.linear(x, qz.dequantize(layer.q, layer.scale, layer.zero_point), linear.bias)
    torch.testing.assert_close(layer(x), want)
    assert (layer(x) - linear(x)).abs().max() < 0.02
    assert layer.q.dtype == torch.uint8 and {n for n, _ in layer.named_buffers()} == {"q", "scale", "zero_point"}
    assert {n for n, _ in qz.Int8Linear(linear).named_buffers()} == {"q", "scale"}  # absmax: no zero point
    model = tl.DecoderOnlyLM(vocab_size=30, d_model=32, num_heads=4, num_layers=1, d_ff=64, tie_embeddings=True)
    small = qz.quantize_model(copy.deepcopy(model), scheme="zero_point")
    assert {m.scheme for m in small.modules() if isinstance(m, qz.Int8Linear)} == {"zero_point"}
    with pytest.raises(ValueError, match="scheme must be one of"):
        qz.quantize_model(copy.deepcopy(model), scheme="int4")
    with pytest.raises(ValueError, match="scheme must be one of"):
        qz.Int8Linear(linear, scheme="symmetric")
