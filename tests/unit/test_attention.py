import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl


def _qkv(B=2, h=3, T_q=4, T_k=6, d=8):
    return torch.randn(B, h, T_q, d), torch.randn(B, h, T_k, d), torch.randn(B, h, T_k, d)


def test_weights_path_matches_pytorch_fused_attention():
    q, k, v = _qkv()
    out, weights = tl.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 4), atol=1e-6)


def test_weights_are_softmax_of_scaled_scores_in_closed_form():
    q = torch.tensor([[1.0, 0.0]])
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    v = torch.tensor([[10.0], [20.0]])
    out, w = tl.scaled_dot_product_attention(q, k, v)
    e = math.exp(1 / math.sqrt(2))
    assert w[0].tolist() == pytest.approx([e / (e + 1), 1 / (e + 1)], abs=1e-6)
    assert out.item() == pytest.approx(10 * e / (e + 1) + 20 / (e + 1), abs=1e-5)


def test_masked_keys_get_zero_weight_and_both_paths_agree():
    q, k, v = _qkv()
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 3:] = False
    out, w = tl.scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(w[1, :, :, 3:] == 0)
    assert torch.allclose(out, tl.fused_attention(q, k, v, mask), atol=1e-6)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_row_gives_zeros_not_nan_with_finite_gradients(need_weights):
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[0, 0, 2] = False  # query 2 of batch 0 may attend to nothing
    out, w = mha(x, x, x, mask, need_weights=need_weights)
    assert not torch.isnan(out).any()
    expected_row = mha.out_proj.bias  # zero attention output, then the output projection's bias
    assert torch.allclose(out[0, 2], expected_row, atol=1e-6)
    if need_weights:
        assert torch.all(w[0, :, 2] == 0)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_fully_masked_row_function_level_zeros():
    q, k, v = _qkv(B=1, h=1, T_q=2, T_k=3)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out, w = tl.scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[0, 0, 1], torch.zeros(8)) and torch.equal(w[0, 0, 1], torch.zeros(3))
    assert torch.equal(tl.fused_attention(q, k, v, mask)[0, 0, 1], torch.zeros(8))


def test_multi_head_equals_separate_per_head_attention():
    torch.manual_seed(1)
    d_model, h = 12, 3
    mha = tl.MultiHeadAttention(d_model, h).eval()
    x = torch.randn(2, 5, d_model)
    out, _ = mha(x, x, x)
    d_k = d_model // h
    heads = []
    for i in range(h):
        rows = slice(i * d_k, (i + 1) * d_k)
        q = x @ mha.q_proj.weight[rows].T + mha.q_proj.bias[rows]
        k = x @ mha.k_proj.weight[rows].T + mha.k_proj.bias[rows]
        v = x @ mha.v_proj.weight[rows].T + mha.v_proj.bias[rows]
        heads.append(tl.scaled_dot_product_attention(q, k, v)[0])
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    assert torch.allclose(out, expected, atol=1e-5)


def test_fused_and_weights_paths_of_the_module_agree():
    mha = tl.MultiHeadAttention(16, 4).eval()
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 9, 16)
    mask = tl.padding_mask(torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 2 + [0] * 7]), 0)
    fused, none = mha(q, kv, kv, mask)
    slow, w = mha(q, kv, kv, mask, need_weights=True)
    assert none is None and w.shape == (3, 4, 5, 9)
    assert torch.allclose(fused, slow, atol=1e-5)


def test_cross_attention_with_different_lengths():
    mha = tl.MultiHeadAttention(8, 2)
    out, w = mha(torch.randn(2, 3, 8), torch.randn(2, 11, 8), torch.randn(2, 11, 8), need_weights=True)
    assert out.shape == (2, 3, 8) and w.shape == (2, 2, 3, 11)


