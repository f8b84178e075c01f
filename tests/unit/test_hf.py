"""GPT-2 and Llama from Hugging Face `transformers` in our DecoderOnlyLM and back: same logits, same greedy tokens.

Small random configs, saved with save_pretrained and read back with from_pretrained from a
temporary folder: the real loading path, with no network.
"""

import pytest
import torch
import transformers  # the test extra installs it; the package itself does not need it

import transformer_lib as tl
from transformer_lib.hf import from_hf, to_hf


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=50, n_embd=32, n_head=4, n_layer=2, n_positions=64, bos_token_id=None, eos_token_id=None
    )
    folder = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return transformers.GPT2LMHeadModel.from_pretrained(folder).eval()


def test_gpt2_logits_equal_ours_with_the_same_weights(gpt2):
    ours = from_hf(gpt2)
    assert isinstance(ours, tl.DecoderOnlyLM) and ours.config.norm_first and ours.config.activation == "gelu_tanh"
    x = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), gpt2(x).logits, atol=1e-5, rtol=0)


def test_weights_go_back_unchanged(gpt2):
    back = to_hf(from_hf(gpt2))
    theirs = gpt2.state_dict()
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name


def test_greedy_generation_with_our_kv_cache_equals_hugging_face_generate(gpt2):
    ours = from_hf(gpt2)
    prompt = torch.randint(1, 50, (1, 6), generator=torch.Generator().manual_seed(2))
    theirs = gpt2.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(prompt, max_new_tokens=20, temperature=0.0), theirs)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    folder = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return transformers.LlamaForCausalLM.from_pretrained(folder).eval()


def test_llama_logits_generation_and_weights_round_trip(llama):
    ours = from_hf(llama)
    cfg = ours.config
    assert (cfg.norm, cfg.positional, cfg.activation, cfg.num_kv_heads, cfg.bias) == ("rms", "rope", "swiglu", 2, False)
    x = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), llama(x).logits, atol=1e-5, rtol=0)
    prompt = x[:1, :6]
    theirs = llama.generate(prompt, max_new_tokens=20, do_sample=False)  # no eos: all 20 tokens, as ours
    assert torch.equal(ours.generate(prompt, max_new_tokens=20, temperature=0.0), theirs)
    back = to_hf(ours)
    assert type(back).__name__ == "LlamaForCausalLM"
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, llama.state_dict()[name]), name


def test_clear_errors(gpt2):
    with pytest.raises(TypeError, match="from_hf takes one of GPTJForCausalLM, GPTNeoXForCausalLM, .*; got Linear"):
        from_hf(torch.nn.Linear(2, 2))
    not_gpt2 = tl.DecoderOnlyLM(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_len=64)
    with pytest.raises(ValueError, match="not a GPT-2 architecture; these fields differ"):
        to_hf(not_gpt2)
    not_neox = tl.DecoderOnlyLM(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_len=64, positional="rope")
    with pytest.raises(ValueError, match="not a GPT-NeoX architecture; these fields differ"):
        to_hf(not_neox)  # rotary positions with LayerNorm: the family that has them
    not_llama = tl.DecoderOnlyLM(not_neox.config.replace(norm="rms"))
    with pytest.raises(ValueError, match="not a Llama architecture; these fields differ"):
        to_hf(not_llama)
    odd = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        hidden_act="gelu",
    )
    with pytest.raises(ValueError, match="differs from what the book builds: {'hidden_act': 'gelu'}"):
        from_hf(transformers.LlamaForCausalLM(odd))


@pytest.fixture(scope="module")
def gptj(tmp_path_factory):
    """A small random GPT-J: interleaved rotary pairs on 6 of each head's 8 dimensions, a parallel block."""
    torch.manual_seed(0)
    config = transformers.GPTJConfig(
        vocab_size=50,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        rotary_dim=6,
        n_inner=48,
        bos_token_id=None,
        eos_token_id=None,
    )
    folder = tmp_path_factory.mktemp("gptj")
    model = transformers.GPTJForCausalLM(config)
    with torch.no_grad():  # random norms and output bias, sharp attention: so that a mistake in loading them shows
        for name, p in model.named_parameters():
            if "ln_" in name or name == "lm_head.bias":
                p.add_(torch.randn_like(p) * 0.1)
            if "q_proj" in name or "k_proj" in name:
                p.mul_(8.0)  # scores far from 0, so that the positions (the rotation) matter
    model.save_pretrained(folder)
    return transformers.GPTJForCausalLM.from_pretrained(folder).eval()


