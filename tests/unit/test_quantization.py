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
