"""A learner's mistakes get a clear error that names what was expected and what came."""

import pytest
import torch

import transformer_lib as tl


def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"d_model must be divisible by num_heads: got d_model=10, num_heads=3"):
        tl.MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"divisible by num_heads: got d_model=10, num_heads=4"):
        tl.TransformerConfig(d_model=10, num_heads=4)


def test_odd_d_model_for_sinusoidal_encoding():
    with pytest.raises(ValueError, match=r"even.*got d_model=9"):
        tl.SinusoidalPositionalEncoding(9)
    with pytest.raises(ValueError, match=r"even d_model, got 9"):
        tl.Transformer(d_model=9, num_heads=3)
    tl.Transformer(d_model=9, num_heads=3, positional="learned")  # learned PE has no such limit


def test_sequence_longer_than_max_len():
    model = tl.Transformer(vocab_size=10, max_len=8, d_model=16, num_heads=2)
    with pytest.raises(ValueError, match=r"length 9 .*longer than max_len=8"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_token_ids_out_of_vocabulary():
    emb = tl.TokenEmbedding(10, 4)
    with pytest.raises(ValueError, match=r"tokens must hold ids in \[0, 9\] for vocab_size=10, got ids from 0 to 12"):
        emb(torch.tensor([[0, 12]]))
    with pytest.raises(ValueError, match=r"got ids from -1 to 3"):
        emb(torch.tensor([[-1, 3]]))


def test_float_token_ids():
    with pytest.raises(TypeError, match=r"integer token ids \(torch.long\), got dtype torch.float32"):
        tl.TokenEmbedding(10, 4)(torch.tensor([[1.0, 2.0]]))


def test_mask_that_does_not_broadcast():
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    bad = torch.ones(2, 1, 1, 4, dtype=torch.bool)  # 4 keys, but there are 5
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 4\) does not broadcast .*\(2, 2, 5, 5\)"):
            mha(x, x, x, bad, need_weights=need_weights)


def test_mask_of_the_wrong_dtype():
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(TypeError, match=r"mask must be a bool tensor with True = may attend, got dtype torch.float32"):
        mha(x, x, x, torch.ones(3, 3))


def test_key_and_value_of_different_lengths():
    with pytest.raises(
        ValueError, match=r"key and value must have the same length, got key length 5 and value length 4"
    ):
        tl.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), torch.randn(1, 5, 8), torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match=r"key length 5 and value length 4"):
        tl.scaled_dot_product_attention(torch.randn(3, 2), torch.randn(5, 2), torch.randn(4, 2))


def test_d_model_mismatch_between_encoder_output_and_decoder():
    dec = tl.Decoder(num_layers=1, d_model=16, num_heads=2, d_ff=32)
    with pytest.raises(ValueError, match=r"memory must have shape \(B, S, d_model=16\).*got shape \(2, 5, 12\)"):
        dec(torch.randn(2, 3, 16), torch.randn(2, 5, 12))


def test_input_of_wrong_width_for_attention():
    with pytest.raises(ValueError, match=r"query must have last dimension d_model=8, got 6"):
        tl.MultiHeadAttention(8, 2)(torch.randn(1, 3, 6), torch.randn(1, 3, 8), torch.randn(1, 3, 8))


def test_two_dimensional_input_to_attention_module():
    with pytest.raises(ValueError, match=r"query must have shape \(B, T, d_model\), got shape \(3, 8\)"):
        tl.MultiHeadAttention(8, 2)(torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8))


def test_unknown_config_field():
    with pytest.raises(TypeError, match=r"unknown config field\(s\) \['n_heads'\]"):
        tl.Transformer(n_heads=4)


def test_one_dimensional_tokens_to_a_model():
    with pytest.raises(ValueError, match=r"src must be a \(B, S\) tensor of token ids, got \(5,\)"):
        tl.Transformer(vocab_size=10).encode(torch.ones(5, dtype=torch.long))


def test_the_mask_check_follows_pytorchs_broadcasting_rules_on_every_small_shape():
    """attention._broadcasts_to is written out (torch.broadcast_shapes imports sympy): it must agree with torch."""
    import itertools

    from transformer_lib.attention import _broadcasts_to

    target = (2, 3, 4, 5)
    sizes = (1, 2, 3, 4, 5, 6)
    shapes = [shape for rank in range(5) for shape in itertools.product(sizes, repeat=rank)]
    for shape in [*shapes, (1, 2, 3, 4, 5), (1, 1, 1, 1, 1), (2, 2, 3, 4, 5)]:  # and a few with too many dims
        try:
            expected = torch.broadcast_shapes(shape, target) == torch.Size(target)
        except RuntimeError:
            expected = False
        assert _broadcasts_to(shape, target) == expected, shape