def test_gptj_logits_generation_and_weights_round_trip(gptj):
    ours = from_hf(gptj)
    cfg = ours.config
    assert (cfg.rotary_layout, cfg.rotary_dim, cfg.parallel_block, cfg.norm_first) == ("interleaved", 6, True, True)
    assert all(layer.norm3 is None for layer in ours.decoder.layers)  # one norm per parallel block
    x = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), gptj(x).logits, atol=1e-5, rtol=0)
    prompt = x[:1, :6]
    theirs = gptj.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(prompt, max_new_tokens=20, temperature=0.0), theirs)
    back = to_hf(ours)
    assert type(back).__name__ == "GPTJForCausalLM"
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, gptj.state_dict()[name]), name
    ours.decoder.layers[0].self_attn.q_proj.bias.data[0] = 1.0
    with pytest.raises(ValueError, match="GPT-J's attention has no biases"):
        to_hf(ours)


def test_both_rotary_layouts_compute_the_same_function_once_the_rows_are_permuted(gptj, llama):
    x = torch.randint(0, 50, (2, 19), generator=torch.Generator().manual_seed(3))
    for model in (from_hf(gptj), from_hf(llama)):  # interleaved and partial; rotate-half with grouped-query heads
        with torch.no_grad():
            for layer in model.decoder.layers:  # sharp attention, so that a wrong rotation shows
                layer.self_attn.q_proj.weight.mul_(8.0)
                layer.self_attn.k_proj.weight.mul_(8.0)
        other = "half" if model.config.rotary_layout == "interleaved" else "interleaved"
        moved = tl.hf.with_rotary_layout(model, other)
        assert moved.config.rotary_layout == other
        back = tl.hf.with_rotary_layout(moved, model.config.rotary_layout)
        with torch.no_grad():
            torch.testing.assert_close(moved(x), model(x), atol=1e-5, rtol=0)
            # the classic mistake: the other layout with the weights as they were gives other logits
            unpermuted = tl.DecoderOnlyLM(model.config.replace(rotary_layout=other)).eval()
            unpermuted.load_state_dict(model.state_dict())
            assert (unpermuted(x) - model(x)).abs().max() > 1e-2
        for name, tensor in back.state_dict().items():
            assert torch.equal(tensor, model.state_dict()[name]), name
    with pytest.raises(TypeError, match="rotary positions"):
        tl.hf.with_rotary_layout(tl.DecoderOnlyLM(vocab_size=10, d_model=16, num_heads=2, num_layers=1), "half")


def test_the_gptj_parity_is_exact_only_with_the_interleaved_layout(gptj):
    wrong = tl.DecoderOnlyLM(from_hf(gptj).config.replace(rotary_layout="half")).eval()
    wrong.load_state_dict(from_hf(gptj).state_dict())
    x = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (wrong(x) - gptj(x).logits).abs().max() > 1e-2


def _neox(folder, parallel: bool):
    """A small random GPT-NeoX: rotate-half rotary on half of each head, fused q/k/v, biases everywhere."""
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        rotary_pct=0.5,
        use_parallel_residual=parallel,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = transformers.GPTNeoXForCausalLM(config)
    with torch.no_grad():  # random norms and biases, sharp attention: so that a mistake in loading them shows
        for name, p in model.named_parameters():
            if "layernorm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if "query_key_value.weight" in name:
                p.mul_(8.0)  # scores far from 0, so that the positions (the rotation) matter
    model.save_pretrained(folder)
    return transformers.GPTNeoXForCausalLM.from_pretrained(folder).eval()


@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_logits_generation_and_weights_round_trip(tmp_path, parallel):
    neox = _neox(tmp_path, parallel)
    ours = from_hf(neox)
    cfg = ours.config
    assert (cfg.rotary_layout, cfg.rotary_dim) == ("half", 4)  # half of each head's 8 dimensions turn
    assert (cfg.parallel_block, cfg.shared_norm) == (parallel, not parallel)
    assert all(layer.norm3 is not None for layer in ours.decoder.layers)  # a norm for each sublayer
    x = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), neox(x).logits, atol=1e-5, rtol=0)
    prompt = x[:1, :6]
    theirs = neox.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(prompt, max_new_tokens=20, temperature=0.0), theirs)
    back = to_hf(ours)
    assert type(back).__name__ == "GPTNeoXForCausalLM"
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, neox.state_dict()[name]), name


def test_gpt_neox_fused_projection_is_read_head_by_head(tmp_path):
    """Cutting the fused (3d, d) matrix in three thirds (as GPT-2's c_attn) runs, and gives other logits."""
    neox = _neox(tmp_path, True)
    ours = from_hf(neox)
    wrong = tl.DecoderOnlyLM(ours.config).eval()
    state = ours.state_dict()
    w = neox.state_dict()["gpt_neox.layers.0.attention.query_key_value.weight"]
    for name, part in zip("qkv", w.chunk(3)):
        state[f"decoder.layers.0.self_attn.{name}_proj.weight"] = part
    wrong.load_state_dict(state)
    x = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (wrong(x) - neox(x).logits).abs().max() > 1e-2


