"""A cache of bounded size (tl.streaming): what it keeps, the positions it gives, and the losses through it."""

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.positional import apply_rotary
from transformer_lib.streaming import SinkCache, token_losses


def test_the_cache_keeps_the_sinks_and_the_window_and_stops_growing():
    cache = SinkCache(sinks=2, window=3)
    sizes = []
    for t in range(10):
        position = torch.full((1, 1, 1, 4), float(t))  # (B, h, 1, d): a key that says where it came from
        keys, values = cache.update(position, position + 100)
        sizes.append(cache.nbytes)
    assert keys[0, 0, :, 0].tolist() == [0, 1, 7, 8, 9] and values[0, 0, :, 0].tolist() == [100, 101, 107, 108, 109]
    assert cache.seen == 10 and cache.length == 5 and len(set(sizes[4:])) == 1  # memory flat once full
    window_only = SinkCache(sinks=0, window=3)
    for t in range(6):
        keys, _ = window_only.update(torch.full((1, 1, 1, 2), float(t)), torch.zeros(1, 1, 1, 2))
    assert keys[0, 0, :, 0].tolist() == [3, 4, 5]


def _lm(seed=0, **overrides):
    torch.manual_seed(seed)
    fields = dict(vocab_size=20, d_model=32, num_heads=4, num_layers=2, positional="rope", max_len=64, dropout=0.0)
    return tl.DecoderOnlyLM(**(fields | overrides)).eval()


IDS = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(1))


def test_a_cache_that_drops_nothing_gives_the_whole_sequences_losses():
    lm = _lm()
    with torch.no_grad():
        whole = F.cross_entropy(lm(IDS)[:, :-1].transpose(1, 2), IDS[:, 1:], reduction="none")  # (2, 29)
    torch.testing.assert_close(token_losses(lm, IDS), whole, atol=1e-5, rtol=0)
    big = token_losses(lm, IDS, lambda: [SinkCache(sinks=4, window=40) for _ in lm.decoder.layers])
    torch.testing.assert_close(big, whole, atol=1e-5, rtol=0)  # rotated on read, by the same positions
    small = token_losses(lm, IDS, lambda: [SinkCache(sinks=4, window=8) for _ in lm.decoder.layers])
    torch.testing.assert_close(small[:, :11], whole[:, :11], atol=1e-5, rtol=0)  # nothing dropped yet
    assert not torch.allclose(small[:, 12:], whole[:, 12:], atol=1e-3)  # then the middle is gone


def test_after_eviction_a_query_attends_to_the_kept_keys_at_their_places_in_the_cache():
    """One attention layer by hand: keep positions 0, 1 and the last 3; turn the kept keys by 0..4 and the query
    by 4; softmax over them; the values' weighted sum."""
    torch.manual_seed(2)
    mha = tl.MultiHeadAttention(16, 2, rotary=True).eval()
    x = torch.randn(1, 9, 16)
    cache = SinkCache(sinks=2, window=3)
    with torch.no_grad():
        for t in range(9):
            out, _ = mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
        kept = x[:, [0, 1, 6, 7, 8]]  # (1, 5, 16)
        q = apply_rotary(mha.split_heads(mha.q_proj(x[:, 8:9])), torch.tensor([4]))  # (1, h, 1, d_k)
        k = apply_rotary(mha.split_heads(mha.k_proj(kept)), torch.arange(5))  # (1, h, 5, d_k)
        v = mha.split_heads(mha.v_proj(kept))
        by_hand = mha.out_proj(mha.combine_heads(F.scaled_dot_product_attention(q, k, v)))
    torch.testing.assert_close(out, by_hand, atol=1e-6, rtol=0)


def test_clear_errors():
    with pytest.raises(ValueError, match="sinks must be an int of at least 0, got -1"):
        SinkCache(sinks=-1, window=4)
    with pytest.raises(ValueError, match="window must keep at least the newest position"):
        SinkCache(sinks=2, window=0)
    cache = SinkCache(sinks=1, window=2)
    with pytest.raises(ValueError, match="a prompt of 4 positions does not fit in sinks \\+ window = 3"):
        cache.update(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))
    cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    with pytest.raises(ValueError, match="one position at a time"):
        cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"ids must be \(B, T\) with T >= 2"):
        token_losses(_lm(), IDS[:, :1])
