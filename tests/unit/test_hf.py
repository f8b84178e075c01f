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
    with pytest.raises(TypeError, match="from_hf takes a GPT2LMHeadModel or a LlamaForCausalLM, got Linear"):
        from_hf(torch.nn.Linear(2, 2))
    not_gpt2 = tl.DecoderOnlyLM(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_len=64)
    with pytest.raises(ValueError, match="not a GPT-2 architecture; these fields differ"):
        to_hf(not_gpt2)
    not_llama = tl.DecoderOnlyLM(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_len=64, positional="rope")
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
