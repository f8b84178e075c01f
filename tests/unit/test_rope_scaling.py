"""RoPE read past its trained length (positional.rope_frequencies): each scaling against transformers' own functions,
the static NTK-aware one against its closed form, and Llama with every scaling both ways through tl.hf."""

import math

import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import transformer_lib as tl
from transformer_lib.positional import rope_frequencies, rotary_tables

SCALED = [
    ("linear", {"factor": 4.0}),
    ("linear", {"factor": 2.5}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}),
    ("yarn", {"factor": 16.0, "original_max_position_embeddings": 4096}),
    (
        "llama3",
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    ),
    (
        "llama3",
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    ),
]


@pytest.mark.parametrize("kind, params", SCALED, ids=lambda x: x if isinstance(x, str) else str(x.get("factor")))
@pytest.mark.parametrize("base, head_dim", [(10000.0, 16), (500000.0, 128), (1e6, 64)])
def test_each_scaling_turns_each_pair_as_transformers_does(kind, params, base, head_dim):
    config = transformers.LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, max_position_embeddings=8192 * 16,
        rope_parameters={"rope_type": kind, "rope_theta": base, **params},
    )  # fmt: skip
    theirs, their_gain = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    ours, gain = rope_frequencies(
        head_dim, base, kind, params["factor"], params.get("original_max_position_embeddings")
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    assert gain == pytest.approx(their_gain, rel=1e-12)
    plain, _ = rope_frequencies(head_dim, base)
    assert not torch.allclose(ours, plain)  # the scaling changed something: the slowest pair, at least
    assert ours[-1] < plain[-1]


def test_ntk_aware_scaling_keeps_the_fastest_pair_and_slows_the_slowest_by_the_factor():
    for r, base, factor in ((16, 10000.0, 4.0), (128, 500000.0, 8.0)):
        plain, _ = rope_frequencies(r, base)
        ntk, gain = rope_frequencies(r, base, "ntk", factor)
        assert ntk[0] == plain[0] == 1.0 and gain == 1.0
        assert ntk[-1].item() == pytest.approx(plain[-1].item() / factor, rel=1e-5)
        assert torch.all(ntk <= plain) and torch.all(ntk >= plain / factor * (1 - 1e-6))  # between the two


def test_no_scaling_gives_the_tables_as_before():
    """The same float operations as the unscaled formula, so every shipped model computes what it did."""
    positions = torch.arange(50)
    cos, sin = rotary_tables(positions, 16, 10000.0)
    angles = positions.float()[:, None] * 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float32) / 16)[None]
    assert torch.equal(cos, torch.cat([angles, angles], -1).cos()) and torch.equal(
        sin, torch.cat([angles, angles], -1).sin()
    )
    yarn_cos, _ = rotary_tables(positions, 16, 10000.0, scaling=("yarn", 4.0, 16))
    assert yarn_cos[0, 0].item() == pytest.approx(0.1 * math.log(4.0) + 1.0)  # position 0: cos 1, times YaRN's gain
    partial_cos, partial_sin = rotary_tables(positions, 16, 10000.0, rotary_dim=8, scaling=("yarn", 4.0, 16))
    assert partial_cos[0, :8].tolist() == [pytest.approx(0.1 * math.log(4.0) + 1.0)] * 8  # the turned part grows
    assert torch.equal(partial_cos[:, 8:], torch.ones(50, 8)) and torch.equal(partial_sin[:, 8:], torch.zeros(50, 8))


def _llama(parameters):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rope_parameters={"rope_theta": 10000.0, **parameters},
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)  # large enough weights that the positions move the logits by far more than the tolerance
    return model


IDS = torch.randint(0, 40, (2, 60), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    "kind, params", [(k, p) for k, p in SCALED if p.get("original_max_position_embeddings", 0) < 100]
)
def test_llama_with_a_scaled_rope_converts_both_ways(kind, params):
    theirs = _llama({"rope_type": kind, **params})
    ours = tl.hf.from_hf(theirs)
    assert (ours.config.rope_scaling, ours.config.rope_factor) == (kind, params["factor"])
    with torch.no_grad():
        want = theirs(IDS).logits
        torch.testing.assert_close(ours(IDS), want, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(tl.hf.to_hf(ours)(IDS).logits, want, atol=1e-4, rtol=1e-5)
        unscaled = tl.hf.from_hf(_llama({"rope_type": "default"}))
        assert (unscaled(IDS) - want).abs().max() > 1e-2  # the scaling is what makes them agree


def test_scalings_the_book_does_not_compute_are_refused_by_name():
    with pytest.raises(ValueError, match=r"rope_parameters\['beta_fast'\] at 32"):
        tl.hf.from_hf(_llama({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                              "beta_fast": 16.0}))  # fmt: skip
    with pytest.raises(ValueError, match=r"rope_type'\]='dynamic'"):
        tl.hf.from_hf(_llama({"rope_type": "dynamic", "factor": 2.0}))
    ntk = tl.DecoderOnlyLM(vocab_size=40, d_model=32, num_heads=4, num_layers=1, positional="rope", norm="rms",
                           activation="swiglu", bias=False, norm_first=True, scale_embedding=False, dropout=0.0,
                           rope_scaling="ntk", rope_factor=2.0)  # fmt: skip
    with pytest.raises(ValueError, match="no rope_type for rope_scaling='ntk'"):
        tl.hf.to_hf(ntk)


def test_the_config_refuses_a_scaling_it_cannot_compute():
    with pytest.raises(ValueError, match="rope_scaling must be one of"):
        tl.TransformerConfig(positional="rope", rope_scaling="dynamic")
    with pytest.raises(ValueError, match="rope_factor must be a number of at least 1"):
        tl.TransformerConfig(positional="rope", rope_scaling="linear", rope_factor=0.5)
    with pytest.raises(ValueError, match="needs rope_original_len"):
        tl.TransformerConfig(positional="rope", rope_scaling="yarn", rope_factor=4.0)
    with pytest.raises(ValueError, match="stretches nothing without a rope_scaling"):
        tl.TransformerConfig(positional="rope", rope_factor=2.0)
