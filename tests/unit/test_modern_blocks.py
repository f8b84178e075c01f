"""The blocks of today's models as config fields: RMSNorm, the SwiGLU feed-forward, bias-free linears."""

import math

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
    cfg = tl.TransformerConfig(
        vocab_size=11, d_model=16, num_heads=2, num_layers=2, d_ff=32, norm="rms", norm_first=True
    )
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
    cfg = tl.TransformerConfig(
        vocab_size=11, d_model=16, num_heads=2, num_layers=1, d_ff=32, bias=False, activation="swiglu", norm="rms"
    )
    lm = tl.DecoderOnlyLM(cfg)
    layer = lm.decoder.layers[0]
    linears = [
        layer.self_attn.q_proj,
        layer.self_attn.k_proj,
        layer.self_attn.v_proj,
        layer.self_attn.out_proj,
        layer.feed_forward.linear1,
        layer.feed_forward.linear2,
        layer.feed_forward.linear3,
    ]
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


def _mha_with_shared_heads(gqa: tl.MultiHeadAttention) -> tl.MultiHeadAttention:
    """A standard multi-head attention whose key and value heads repeat gqa's, one copy per query head."""
    mha = tl.MultiHeadAttention(gqa.d_model, gqa.num_heads)
    group, d_k = gqa.num_heads // gqa.num_kv_heads, gqa.d_k
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            w = getattr(gqa, name).weight.view(gqa.num_kv_heads, d_k, -1)  # (h_kv, d_k, d_model)
            b = getattr(gqa, name).bias.view(gqa.num_kv_heads, d_k)  # (h_kv, d_k)
            getattr(mha, name).weight.copy_(w.repeat_interleave(group, 0).reshape(-1, gqa.d_model))
            getattr(mha, name).bias.copy_(b.repeat_interleave(group, 0).reshape(-1))
    return mha


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_grouped_query_attention_equals_mha_with_shared_heads_and_torch(num_kv_heads):
    torch.manual_seed(2)
    gqa = tl.MultiHeadAttention(32, 4, num_kv_heads=num_kv_heads).eval()
    assert gqa.k_proj.out_features == num_kv_heads * 8
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mha = _mha_with_shared_heads(gqa).eval()
    for need_weights in (False, True):
        torch.testing.assert_close(gqa(x, memory, memory, mask, need_weights)[0], mha(x, memory, memory, mask)[0])
    # and PyTorch's own grouped-query kernel on the same projections
    q = gqa.split_heads(gqa.q_proj(x))  # (2, 4, 5, 8)
    k = gqa.split_heads(gqa.k_proj(memory), num_kv_heads)  # (2, h_kv, 7, 8)
    v = gqa.split_heads(gqa.v_proj(memory), num_kv_heads)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (2, 4, 5, 8)
    torch.testing.assert_close(gqa(x, memory, memory, mask)[0], gqa.out_proj(gqa.combine_heads(theirs)))


def test_kv_cache_memory_shrinks_with_the_key_value_heads():
    sizes = {}
    for kv in (8, 2, 1):
        torch.manual_seed(0)
        lm = tl.DecoderOnlyLM(
            vocab_size=20, d_model=64, num_heads=8, num_kv_heads=kv, num_layers=2, d_ff=64, dropout=0.0
        ).eval()
        prompt = torch.randint(1, 20, (1, 4))
        with_cache = lm.generate(prompt, max_new_tokens=12, temperature=0.0)
        assert torch.equal(with_cache, lm.generate(prompt, max_new_tokens=12, temperature=0.0, use_cache=False))
        caches = lm.new_cache()
        with torch.no_grad():
            lm(with_cache, caches=caches)
        sizes[kv] = sum(t.numel() * t.element_size() for c in caches for t in (c.key, c.value))
    assert sizes[8] == 4 * sizes[2] == 8 * sizes[1]  # h, h/4 and 1 key-value heads


def test_grouped_query_errors_are_clear():
    with pytest.raises(
        ValueError, match=r"num_heads must be divisible by num_kv_heads: got num_heads=4, num_kv_heads=3"
    ):
        tl.TransformerConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive int, got 0"):
        tl.TransformerConfig(num_kv_heads=0)
    with pytest.raises(ValueError, match="num_heads=6, num_kv_heads=4"):
        tl.MultiHeadAttention(48, 6, num_kv_heads=4)
    with pytest.raises(ValueError, match="one key-value head per head"):
        tl.to_torch(tl.MultiHeadAttention(16, 4, num_kv_heads=2))
    assert tl.TransformerConfig(num_heads=8).replace(num_heads=4).num_kv_heads == 4  # it follows num_heads


