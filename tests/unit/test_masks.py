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