def test_capture_attention_records_every_layer_and_cleans_up():
    model = tl.Transformer(vocab_size=10, d_model=16, num_heads=2, num_layers=2).eval()
    src, tgt = torch.randint(1, 10, (1, 5)), torch.randint(1, 10, (1, 4))
    with tl.capture_attention(model) as maps:
        model(src, tgt)
    assert set(maps) == {
        "encoder.layers.0.self_attn",
        "encoder.layers.1.self_attn",
        "decoder.layers.0.self_attn",
        "decoder.layers.1.self_attn",
        "decoder.layers.0.cross_attn",
        "decoder.layers.1.cross_attn",
    }
    assert maps["decoder.layers.1.cross_attn"].shape == (1, 2, 4, 5)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())  # nothing left behind


def test_the_weights_come_from_hooks_and_nothing_is_kept_on_the_module():
    """watch_weights hands over the weights a need_weights call returns, whatever the caller asked."""
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(8, 2).eval()
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    _, want = mha(q, kv, kv, need_weights=True)
    seen = []
    handles = tl.watch_weights(mha, seen.append)
    out, weights = mha(q, kv, kv)  # the caller asked for nothing
    mha(q, kv, kv, None, False)  # need_weights by position
    for h in handles:
        h.remove()
    assert len(seen) == 2 and all(torch.equal(w, want) for w in seen) and not seen[0].requires_grad
    assert weights is not None  # the call took the step-by-step path
    assert mha(q, kv, kv)[1] is None and not mha._forward_hooks  # and after: the fused path, no hook
    assert not [n for n in vars(mha) if "weights" in n]  # no state on the module
    with pytest.raises(TypeError, match="watch_weights takes a MultiHeadAttention, got Linear"):
        tl.watch_weights(torch.nn.Linear(2, 2), print)


@settings(max_examples=30, deadline=None)
@given(
    B=st.integers(1, 3),
    h=st.integers(1, 4),
    d_k=st.integers(1, 6),
    T_q=st.integers(1, 7),
    T_k=st.integers(1, 7),
    seed=st.integers(0, 1000),
)
def test_property_shapes_and_paths_agree(B, h, d_k, T_q, T_k, seed):
    torch.manual_seed(seed)
    d_model = h * d_k
    mha = tl.MultiHeadAttention(d_model, h).eval()
    q, kv = torch.randn(B, T_q, d_model), torch.randn(B, T_k, d_model)
    mask = torch.rand(B, 1, T_q, T_k) > 0.3
    fused, _ = mha(q, kv, kv, mask)
    slow, w = mha(q, kv, kv, mask, need_weights=True)
    assert fused.shape == (B, T_q, d_model) and w.shape == (B, h, T_q, T_k)
    assert torch.isfinite(fused).all()
    assert torch.allclose(fused, slow, atol=1e-5)
    row_sums = w.sum(-1)  # 1 where any key is allowed, 0 where none is
    assert torch.allclose(row_sums, mask.any(-1).expand(B, h, T_q).float(), atol=1e-5)


def test_qk_norm_makes_the_scores_blind_to_the_size_of_the_query_and_key_weights():
    """With QK-norm every head's query and key are normalised before the dot product: multiplying W_q and W_k by 10
    changes nothing, where without it the softmax sharpens. Its norms are RMSNorm over one head's d_k."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    for qk_norm in (True, False):
        mha = tl.MultiHeadAttention(16, 4, qk_norm=qk_norm).eval()
        _, before = mha(x, x, x, need_weights=True)
        with torch.no_grad():
            mha.q_proj.weight.mul_(10.0)
            mha.k_proj.weight.mul_(10.0)
            mha.q_proj.bias.mul_(10.0)
            mha.k_proj.bias.mul_(10.0)
        _, after = mha(x, x, x, need_weights=True)
        assert torch.allclose(before, after, atol=1e-5) == qk_norm
    assert tuple(tl.MultiHeadAttention(16, 4, qk_norm=True).q_norm.weight.shape) == (4,)  # one gain per d_k