def test_rotary_positions_turn_each_pair_by_the_closed_form_angle():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # (T=3, d=2): one pair, dimensions (0, 1)
    out = tl.apply_rotary(x, torch.tensor([0, 1, 2]))
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(2), math.sin(2)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0], [c1, s1], [-s2, c2]]))
    # with d = 8 the pair (i, i + 4) turns by p * 10000 ** (-2i / 8): check pair i = 1 at position 5
    v = torch.zeros(6, 8)
    v[5, 1] = 1.0
    angle = 5 * 10000 ** (-2 / 8)
    rotated = tl.apply_rotary(v, torch.arange(6))[5]
    torch.testing.assert_close(rotated[[1, 5]], torch.tensor([math.cos(angle), math.sin(angle)]))
    torch.testing.assert_close(rotated.norm(), torch.tensor(1.0))  # a rotation keeps the length


def test_rotary_scores_depend_only_on_the_offset():
    torch.manual_seed(3)
    q, k = torch.randn(16), torch.randn(16)

    def score(m, n):
        rq = tl.apply_rotary(q.expand(1, 16), torch.tensor([m]))[0]
        rk = tl.apply_rotary(k.expand(1, 16), torch.tensor([n]))[0]
        return (rq @ rk).item()

    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-5) == pytest.approx(score(40, 36), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)  # a different offset, a different score


def test_rope_model_positions_live_in_self_attention_and_the_cache_keeps_them():
    torch.manual_seed(4)
    modern = dict(positional="rope", norm="rms", activation="swiglu", bias=False, num_kv_heads=2, norm_first=True)
    lm = tl.DecoderOnlyLM(vocab_size=20, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, **modern).eval()
    assert isinstance(lm.pos, tl.RotaryPositions) and all(layer.self_attn.rotary for layer in lm.decoder.layers)
    prompt = torch.randint(1, 20, (2, 5))
    cached = lm.generate(prompt, max_new_tokens=10, temperature=0.0)
    assert torch.equal(cached, lm.generate(prompt, max_new_tokens=10, temperature=0.0, use_cache=False))
    order = lm(prompt)[:, -1]
    assert not torch.allclose(order, lm(prompt.flip(1))[:, -1], atol=1e-4)  # position matters
    seq2seq = tl.Transformer(vocab_size=20, d_model=32, num_heads=4, num_layers=1, d_ff=64, positional="rope")
    layer = seq2seq.decoder.layers[0]
    assert layer.self_attn.rotary and not layer.cross_attn.rotary  # no shared positions across the two stacks


def test_rope_errors_and_interop_are_clear():
    with pytest.raises(ValueError, match="rotary positions need an even head width d_model // num_heads, got 3"):
        tl.TransformerConfig(d_model=12, num_heads=4, positional="rope")
    with pytest.raises(ValueError, match="positional must be one of .*'rope'.*got 'alibi'"):
        tl.TransformerConfig(positional="alibi")
    with pytest.raises(ValueError, match="no rotary positions"):
        tl.to_torch(tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, positional="rope"))
    with pytest.raises(ValueError, match="no rotary positions"):
        tl.load_from_torch(
            tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, positional="rope"),
            nn.TransformerEncoderLayer(16, 2, 32, batch_first=True),
        )


def test_a_preallocated_kv_cache_gives_the_same_keys_and_tokens():
    torch.manual_seed(5)
    grow, fixed = tl.KVCache(), tl.KVCache(capacity=7)
    for n in (3, 1, 1, 2):
        k, v = torch.randn(2, 4, n, 8), torch.randn(2, 4, n, 8)
        a, b = grow.update(k, v), fixed.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and len(grow) == len(fixed)
    with pytest.raises(ValueError, match="the cache holds 7 positions; 7 \\+ 1 would not fit"):
        fixed.update(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8))
    lm = tl.DecoderOnlyLM(vocab_size=30, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0).eval()
    prompt = torch.randint(1, 30, (3, 4))
    cached = lm.generate(prompt, max_new_tokens=15, temperature=0.0)  # preallocated caches, no mask per step
    assert torch.equal(cached, lm.generate(prompt, max_new_tokens=15, temperature=0.0, use_cache=False))


