"""One config from model to layer: derived settings decided once, options reaching every layer."""

from dataclasses import dataclass

import pytest
import torch

import transformer_lib as tl
from transformer_lib.decoder import Decoder, DecoderLayer
from transformer_lib.encoder import Encoder, EncoderLayer


def test_following_fields_are_resolved_once_and_keep_following_on_replace():
    cfg = tl.TransformerConfig(vocab_size=20, num_layers=3)
    assert (cfg.tgt_vocab_size, cfg.num_decoder_layers, cfg.final_norm) == (20, 3, False)
    changed = cfg.replace(vocab_size=30, num_layers=5, norm_first=True)
    assert (changed.tgt_vocab_size, changed.num_decoder_layers, changed.final_norm) == (30, 5, True)
    own = tl.TransformerConfig(vocab_size=20, tgt_vocab_size=9, num_decoder_layers=1, final_norm=True)
    kept = own.replace(vocab_size=30, num_layers=4, norm_first=False)
    assert (kept.tgt_vocab_size, kept.num_decoder_layers, kept.final_norm) == (9, 1, True)


def test_replace_refuses_unknown_fields_and_names_the_known_ones():
    with pytest.raises(TypeError, match=r"unknown config field\(s\) \['layer_norm_eps'\]"):
        tl.TransformerConfig().replace(layer_norm_eps=1e-6)
    with pytest.raises(TypeError, match="unknown config field"):
        tl.Transformer(vocab_size=5, d_model=16, num_heads=2, heads=3)


def test_every_layer_and_stack_keeps_the_models_config():
    model = tl.Transformer(vocab_size=11, d_model=16, num_heads=2, num_layers=2, num_decoder_layers=3, d_ff=8)
    parts = [m for m in model.modules() if isinstance(m, EncoderLayer | DecoderLayer | Encoder | Decoder)]
    assert len(parts) == 2 + 2 + 3 and all(p.config == model.config for p in parts)


def test_a_new_config_field_reaches_every_layer_without_touching_the_stacks():
    """What the next variants (RMSNorm, RoPE, ...) rely on: a field added to the config is readable in every layer."""

    @dataclass(frozen=True)
    class WithNewOption(tl.TransformerConfig):
        new_option: str = "on"

    cfg = WithNewOption(vocab_size=11, d_model=16, num_heads=2, d_ff=8, new_option="seen")
    for model in (tl.Transformer(cfg), tl.DecoderOnlyLM(cfg), tl.EncoderClassifier(cfg)):
        layers = [m for m in model.modules() if isinstance(m, EncoderLayer | DecoderLayer)]
        assert layers and all(layer.config.new_option == "seen" for layer in layers)


@pytest.mark.parametrize(
    "make",
    [
        lambda: tl.Transformer(vocab_size=13, tgt_vocab_size=9, d_model=16, num_heads=2, pad_id=0),
        lambda: tl.Transformer(vocab_size=13, d_model=16, num_heads=2, pad_id=4, tie_embeddings=True),
        lambda: tl.EncoderClassifier(vocab_size=13, d_model=16, num_heads=2, pad_id=0),
        lambda: tl.EncoderRegressor(vocab_size=13, d_model=16, num_heads=2, pad_id=2, positional="learned"),
    ],
)
def test_initialisation_keeps_every_padding_row_at_zero(make):
    model = make()
    tables = [m for m in model.modules() if isinstance(m, tl.TokenEmbedding)]
    assert tables
    for emb in tables:
        pad = emb.table.padding_idx
        assert pad == model.config.pad_id
        assert torch.count_nonzero(emb.table.weight[pad]) == 0
        others = torch.cat([emb.table.weight[:pad], emb.table.weight[pad + 1 :]])
        assert others.abs().min() > 0 and others.std() > 0.1  # the other rows were initialised


def test_the_language_model_has_no_padding_row():
    lm = tl.DecoderOnlyLM(vocab_size=13, d_model=16, num_heads=2)
    assert lm.embed.table.padding_idx is None


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_importing_the_package_loads_no_pyplot_and_checkers_leave_the_global_rng_alone():
    import subprocess
    import sys

    probe = "import sys, transformer_lib; print('matplotlib.pyplot' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"

    class Layer(torch.nn.Module):
        def __init__(self, d, h, f):
            super().__init__()
            self.self_attn, self.feed_forward = tl.MultiHeadAttention(d, h), tl.FeedForward(d, f)
            self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    tl.exercises.check_pre_ln_layer(lambda layer, x, mask: None, Layer)
    assert torch.equal(torch.random.get_rng_state(), before)
