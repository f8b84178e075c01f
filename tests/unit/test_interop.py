"""Ours against torch.nn, loaded with the same weights, dropout off: outputs agree to 1e-5."""

import itertools

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.interop import from_torch, load_from_torch, load_into_torch, to_torch

ATOL = 1e-5
SIZES = [(24, 1), (24, 3), (36, 4), (64, 8)]  # (d_model, num_heads): one head, non powers of two


def _padding(B, S, real_lengths):
    """Our (B, 1, 1, S) mask and torch's (B, S) key_padding_mask (True = ignore)."""
    keep = torch.arange(S)[None, :] < torch.tensor(real_lengths)[:, None]  # (B, S)
    return keep[:, None, None, :], ~keep


MASK_CASES = ["none", "padding", "causal", "both"]


@pytest.mark.parametrize("d_model,num_heads", SIZES)
@pytest.mark.parametrize("masks", MASK_CASES)
@pytest.mark.parametrize("B", [1, 3])
def test_multihead_attention_matches_torch_both_directions(d_model, num_heads, masks, B):
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True).eval()
    ours = from_torch(theirs).eval()
    T_q = T_k = 5
    x = torch.randn(B, T_q, d_model)
    ours_mask, kw = None, {}
    if masks in ("padding", "both"):
        lengths = [5, 3, 1][:B]
        ours_mask, kw["key_padding_mask"] = _padding(B, T_k, lengths)
    if masks in ("causal", "both"):
        causal = tl.causal_mask(T_q)
        ours_mask = tl.combine_masks(ours_mask, causal)
        kw["attn_mask"] = tl.to_torch_convention(causal)
    ref, ref_w = theirs(x, x, x, need_weights=True, average_attn_weights=False, **kw)
    out, w = ours(x, x, x, ours_mask, need_weights=True)
    assert torch.allclose(out, ref, atol=ATOL)
    assert torch.allclose(w, ref_w, atol=ATOL)
    fused, _ = ours(x, x, x, ours_mask)
    assert torch.allclose(fused, ref, atol=ATOL)
    back = to_torch(ours).eval()
    assert torch.allclose(back(x, x, x, **kw)[0], ref, atol=ATOL)


@pytest.mark.parametrize("d_model,num_heads", SIZES)
def test_cross_attention_different_lengths_matches_torch(d_model, num_heads):
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True).eval()
    ours = from_torch(theirs).eval()
    q, mem = torch.randn(2, 3, d_model), torch.randn(2, 8, d_model)
    ours_mask, kpm = _padding(2, 8, [8, 5])
    ref = theirs(q, mem, mem, key_padding_mask=kpm)[0]
    assert torch.allclose(ours(q, mem, mem, ours_mask)[0], ref, atol=ATOL)