def test_the_kv_cache_memory_shrinks_with_the_key_value_heads():
    """Measured on the caches generate fills: h, h/4 and 1 key-value heads hold h, h/4 and 1 heads' keys and values."""
    held = {}
    for kv in (8, 2, 1):
        torch.manual_seed(0)
        lm = tl.DecoderOnlyLM(
            vocab_size=20, d_model=64, num_heads=8, num_kv_heads=kv, num_layers=2, d_ff=64, dropout=0.0, max_len=64
        ).eval()
        caches = lm.new_cache(capacity=40)
        lm(torch.randint(0, 20, (3, 40)), caches)
        held[kv] = sum(c.nbytes for c in caches)
    assert held[8] == 2 * 2 * 3 * 8 * 40 * 8 * 4  # layers x (K, V) x B x heads x positions x d_k x 4 bytes
    assert held[8] == 4 * held[2] == 8 * held[1]
    grow = tl.KVCache()
    assert grow.nbytes == 0
    grow.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    assert grow.nbytes == 2 * 24 * 4


def test_the_rotary_tables_a_layer_keeps_give_exactly_the_angles_computed_per_call():
    """MultiHeadAttention keeps cos and sin for positions 0..n and slices them; apply_rotary computes them each call."""
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(16, 2, rotary=True).eval()
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        q = mha.split_heads(mha.q_proj(x))  # (B, h, T, d_k)
        out = mha(x, x, x, need_weights=True)[1]
        cos, sin = mha._rotary
        assert cos.shape[0] >= 9
        past = torch.arange(3, 9)
        assert torch.equal(tl.positional.turn(q[:, :, 3:], cos[3:9], sin[3:9]), tl.apply_rotary(q[:, :, 3:], past))
        k = mha.split_heads(mha.k_proj(x))
        scores = tl.apply_rotary(q, torch.arange(9)) @ tl.apply_rotary(k, torch.arange(9)).transpose(-2, -1)
        assert torch.allclose(out, (scores / 8**0.5).softmax(-1), atol=1e-6)
        longer = torch.randn(1, 20, 16)
        mha(longer, longer, longer)  # a longer input grows the kept tables
        assert mha._rotary[0].shape[0] >= 20 and torch.equal(mha._rotary[0][:9], cos[:9])


def test_a_parallel_block_adds_attention_and_feed_forward_of_one_norm_and_refuses_what_it_cannot_be():
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(d_model=16, num_heads=2, d_ff=32, dropout=0.0, norm_first=True, parallel_block=True)
    layer = tl.DecoderLayer(cfg, cross_attention=False).eval()
    assert layer.norm3 is None
    x = torch.randn(2, 5, 16)
    mask = tl.causal_mask(5)
    with torch.no_grad():
        h = layer.norm1(x)
        want = x + layer.self_attn(h, h, h, mask)[0] + layer.feed_forward(h)
        torch.testing.assert_close(layer(x, tgt_mask=mask), want)
        enc = tl.EncoderLayer(cfg).eval()
        h = enc.norm1(x)
        torch.testing.assert_close(enc(x), x + enc.self_attn(h, h, h)[0] + enc.feed_forward(h))
    model = tl.DecoderOnlyLM(cfg.replace(vocab_size=11, num_layers=2)).eval()
    names = tl.inside.hook_points(model)
    assert "decoder.layers.0.self_attn.out" in names and not any(n.endswith(".resid") for n in names)
    tokens = torch.randint(1, 11, (2, 6))
    _, cache = tl.inside.run_with_cache(model, tokens)
    for i in range(2):
        p = f"decoder.layers.{i}"
        total = cache[f"{p}.resid_pre"] + cache[f"{p}.self_attn.out"] + cache[f"{p}.feed_forward.out"]
        torch.testing.assert_close(total, cache[f"{p}.resid_post"])
    with pytest.raises(ValueError, match="parallel_block needs norm_first=True"):
        tl.TransformerConfig(parallel_block=True)
    with pytest.raises(ValueError, match="rotary_layout must be one of"):
        tl.TransformerConfig(rotary_layout="pairs")
    with pytest.raises(ValueError, match="rotary_dim must be even and between 2 and d_k = 32"):
        tl.TransformerConfig(rotary_dim=34)
