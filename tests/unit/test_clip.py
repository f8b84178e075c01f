"""CLIP (transformer_lib.clip) against transformers' CLIPModel both ways, and its loss and towers by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import clip, hf

transformers = pytest.importorskip("transformers")

CONFIGS = [  # (text: d, heads, layers, d_ff, vocab, max_len), (vision: d, heads, layers, d_ff), image, patch, channels
    ((32, 4, 2, 48, 50, 16), (24, 3, 3, 40), 6, 2, 3, 20, 7),
    ((20, 5, 1, 36, 31, 9), (30, 2, 2, 30), 8, 4, 1, 13, 30),  # odd widths, one text layer, grey images
]


def _ours(text, vision, image, patch, channels, proj, eos, seed=0):
    torch.manual_seed(seed)
    d, h, n, ff, vocab, max_len = text
    tc = clip.clip_config(vocab_size=vocab, d_model=d, num_heads=h, num_layers=n, d_ff=ff, max_len=max_len)
    d, h, n, ff = vision
    patches = (image // patch) ** 2
    vc = clip.clip_config(vocab_size=1, d_model=d, num_heads=h, num_layers=n, d_ff=ff, max_len=patches + 1)
    model = clip.CLIPModel(tc, vc, image_size=image, patch_size=patch, channels=channels, projection_dim=proj,
                           eos_id=eos)  # fmt: skip
    with torch.no_grad():  # every weight off its start, so that a weight in the wrong place shows
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    return model.eval()


def _texts(vocab, length, eos, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (3, length), generator=g)
    tokens[tokens == eos] = (eos + 1) % vocab
    for row, end in enumerate((length - 1, 2, length // 2)):  # one end-of-text per row, then padding after it
        tokens[row, end] = eos
    return tokens


@pytest.mark.parametrize("text, vision, image, patch, channels, proj, eos", CONFIGS)
def test_logits_embeddings_and_loss_equal_transformers_both_ways(text, vision, image, patch, channels, proj, eos):
    ours = _ours(text, vision, image, patch, channels, proj, eos)
    theirs = hf.to_hf(ours)
    assert isinstance(theirs, transformers.CLIPModel)
    images = torch.randn(3, channels, image, image)
    tokens = _texts(text[4], text[5] - 1, eos, seed=1)
    with torch.no_grad():
        out = theirs(input_ids=tokens, pixel_values=images, return_loss=True)
        mine = ours(images, tokens)
        torch.testing.assert_close(mine, out.logits_per_image, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.encode_image(images), out.image_embeds, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.encode_text(tokens), out.text_embeds, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(clip.clip_loss(mine), out.loss, atol=1e-5, rtol=1e-5)
        back = hf.from_hf(theirs)
        assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), ours.state_dict().values()))
        torch.testing.assert_close(back(images, tokens), mine)


def test_a_transformers_clip_with_the_older_end_of_text_rule_converts_and_agrees():
    """transformers' CLIPModel built on its own (random weights, its defaults but the sizes), eos_token_id=2: it reads
    each text at its largest id, and so does ours (eos_id=None)."""
    torch.manual_seed(3)
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=12, eos_token_id=2, bos_token_id=0,
                         pad_token_id=1),
        vision_config=dict(hidden_size=12, intermediate_size=20, num_hidden_layers=1, num_attention_heads=3,
                           image_size=4, patch_size=2, num_channels=3),
        projection_dim=8,
    )  # fmt: skip
    theirs = transformers.CLIPModel(config).eval()
    ours = hf.from_hf(theirs)
    assert ours.text.eos_id is None
    tokens = torch.randint(3, 39, (2, 7))
    tokens[0, 4], tokens[1, 6] = 39, 39  # the largest id: where both read the text
    images = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(ours(images, tokens), theirs(input_ids=tokens, pixel_values=images).logits_per_image,
                                   atol=1e-5, rtol=1e-5)  # fmt: skip


def test_the_text_is_read_at_its_end_and_nothing_after_it_counts():
    model = _ours(*CONFIGS[0])
    tokens = _texts(50, 12, 7, seed=2)
    with torch.no_grad():
        before = model.encode_text(tokens)
        changed = tokens.clone()
        changed[1, 3:] = 11  # after row 1's end-of-text (at 2): padding, whatever it holds
        torch.testing.assert_close(model.encode_text(changed), before)
        changed[1, 1] = 12  # before it: the text itself
        assert not torch.allclose(model.encode_text(changed)[1], before[1])
    assert torch.allclose(before.norm(dim=-1), torch.ones(3))


def test_the_loss_is_the_mean_of_the_two_cross_entropies():
    logits = torch.randn(5, 5)
    want = (F.cross_entropy(logits, torch.arange(5)) + F.cross_entropy(logits.T, torch.arange(5))) / 2
    torch.testing.assert_close(clip.clip_loss(logits), want)
    assert clip.clip_loss(torch.zeros(6, 6)).item() == pytest.approx(math.log(6))  # no preference: log N
    assert clip.clip_loss(torch.eye(4) * 100).item() < 1e-10  # every pair found
    with pytest.raises(ValueError, match=r"logits must be square \(N, N\), got \(3, 4\)"):
        clip.clip_loss(torch.zeros(3, 4))


def test_quick_gelu_is_x_times_a_sigmoid():
    x = torch.linspace(-4, 4, 50)
    ff = tl.FeedForward(1, 1, activation="quick_gelu")
    torch.testing.assert_close(ff.activation(x), x * torch.sigmoid(1.702 * x))
    assert (ff.activation(x) - F.gelu(x)).abs().max() < 0.03  # an approximation of GELU


def test_bad_input_and_what_transformers_cannot_hold_are_refused_by_name():
    model = _ours(*CONFIGS[0])
    with pytest.raises(ValueError, match="every text must hold the end-of-text id 7"):
        model.encode_text(torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="reads at most 16 tokens, got 17"):
        model.encode_text(torch.full((1, 17), 7))
    with pytest.raises(ValueError, match=r"images must be \(B, C, 6, 6\), got \(2, 3, 8, 8\)"):
        model.encode_image(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="eos_id must be an id of the 50-token vocabulary or None, got 50"):
        _ours(CONFIGS[0][0], *CONFIGS[0][1:6], 50)
    with pytest.raises(ValueError, match="reads eos_token_id=2 as 'the largest id'"):
        hf.to_hf(_ours(*CONFIGS[0][:6], 2))
    theirs = hf.to_hf(model)
    theirs.config.text_config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="only CLIP's QuickGELU is supported, got text_config.hidden_act='gelu'"):
        hf.from_hf(theirs)
    theirs.config.text_config.hidden_act = "quick_gelu"
    theirs.config.vision_config.hidden_act = "quick_gelu"
    theirs.config.text_config.layer_norm_eps = 1e-6  # carried; a field no rule reads would be named instead
    assert hf.from_hf(theirs).text.config.eps == 1e-6