def test_every_family_is_registered_once_and_claims_its_own_models():
    assert list(tl.hf.FAMILIES) == [
        "GPTJForCausalLM",
        "GPTNeoXForCausalLM",
        "MixtralForCausalLM",
        "Qwen3ForCausalLM",
        "LlamaForCausalLM",
        "GPT2LMHeadModel",
        "BertForMaskedLM",
        "BertForSequenceClassification",
        "ViTForImageClassification",
        "WhisperForConditionalGeneration",
        "BartForConditionalGeneration",
        "Wav2Vec2ForCTC",
        "Wav2Vec2ForPreTraining",
        "CLIPModel",
        "DeepseekV3ForCausalLM",
    ]
    base = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=1, max_len=64, norm_first=True)
    for fields, family in (
        (dict(positional="learned"), "GPT-2"),
        (dict(positional="rope", norm="rms"), "Llama"),
        (dict(positional="rope", norm="rms", num_experts=4), "Mixtral"),
        (dict(positional="rope", norm="rms", qk_norm=True), "Qwen3"),
        (dict(positional="rope", rotary_layout="interleaved"), "GPT-J"),
        (dict(positional="rope", parallel_block=True), "GPT-J"),
        (dict(positional="rope", parallel_block=True, shared_norm=False), "GPT-NeoX"),
    ):
        cfg = tl.TransformerConfig(**base, **fields)
        model = tl.DecoderOnlyLM(cfg)
        assert next(f for f in tl.hf.FAMILIES.values() if isinstance(model, f.ours) and f.claims(cfg)).name == family
    small = tl.bert.bert_config(vocab_size=50, d_model=32, num_heads=4, num_layers=1, max_len=64)
    for model, family in (
        (tl.bert.BertForMaskedLM(small), "BERT (masked LM)"),
        (tl.bert.BertClassifier(small), "BERT (classifier)"),
        (
            tl.clip.CLIPModel(
                tl.clip.clip_config(vocab_size=50, d_model=32, num_heads=4, num_layers=1, max_len=16),
                tl.clip.clip_config(vocab_size=1, d_model=32, num_heads=4, num_layers=1, max_len=5),
                image_size=4,
                patch_size=2,
                eos_id=3,
            ),
            "CLIP",
        ),
        (tl.latent.LatentLM(tl.TransformerConfig(**base), kv_rank=8, nope_dim=4, rope_dim=4, v_dim=4), "DeepSeek-V3"),
    ):
        assert (
            next(f for f in tl.hf.FAMILIES.values() if isinstance(model, f.ours) and f.claims(model.config)).name
            == family
        )


def _qwen3(**fields):
    torch.manual_seed(0)
    small = dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
    config = transformers.Qwen3Config(**small, num_key_value_heads=2, head_dim=8, max_position_embeddings=64, **fields)
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # gains away from 1, so that a missing norm shows
            p.normal_(1.0, 0.5) if "norm" in name else p.mul_(5.0)
    return model


def test_qwen3_logits_generation_and_weights_round_trip():
    theirs = _qwen3()
    ours = tl.hf.from_hf(theirs)
    assert ours.config.qk_norm and ours.decoder.layers[0].self_attn.q_norm is not None
    ids = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, atol=1e-5, rtol=1e-5)
        back = tl.hf.to_hf(ours)
        assert type(back).__name__ == "Qwen3ForCausalLM"
        assert all(torch.equal(t, theirs.state_dict()[n]) for n, t in back.state_dict().items())
    mine = ours.generate(ids[:1, :5], 12, temperature=0.0)
    assert torch.equal(mine, theirs.generate(ids[:1, :5], max_new_tokens=12, do_sample=False))
    # the check can fail: without the norms on queries and keys the logits move
    with torch.no_grad():
        for layer in ours.decoder.layers:
            layer.self_attn.q_norm.weight.fill_(1.0)
        assert not torch.allclose(ours(ids), theirs(ids).logits, atol=1e-3)


def test_qwen3_refuses_what_the_book_does_not_build_by_name():
    config = _qwen3().config
    config.head_dim = 16
    with pytest.raises(ValueError, match="head_dim"):
        tl.hf.from_hf(transformers.Qwen3ForCausalLM(config))
    with pytest.raises(ValueError, match="use_sliding_window"):
        tl.hf.from_hf(_qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=1))