@pytest.mark.parametrize("d_model,num_heads", SIZES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", MASK_CASES)
@pytest.mark.parametrize("B", [1, 2])
def test_encoder_layer_matches_torch(d_model, num_heads, norm_first, masks, B):
    theirs = nn.TransformerEncoderLayer(
        d_model, num_heads, 2 * d_model + 3, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = from_torch(theirs).eval()
    S = 6
    x = torch.randn(B, S, d_model)
    ours_mask, kw = None, {}
    if masks in ("padding", "both"):
        ours_mask, kw["src_key_padding_mask"] = _padding(B, S, [6, 2][:B])
    if masks in ("causal", "both"):
        ours_mask = tl.combine_masks(ours_mask, tl.causal_mask(S))
        kw["src_mask"] = tl.to_torch_convention(tl.causal_mask(S))
    ref = theirs(x, **kw)
    assert torch.allclose(ours(x, ours_mask), ref, atol=ATOL)
    fresh = nn.TransformerEncoderLayer(
        d_model, num_heads, 2 * d_model + 3, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    load_into_torch(fresh, ours)
    assert torch.allclose(fresh(x, **kw), ref, atol=ATOL)


@pytest.mark.parametrize("d_model,num_heads", SIZES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", MASK_CASES)
@pytest.mark.parametrize("lengths", [(5, 5), (3, 7), (7, 2)])
def test_decoder_layer_matches_torch(d_model, num_heads, norm_first, masks, lengths):
    T, S = lengths
    theirs = nn.TransformerDecoderLayer(
        d_model, num_heads, 48, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = from_torch(theirs).eval()
    B = 2
    x, mem = torch.randn(B, T, d_model), torch.randn(B, S, d_model)
    tgt_mask = mem_mask = None
    kw = {}
    if masks in ("padding", "both"):
        mem_mask, kw["memory_key_padding_mask"] = _padding(B, S, [S, max(1, S - 2)])
        pad_t, kw["tgt_key_padding_mask"] = _padding(B, T, [T, max(1, T - 1)])
        tgt_mask = pad_t
    if masks in ("causal", "both"):
        tgt_mask = tl.combine_masks(tgt_mask, tl.causal_mask(T))
        kw["tgt_mask"] = tl.to_torch_convention(tl.causal_mask(T))
    ref = theirs(x, mem, **kw)
    assert torch.allclose(ours(x, mem, tgt_mask, mem_mask), ref, atol=ATOL)
    assert torch.allclose(to_torch(ours).eval()(x, mem, **kw), ref, atol=ATOL)


@pytest.mark.parametrize("norm_first,activation", list(itertools.product([False, True], ["relu", "gelu"])))
@pytest.mark.parametrize("B,S,T", [(1, 7, 4), (3, 4, 9), (2, 6, 6)])
def test_full_transformer_matches_torch_both_directions(norm_first, activation, B, S, T):
    d_model, h = 36, 3
    theirs = nn.Transformer(
        d_model, h, 2, 3, 50, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    ours = from_torch(theirs, vocab_size=11).eval()
    src, tgt = torch.randn(B, S, d_model), torch.randn(B, T, d_model)
    src_mask, src_kpm = _padding(B, S, [S, 2, 3][:B])
    tgt_pad, tgt_kpm = _padding(B, T, [T, 3, 1][:B])
    causal = tl.causal_mask(T)
    ref = theirs(
        src,
        tgt,
        tgt_mask=tl.to_torch_convention(causal),
        src_key_padding_mask=src_kpm,
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=src_kpm,
    )
    memory = ours.encoder(src, src_mask)
    out = ours.decoder(tgt, memory, tl.combine_masks(tgt_pad, causal), src_mask)
    assert torch.allclose(out, ref, atol=ATOL)
    back = to_torch(ours).eval()
    again = back(
        src,
        tgt,
        tgt_mask=tl.to_torch_convention(causal),
        src_key_padding_mask=src_kpm,
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=src_kpm,
    )
    assert torch.allclose(again, ref, atol=ATOL)


def test_stacks_match_torch_encoder_and_decoder():
    enc_layer = nn.TransformerEncoderLayer(20, 4, 40, dropout=0.0, batch_first=True)
    theirs = nn.TransformerEncoder(enc_layer, 3, enable_nested_tensor=False).eval()
    ours = from_torch(theirs).eval()
    x = torch.randn(2, 5, 20)
    assert torch.allclose(ours(x), theirs(x), atol=ATOL)


def test_mismatched_norm_first_is_refused():
    theirs = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    ours = tl.EncoderLayer(d_model=16, num_heads=2, d_ff=32, norm_first=False)
    with pytest.raises(ValueError, match="norm_first differs"):
        load_from_torch(ours, theirs)


def test_unsupported_pair_is_a_type_error():
    with pytest.raises(TypeError, match="cannot load EncoderLayer from MultiheadAttention"):
        load_from_torch(tl.EncoderLayer(d_model=8, num_heads=2, d_ff=16), nn.MultiheadAttention(8, 2))


def test_transformer_without_final_norm_cannot_become_nn_transformer():
    with pytest.raises(ValueError, match="final_norm=True"):
        to_torch(tl.Transformer(vocab_size=5, d_model=16, num_heads=2, norm_first=False))


def test_a_converted_module_is_built_on_the_device_of_its_source():
    """Checked on PyTorch's meta device, which any machine has: the copy lands where the original lives."""
    ours = tl.MultiHeadAttention(8, 2).to("meta")
    assert tl.to_torch(ours).in_proj_weight.device.type == "meta"
    layer = tl.EncoderLayer(d_model=8, num_heads=2, d_ff=16).to("meta")
    assert all(p.device.type == "meta" for p in tl.to_torch(layer).parameters())
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).to("meta")
    assert all(p.device.type == "meta" for p in tl.from_torch(theirs).parameters())
