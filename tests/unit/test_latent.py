"""Multi-head latent attention (tl.latent) against Hugging Face's DeepSeek-V3, both ways, and against itself: the
absorbed form, the cache of latents and what it holds per token."""

import pytest
import torch
import transformers

import transformer_lib as tl
from transformer_lib.latent import LatentLM, MultiHeadLatentAttention, kv_fields, kv_values_per_token

SHAPE = dict(kv_rank=10, nope_dim=6, rope_dim=4, v_dim=5)  # odd sizes: 3 heads, values of 5, a latent of 10


def _deepseek(q_rank=None, **fields):
    """A random DeepSeek-V3 whose every layer is dense, with weights large enough to matter."""
    torch.manual_seed(0)
    small = dict(vocab_size=50, hidden_size=24, intermediate_size=32, num_hidden_layers=2, num_attention_heads=3)
    small |= dict(num_key_value_heads=3, first_k_dense_replace=2, q_lora_rank=q_rank, kv_lora_rank=10)
    small |= dict(qk_rope_head_dim=4, qk_nope_head_dim=6, v_head_dim=5, max_position_embeddings=64)
    config = transformers.DeepseekV3Config(**(small | fields))
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


IDS = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
VARIANTS = [
    {},
    {"q_rank": 12},
    {"q_rank": 12, "rope_interleave": False},
    {"attention_bias": True},
    {"q_rank": 7, "attention_bias": True, "tie_word_embeddings": True},
]


@pytest.mark.parametrize("fields", VARIANTS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "default")
def test_deepseek_v3_logits_equal_ours_both_ways(fields):
    theirs = _deepseek(**fields)
    ours = tl.hf.from_hf(theirs)
    assert isinstance(ours, LatentLM) and ours.latent["q_rank"] == fields.get("q_rank")
    with torch.no_grad():
        want = theirs(IDS).logits  # (2, 9, 50)
        torch.testing.assert_close(ours(IDS), want, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours(IDS, absorbed=True), want, atol=1e-5, rtol=0)
        back = tl.hf.to_hf(ours)
        torch.testing.assert_close(back(IDS).logits, want, atol=1e-5, rtol=0)
    assert back.config.rope_interleave  # written in DeepSeek's own layout, whatever it was read from
    # the check can fail: the rotary rows left in the other order give other logits
    ours.layers[0].attn.kv_down.weight.data[-4:] = ours.layers[0].attn.kv_down.weight.data[-4:].flip(0)
    assert not torch.allclose(ours(IDS), want, atol=1e-3)


def test_deepseek_v3_refuses_what_the_book_does_not_build_by_name():
    with pytest.raises(ValueError, match=r"first_k_dense_replace=1 .* num_hidden_layers=2"):
        tl.hf.from_hf(_deepseek(first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                                topk_group=1))  # fmt: skip
    config = _deepseek().config
    config.num_key_value_heads = 1
    with pytest.raises(ValueError, match=r"num_key_value_heads=1 must equal num_attention_heads=3"):
        tl.hf.from_hf(transformers.DeepseekV3ForCausalLM(config))
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
    with pytest.raises(ValueError, match="rope_type"):
        tl.hf.from_hf(_deepseek(rope_parameters=yarn))


def test_the_absorbed_form_is_the_same_function_as_the_expanded_one():
    """W_uk folded into the query and W_uv after the attention: equal to float64 rounding, every size."""
    torch.manual_seed(2)
    for q_rank in (None, 5):
        mla = MultiHeadLatentAttention(24, 3, q_rank=q_rank, **SHAPE).double().eval()
        x = torch.randn(2, 7, 24, dtype=torch.float64)
        torch.testing.assert_close(mla(x, absorbed=True), mla(x), atol=1e-12, rtol=0)


def test_the_cache_holds_the_latents_and_continues_the_positions():
    torch.manual_seed(3)
    model = LatentLM(vocab_size=50, d_model=24, num_heads=3, num_layers=2, d_ff=32, q_rank=8, **SHAPE).eval()
    with torch.no_grad():
        whole = model(IDS)  # (2, 9, 50)
        caches = model.new_cache()
        steps = [model(IDS[:, :4], caches)] + [model(IDS[:, t : t + 1], caches, absorbed=True) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=0)
    # per token and layer, kv_rank + rope_dim numbers: the latent and the shared rotary key, nothing per head
    held = sum(c.nbytes for c in caches) / (IDS.numel() * 4)  # float32 numbers per token, all layers
    assert held == kv_values_per_token(dict(num_layers=2, kv_rank=10, rope_dim=4)) == 2 * (10 + 4)


