import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib import positional


def test_sinusoidal_matches_the_closed_form_at_every_entry():
    max_len, d_model = 50, 16
    pe = tl.sinusoidal_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_position_zero_is_zeros_and_ones():
    pe = tl.sinusoidal_encoding(4, 8)
    assert torch.equal(pe[0, 0::2], torch.zeros(4))
    assert torch.equal(pe[0, 1::2], torch.ones(4))


def test_dot_product_between_positions_depends_only_on_offset():
    pe = tl.sinusoidal_encoding(100, 32)
    offset = 5
    dots = torch.stack([pe[p] @ pe[p + offset] for p in range(0, 90)])
    assert torch.allclose(dots, dots[0].expand_as(dots), atol=1e-4)


def test_module_adds_encoding_to_batch_first_input_along_sequence_axis():
    module = tl.SinusoidalPositionalEncoding(d_model=8, max_len=20)
    x = torch.zeros(3, 5, 8)  # (B, S, d_model) with B != S
    out = module(x)
    assert out.shape == (3, 5, 8)
    for b in range(3):
        assert torch.allclose(out[b], tl.sinusoidal_encoding(20, 8)[:5])


def test_offset_continues_positions():
    module = tl.SinusoidalPositionalEncoding(d_model=8, max_len=20)
    x = torch.zeros(1, 3, 8)
    assert torch.allclose(module(x, offset=4)[0], tl.sinusoidal_encoding(20, 8)[4:7])


def test_odd_d_model_is_a_clear_error():
    with pytest.raises(ValueError, match=r"d_model must be even; got d_model=7"):
        tl.sinusoidal_encoding(10, 7)


@pytest.mark.parametrize("kind", [tl.SinusoidalPositionalEncoding, tl.LearnedPositionalEncoding])
def test_sequence_longer_than_max_len_is_a_clear_error(kind):
    module = kind(d_model=8, max_len=6)
    with pytest.raises(ValueError, match=r"length 7 .* longer than max_len=6"):
        module(torch.zeros(2, 7, 8))


def test_learned_encoding_has_one_trainable_vector_per_position():
    module = tl.LearnedPositionalEncoding(d_model=8, max_len=12)
    x = torch.zeros(2, 4, 8)
    out = module(x)
    assert torch.allclose(out[0], module.table.weight[:4])
    out.sum().backward()
    assert module.table.weight.grad[:4].abs().sum() > 0
    assert module.table.weight.grad[4:].abs().sum() == 0


def test_interleaved_and_partial_rotary_by_hand_and_the_permutation_between_layouts():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g)  # (B, h, T, d)
    positions = torch.tensor([0, 1, 4, 9, 30])
    r, base = 6, 10000.0
    cos, sin = positional.rotary_tables(positions, 8, base, layout="interleaved", rotary_dim=r)
    got = positional.turn(x, cos, sin, "interleaved", r)
    want = x.clone()
    for i in range(r // 2):  # pair (2i, 2i + 1) turns by position * base^(-2i/r); dimensions 6, 7 stay
        angle = positions.double() * base ** (-2 * i / r)
        a, b = x[..., 2 * i].double(), x[..., 2 * i + 1].double()
        want[..., 2 * i] = (a * angle.cos() - b * angle.sin()).float()
        want[..., 2 * i + 1] = (a * angle.sin() + b * angle.cos()).float()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(got[..., r:], x[..., r:])
    # rotate-half on rows permuted by rotary_permutation is the interleaved rotation, permuted the same way
    perm = positional.rotary_permutation(8, r, to="half")
    assert perm.tolist() == [0, 2, 4, 1, 3, 5, 6, 7]
    half = positional.turn(x[..., perm], *positional.rotary_tables(positions, 8, base, "half", r), "half", r)
    torch.testing.assert_close(half, got[..., perm], atol=1e-5, rtol=1e-5)
    back = positional.rotary_permutation(8, r, to="interleaved")
    assert torch.equal(perm[back], torch.arange(8))
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        positional.rotary_tables(positions, 8, rotary_dim=5)
    with pytest.raises(ValueError, match="rotary layout must be one of"):
        positional.rotary_permutation(8, to="pairs")
