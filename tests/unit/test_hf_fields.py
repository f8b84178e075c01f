"""Every field of every Hugging Face family's config, varied one at a time: tl.hf.from_hf carries it (the converted
model gives the same outputs) or refuses it with a ValueError that names it. Nothing converts silently wrong.

Each family starts from a small random config. Every field of its config class is changed in turn: booleans
flipped, integers one larger (odd sizes), floats changed, enumerations through their other values, None set,
pairs where the class takes them (a rectangular image). A variant that transformers itself refuses to build or run
is skipped; every other one must convert to the same outputs to 1e-4, or be refused by name.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from transformer_lib.hf import FAMILIES, from_hf

# (config class, small fields) for each registered class
SMALL = {
    "GPT2LMHeadModel": ("GPT2Config", dict(vocab_size=40, n_embd=32, n_head=4, n_layer=2, n_positions=32)),
    "LlamaForCausalLM": (
        "LlamaConfig",
        dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
        | dict(num_key_value_heads=2, max_position_embeddings=32),
    ),
    "MixtralForCausalLM": (
        "MixtralConfig",
        dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
        | dict(num_key_value_heads=2, max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2),
    ),
    "GPTJForCausalLM": (
        "GPTJConfig",
        dict(vocab_size=40, n_embd=32, n_head=4, n_layer=2, n_positions=32, rotary_dim=4),
    ),
    "GPTNeoXForCausalLM": (
        "GPTNeoXConfig",
        dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
        | dict(max_position_embeddings=32),
    ),
    "BertForMaskedLM": (
        "BertConfig",
        dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
        | dict(max_position_embeddings=32),
    ),
    "BertForSequenceClassification": (
        "BertConfig",
        dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
        | dict(max_position_embeddings=32, num_labels=3),
    ),
    "ViTForImageClassification": (
        "ViTConfig",
        dict(image_size=8, patch_size=4, num_channels=1, hidden_size=32, intermediate_size=40, num_hidden_layers=2)
        | dict(num_attention_heads=4, num_labels=3),
    ),
    "WhisperForConditionalGeneration": (
        "WhisperConfig",
        dict(vocab_size=40, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4)
        | dict(decoder_attention_heads=4, encoder_ffn_dim=40, decoder_ffn_dim=40, num_mel_bins=8)
        | dict(max_source_positions=16, max_target_positions=16, decoder_start_token_id=1, pad_token_id=0)
        | dict(bos_token_id=1, eos_token_id=2, begin_suppress_tokens=None),
    ),
    "BartForConditionalGeneration": (
        "BartConfig",
        dict(vocab_size=40, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4)
        | dict(decoder_attention_heads=4, encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=16),
    ),
    "Wav2Vec2ForCTC": (
        "Wav2Vec2Config",
        dict(vocab_size=9, hidden_size=12, num_hidden_layers=2, num_attention_heads=3, intermediate_size=20)
        | dict(conv_dim=(6, 7), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=4)
        | dict(num_conv_pos_embedding_groups=2, codevector_dim=8, proj_codevector_dim=8),
    ),
    "Wav2Vec2ForPreTraining": (
        "Wav2Vec2Config",
        dict(vocab_size=9, hidden_size=12, num_hidden_layers=2, num_attention_heads=3, intermediate_size=20)
        | dict(conv_dim=(6, 7), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=4)
        | dict(num_conv_pos_embedding_groups=2, codevector_dim=8, proj_codevector_dim=8, num_codevectors_per_group=5),
    ),
    "CLIPModel": (
        "CLIPConfig",
        dict(projection_dim=8)
        | dict(
            text_config=dict(
                vocab_size=40,
                hidden_size=16,
                intermediate_size=24,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=12,
                eos_token_id=5,
            )
        )
        | dict(
            vision_config=dict(
                hidden_size=12,
                intermediate_size=20,
                num_hidden_layers=1,
                num_attention_heads=3,
                image_size=8,
                patch_size=4,
                num_channels=3,
            )
        ),
    ),  # fmt: skip
}
SMALL["Qwen3ForCausalLM"] = (
    "Qwen3Config",
    dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
    | dict(num_key_value_heads=2, head_dim=8, max_position_embeddings=32),
)
SMALL["DeepseekV3ForCausalLM"] = (  # every layer dense (first_k_dense_replace), MLA of odd sizes
    "DeepseekV3Config",
    dict(vocab_size=40, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3)
    | dict(num_key_value_heads=3, first_k_dense_replace=2, q_lora_rank=None, kv_lora_rank=10, qk_rope_head_dim=4)
    | dict(qk_nope_head_dim=6, v_head_dim=5, max_position_embeddings=32),
)
# the other values of the fields that name a choice
CHOICES = {
    "activation_function": ["gelu_new", "gelu", "relu", "silu", "gelu_pytorch_tanh"],
    "hidden_act": ["gelu", "gelu_new", "relu", "silu", "gelu_pytorch_tanh"],
    "position_embedding_type": ["absolute", "relative_key"],
    "rope_parameters": [
        {"rope_type": "default", "rope_theta": 500.0},
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    ],
    "image_size": [(8, 12)],
    "patch_size": [(4, 2)],
    "feat_extract_norm": ["group", "layer"],
    "feat_extract_activation": ["gelu", "relu", "gelu_new"],
    "conv_dim": [[6, 9], [5, 7]],
    "conv_kernel": [[9, 4], [10, 2]],
    "conv_stride": [[4, 3], [5, 1]],
}
SKIP = {"model_type", "transformers_version", "architectures", "_name_or_path", "id2label", "label2id", "dtype"}


def _outputs(model, config, kind: str, ours: bool):
    """The family's main output on a fixed input. No token is the config's pad id: ours reads that id as padding,
    as the book's models do, where Hugging Face's read only attention_mask (tests/unit/test_hf.py has the padding)."""
    g = torch.Generator().manual_seed(1)
    if kind == "ViTForImageClassification":
        size = config.image_size if isinstance(config.image_size, tuple | list) else (config.image_size,) * 2
        images = torch.randn(2, config.num_channels, *size, generator=g)
        return model(images) if ours else model(pixel_values=images).logits
    if kind == "Wav2Vec2ForCTC":
        samples = torch.randn(2, 170, generator=g)
        return model(samples) if ours else model(input_values=samples).logits
    if kind == "Wav2Vec2ForPreTraining":  # in eval mode: the quantizer takes the highest score, no Gumbel noise
        samples = torch.randn(2, 170, generator=g)
        if ours:
            context, targets, perplexity = model(samples)
        else:
            out = model(input_values=samples)
            context, targets, perplexity = (
                out.projected_states,
                out.projected_quantized_states,
                out.codevector_perplexity,
            )
        return torch.cat([context, targets, perplexity.expand(*context.shape[:2], 1)], dim=-1)
    if kind == "CLIPModel":  # each text read at its end-of-text id (at its largest id when the config says 2)
        text, vision = config.text_config, config.vision_config
        images = torch.randn(2, vision.num_channels, vision.image_size, vision.image_size, generator=g)
        end = text.vocab_size - 1 if text.eos_token_id == 2 else text.eos_token_id
        ids = torch.randint(0, text.vocab_size - 1, (2, 7), generator=g)
        ids[ids == end] = (end + 1) % (text.vocab_size - 1)
        ids[0, 6], ids[1, 3] = end, end
        return model(images, ids) if ours else model(input_ids=ids, pixel_values=images).logits_per_image
    pad = getattr(config, "pad_token_id", None)
    ids = torch.randint(0, config.vocab_size - 1, (2, 7), generator=g)
    if pad is not None:
        ids = ids + (ids >= pad).long()  # every id but pad
    if kind == "BartForConditionalGeneration":
        return model(ids, ids.flip(1)) if ours else model(input_ids=ids, decoder_input_ids=ids.flip(1)).logits
    if kind == "WhisperForConditionalGeneration":
        features = torch.randn(2, config.num_mel_bins, 2 * config.max_source_positions, generator=g)
        if ours:
            return model(features, ids)
        return model(input_features=features, decoder_input_ids=ids).logits
    return model(ids) if ours else model(input_ids=ids).logits


def _variants(key, value):
    if isinstance(value, dict):  # a config inside the config (CLIP's towers): each of its fields in turn
        return [value | {inner: new} for inner, old in sorted(value.items()) if inner not in SKIP
                for new in _variants(inner, old)]  # fmt: skip
    if key in CHOICES:
        return [v for v in CHOICES[key] if v != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1]
    if isinstance(value, float):
        return [value * 2 + 0.01]
    if value is None:
        return [1]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SMALL))
def test_every_config_field_is_carried_or_refused_by_name(kind):
    assert set(SMALL) == set(FAMILIES), "a registered family without its small config here"
    config_class, small = SMALL[kind]
    config_class = getattr(transformers, config_class)
    fields = config_class(**small).to_dict()
    wrong, tried = [], 0
    for key, value in sorted(fields.items()):
        if key in SKIP:
            continue
        for new in _variants(key, value):
            torch.manual_seed(0)
            try:
                config = config_class(**{**small, key: new})
                theirs = getattr(transformers, kind)(config).eval()
                with torch.no_grad():
                    want = _outputs(theirs, config, kind, ours=False)
            except Exception:  # transformers itself refuses this variant
                continue
            tried += 1
            try:
                ours = from_hf(theirs)
            except ValueError as error:
                if key not in str(error):
                    wrong.append(f"{key}={new!r}: refused, but the message does not name it: {error}")
                continue
            except Exception as error:
                wrong.append(f"{key}={new!r}: {type(error).__name__}: {error}")
                continue
            with torch.no_grad():
                got = _outputs(ours, config, kind, ours=True)
            if got.shape != want.shape or not torch.allclose(got, want, atol=1e-4, rtol=0):
                gap = (got - want).abs().max().item() if got.shape == want.shape else "shape"
                wrong.append(f"{key}={new!r}: converted silently, outputs differ by {gap}")
    assert tried >= 10, tried
    assert not wrong, "\n".join(wrong)


def test_a_vit_of_odd_width_converts_and_a_rectangular_one_is_refused_by_name():
    """ViT's positions are learned: an odd width (33, three heads of 11) converts to the same logits (it was refused
    by a rule for sinusoids); a rectangular image size is refused by its field's name (it crashed with a TypeError)."""
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        image_size=8, patch_size=4, num_channels=1, hidden_size=33, intermediate_size=40, num_hidden_layers=2
    )
    config.num_attention_heads, config.num_labels = 3, 3
    theirs = transformers.ViTForImageClassification(config).eval()
    ours = from_hf(theirs)
    images = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(images), theirs(pixel_values=images).logits, atol=1e-5, rtol=0)
    config.image_size = (8, 12)
    with pytest.raises(ValueError, match=r"image_size=\(8, 12\)"):
        from_hf(transformers.ViTForImageClassification(config).eval())
