import pytest
import torch

import transformer_lib as tl


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 8, 9, 0]])
    m = tl.padding_mask(tokens, pad_id=0)
    assert m.shape == (2, 1, 1, 4) and m.dtype == torch.bool
    assert m[0, 0, 0].tolist() == [True, True, False, False]
    assert m[1, 0, 0].tolist() == [True, True, True, False]


def test_padding_mask_uses_the_given_pad_id_not_zero():
    tokens = torch.tensor([[0, 3, 9, 9]])
    assert tl.padding_mask(tokens, pad_id=9)[0, 0, 0].tolist() == [True, True, False, False]


def test_causal_mask_is_lower_triangular():
    m = tl.causal_mask(4)
    assert m.dtype == torch.bool
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)


def test_target_mask_combines_padding_and_causal():
    tokens = torch.tensor([[1, 4, 5, 0]])
    m = tl.target_mask(tokens, pad_id=0)
    assert m.shape == (1, 1, 4, 4)
    expected = tl.causal_mask(4).clone()
    expected[:, 3] = False
    assert torch.equal(m[0, 0], expected)


def test_conversion_to_torch_convention_round_trips():
    m = tl.causal_mask(3)
    assert torch.equal(tl.to_torch_convention(m), torch.ones(3, 3, dtype=torch.bool).triu(1))
    assert torch.equal(tl.from_torch_convention(tl.to_torch_convention(m)), m)


def test_combine_rejects_float_masks():
    with pytest.raises(TypeError, match="bool"):
        tl.combine_masks(tl.causal_mask(3), torch.ones(3, 3))


@pytest.mark.parametrize("size, window", [(1, 1), (6, 1), (6, 3), (7, 7), (5, 9)])
def test_sliding_window_mask_is_the_causal_band(size, window):
    mask = tl.sliding_window_mask(size, window)
    brute = torch.tensor([[i - window < j <= i for j in range(size)] for i in range(size)])
    assert mask.dtype == torch.bool and torch.equal(mask, brute)
    assert torch.equal(mask, tl.causal_mask(size)) == (window >= size)


def test_sliding_window_reach_grows_by_window_minus_one_per_layer():
    """Stacked layers see further than one window: the last position's output depends on 1 + L (w - 1) inputs."""
    size, window = 16, 3
    for layers in (1, 2, 3):
        torch.manual_seed(0)
        decoder = tl.Decoder(d_model=16, num_heads=2, num_layers=layers, d_ff=32, dropout=0.0, cross_attention=False)
        x = torch.randn(1, size, 16, requires_grad=True)
        out = decoder(x, tgt_mask=tl.sliding_window_mask(size, window))  # (1, size, 16)
        (out[0, -1] * torch.randn(16)).sum().backward()  # a random direction: a LayerNorm output sums to a constant
        reached = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten()  # input positions the last output depends on
        assert reached.tolist() == list(range(size - 1 - layers * (window - 1), size))


@pytest.mark.parametrize("window", [0, -2, 2.5, True])
def test_sliding_window_mask_refuses_a_bad_window(window):
    with pytest.raises(ValueError, match="window must be a positive int"):
        tl.sliding_window_mask(4, window)