def test_kv_values_per_token_counts_what_ordinary_caches_hold():
    """MHA, GQA and MQA: measured in our own KVCache, against the formula."""
    for kv_heads in (4, 2, 1):
        torch.manual_seed(4)
        lm = tl.DecoderOnlyLM(vocab_size=50, d_model=32, num_heads=4, num_kv_heads=kv_heads, num_layers=3,
                              positional="rope", max_len=16).eval()  # fmt: skip
        caches = lm.new_cache()
        with torch.no_grad():
            lm(IDS, caches)
        held = sum(c.nbytes for c in caches) / (IDS.numel() * 4)
        assert held == kv_values_per_token(dict(num_layers=3, num_kv_heads=kv_heads, head_dim=8))


def test_clear_errors():
    with pytest.raises(ValueError, match="rope_dim must be even, got 3"):
        MultiHeadLatentAttention(24, 3, kv_rank=10, nope_dim=6, rope_dim=3, v_dim=5)
    with pytest.raises(ValueError, match="kv_rank must be a positive int, got 0"):
        MultiHeadLatentAttention(24, 3, kv_rank=0, nope_dim=6, rope_dim=4, v_dim=5)
    mla = MultiHeadLatentAttention(24, 3, **SHAPE)
    with pytest.raises(ValueError, match=r"x must be \(B, T, d_model=24\), got \(2, 7, 20\)"):
        mla(torch.zeros(2, 7, 20))
    model = LatentLM(vocab_size=50, d_model=24, num_heads=3, num_layers=2, d_ff=32, **SHAPE)
    with pytest.raises(ValueError, match=r"one KVCache per layer \(2\), got 1"):
        model(IDS, model.new_cache()[:1])


def _hf_cache_values_per_token(model, ids):
    """Numbers transformers' own cache holds per token, all layers, after a forward pass over ids (B, T)."""
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    held = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    return held / ids.numel()


@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2", "falcon-mqa", "falcon-new", "falcon-mha", "qwen3"])
def test_kv_fields_count_what_transformers_own_caches_hold(family):
    """The formula on each family's configuration against the cache that family's own code fills, on small random
    models: GQA, MHA and MQA, and Falcon's three ways of naming its key-value heads. Falcon's newer architecture is
    the exception: transformers broadcasts its keys and values to every query head before caching them, so its cache
    holds num_heads / num_kv_heads times what the model needs, which the formula counts."""
    small = dict(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4)
    config = {
        "llama": lambda: transformers.LlamaConfig(**small, num_key_value_heads=2, intermediate_size=64),
        "mistral": lambda: transformers.MistralConfig(**small, num_key_value_heads=1, intermediate_size=64),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=3, n_head=4),
        "falcon-mqa": lambda: transformers.FalconConfig(**small, multi_query=True, num_kv_heads=4),
        "falcon-new": lambda: transformers.FalconConfig(**small, new_decoder_architecture=True, num_kv_heads=2),
        "falcon-mha": lambda: transformers.FalconConfig(**small, multi_query=False),
        "qwen3": lambda: transformers.Qwen3Config(**small, num_key_value_heads=2, head_dim=16, intermediate_size=64),
    }[family]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(64, (2, 5))
    broadcast = config.num_attention_heads // config.num_kv_heads if family == "falcon-new" else 1  # 4 // 2 = 2
    assert _hf_cache_values_per_token(model, ids) == broadcast * kv_values_per_token(kv_fields(config))


def test_kv_fields_on_published_configurations():
    """transformers' default configurations are published models': LLaMA-7B (MHA), Mistral-7B (GQA), Falcon-7B
    (MQA) and DeepSeek-V3 (MLA); numbers per token in bfloat16 bytes."""
    per_token = {
        name: 2 * kv_values_per_token(kv_fields(config()))
        for name, config in {
            "llama": transformers.LlamaConfig,
            "mistral": transformers.MistralConfig,
            "falcon": transformers.FalconConfig,
            "deepseek_v3": transformers.DeepseekV3Config,
        }.items()
    }
    assert per_token == {
        "llama": 2 * 32 * 2 * 32 * 128,  # 32 layers, keys and values, 32 heads of 128: 512 KiB
        "mistral": 2 * 32 * 2 * 8 * 128,  # 8 key-value heads: 128 KiB
        "falcon": 2 * 32 * 2 * 1 * 64,  # one key-value head of 64: 8 KiB
        "deepseek_v3": 2 * 61 * (512 + 64),  # a latent of 512 and a rotary key of 64 per layer: about 69 KiB
    }
