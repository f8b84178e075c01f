"""greedy_decode's plain cached step (Transformer.plain_step): the modules' numbers bit for bit, or not used at all."""

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.decoder import plain_decoder_step, runs_as_written

SMALL = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.1, max_len=64)
SRC = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 4], [5, 0, 0, 0, 0, 0]])  # padded, different lengths


def _model(seed=0, **overrides):
    torch.manual_seed(seed)
    return tl.Transformer(**{"vocab_size": 13, **SMALL, **overrides}).eval()


def _module_logits(model, src, ids):
    """Logits of each step through the modules, with both caches: (B, T, V) for ids (B, T)."""
    with torch.inference_mode():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        caches, cross = model.new_cache(capacity=ids.shape[1]), model.new_cross_cache()
        steps = [
            model.decode(ids[:, t : t + 1], memory, src_mask, caches=caches, cross_caches=cross)
            for t in range(ids.shape[1])
        ]
    return torch.cat(steps, dim=1)


def _plain_logits(model, src, ids):
    with torch.inference_mode():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        step = model.plain_step(memory, src_mask, ids.shape[1])
        assert step is not None
        return torch.stack([step(ids[:, t : t + 1], t) for t in range(ids.shape[1])], dim=1)  # (B, T, V)


CONFIGS = [
    {},
    {"norm_first": True},
    {"norm": "rms", "norm_first": True},
    {"activation": "gelu"},
    {"activation": "swiglu", "bias": False},
    {"positional": "learned"},
    {"tie_embeddings": True},
    {"attention_only": True},
    {"num_experts": 4, "experts_per_token": 2},
    {"num_decoder_layers": 3, "final_norm": True},
]


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_plain_step_equals_the_modules_bit_for_bit(overrides):
    model = _model(1, **overrides)
    ids = torch.randint(1, 13, (3, 9))
    assert torch.equal(_plain_logits(model, SRC, ids), _module_logits(model, SRC, ids))
    unpadded = SRC[1:2]  # greedy_decode drops the mask when no source is padded: both paths see None then
    with torch.inference_mode():
        memory = model.encode(unpadded)
        step = model.plain_step(memory, None, 4)
        caches, cross = model.new_cache(capacity=4), model.new_cross_cache()
        for t, token in enumerate([1, 3, 7, 3]):
            ids_t = torch.tensor([[token]])
            expected = model.decode(ids_t, memory, None, caches=caches, cross_caches=cross)[:, -1]
            assert torch.equal(step(ids_t, t), expected)


@pytest.mark.parametrize("eos_id", [2, -1])
def test_greedy_decode_takes_the_plain_step_and_gives_the_modules_tokens(eos_id):
    model = _model(2)
    cached = model.greedy_decode(SRC, bos_id=1, eos_id=eos_id, max_new_tokens=20)
    plain = model.greedy_decode(SRC, bos_id=1, eos_id=eos_id, max_new_tokens=20, use_cache=False)
    hooked = model.decoder.layers[0].self_attn.q_proj.register_forward_hook(lambda *_: None)  # forces the modules
    try:
        modules = model.greedy_decode(SRC, bos_id=1, eos_id=eos_id, max_new_tokens=20)
    finally:
        hooked.remove()
    assert torch.equal(cached, plain) and torch.equal(cached, modules)


def test_a_hook_sees_every_step_because_the_modules_then_run():
    model = _model(3)
    calls = []
    handle = model.decoder.layers[1].feed_forward.register_forward_hook(lambda *_: calls.append(1))
    with torch.inference_mode():
        assert model.plain_step(model.encode(SRC), model.make_src_mask(SRC), 5) is None
    model.greedy_decode(SRC, bos_id=1, eos_id=-1, max_new_tokens=7)
    handle.remove()
    assert len(calls) == 7  # one per step: the plain step would have skipped the hook
    pre = model.head.register_forward_pre_hook(lambda *_: None)
    assert not runs_as_written(model)
    pre.remove()
    assert runs_as_written(model)
    glob = nn.modules.module.register_module_forward_hook(lambda *_: None)  # a hook on every module
    try:
        assert not runs_as_written(model)
    finally:
        glob.remove()


def test_training_mode_and_unknown_parts_take_the_modules():
    model = _model(4)
    with torch.inference_mode():
        memory, mask = model.encode(SRC), model.make_src_mask(SRC)
        model.train()
        assert model.plain_step(memory, mask, 4) is None  # dropout draws: the modules must run
        model.eval()
        model.decoder.layers[0].dropout.train()  # one module left training is enough
        assert model.plain_step(memory, mask, 4) is None
        model.eval()
        assert model.plain_step(memory, mask, 4) is not None
        for overrides in ({"positional": "rope"}, {"num_kv_heads": 2}, {"qk_norm": True}):
            other = _model(4, **overrides)
            assert other.plain_step(other.encode(SRC), mask, 4) is None, overrides
            assert plain_decoder_step(other.decoder, other.encode(SRC), mask, 4) is None


def test_a_subclass_that_changes_decoding_is_respected():
    class Shifted(tl.Transformer):
        def decode(self, *args, **kwargs):
            return super().decode(*args, **kwargs) + torch.arange(13.0)  # prefers high ids

    torch.manual_seed(5)
    model = Shifted(vocab_size=13, **SMALL).eval()
    with torch.inference_mode():
        assert model.plain_step(model.encode(SRC), None, 3) is None
    out = model.greedy_decode(SRC, bos_id=1, eos_id=-1, max_new_tokens=6)
    assert torch.equal(out, model.greedy_decode(SRC, bos_id=1, eos_id=-1, max_new_tokens=6, use_cache=False))


def test_lora_layers_run_their_own_forward_in_the_plain_step():
    model = _model(6)
    tl.lora.add_lora(model, targets=("q_proj", "v_proj", "linear1"), r=2)
    for module in model.modules():
        if isinstance(module, tl.lora.LoRALinear):
            nn.init.normal_(module.lora_B, std=0.5)
    model.eval()
    ids = torch.randint(1, 13, (3, 6))
    with_lora = _module_logits(model, SRC, ids)
    assert torch.equal(_plain_logits(model, SRC, ids), with_lora)
    assert not torch.allclose(with_lora, _module_logits(_model(6), SRC, ids), atol=1e-3)  # LoRA changed the outputs


def test_the_plain_step_refuses_a_wrong_shape():
    model = _model(7)
    with torch.inference_mode():
        step = plain_decoder_step(model.decoder, model.encode(SRC), model.make_src_mask(SRC), 4)
        with pytest.raises(ValueError, match=r"one position, shape \(3, 1, 32\), got \(3, 2, 32\)"):
            step(torch.zeros(3, 2, 32))


@pytest.mark.slow  # importing torch's compiler takes seconds
def test_a_compiled_module_takes_the_modules():
    model = _model(8)
    assert runs_as_written(model)
    model.decoder.layers[0].feed_forward.compile()  # compiled lazily: nothing runs here
    assert not runs_as_written(model)


def test_a_model_with_its_own_caches_takes_the_modules():
    class OwnCache(tl.Transformer):
        def new_cache(self, capacity=None):
            return super().new_cache(capacity)

    torch.manual_seed(9)
    other = OwnCache(vocab_size=13, **SMALL).eval()
    with torch.inference_mode():
        assert other.plain_step(other.encode(SRC), None, 3) is None


# ---- the decoder-only model's step (DecoderOnlyLM.plain_step, taken by generate) ----------------------------------

LM_CONFIGS = [
    {},
    {"norm_first": True, "final_norm": True},
    {"norm": "rms", "norm_first": True},
    {"activation": "gelu", "positional": "sinusoidal"},
    {"activation": "swiglu", "bias": False},
    {"tie_embeddings": True, "scale_embedding": True},
    {"attention_only": True},
    {"num_experts": 4, "experts_per_token": 2},
]


def _lm(seed=0, **overrides):
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(**{"vocab_size": 13, "positional": "learned", **SMALL, **overrides}).eval()


PROMPT = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11], [4, 5, 6, 7]])  # a repeated row: the prefill runs it once


@pytest.mark.parametrize("overrides", LM_CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_the_language_models_plain_step_equals_the_modules_bit_for_bit(overrides):
    model = _lm(1, **overrides)
    ids = torch.randint(1, 13, (3, 7))
    with torch.inference_mode():
        by_modules, by_plain = model.new_cache(capacity=11), model.new_cache(capacity=11)
        assert torch.equal(model(PROMPT, by_modules), model(PROMPT, by_plain))  # the prompt, through the modules
        step = model.plain_step(by_plain)
        assert step is not None
        for t in range(ids.shape[1]):
            expected = model(ids[:, t : t + 1], by_modules, checked=True)[:, -1]  # (3, V)
            assert torch.equal(step(ids[:, t : t + 1], by_plain[0].length), expected), t
        assert by_plain[0].length == by_modules[0].length == 11


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_takes_the_plain_step_and_gives_the_modules_tokens(temperature):
    model = _lm(2)
    sample = dict(temperature=temperature, rng=None if temperature == 0 else torch.Generator().manual_seed(3))
    taken, offered = [], model.plain_step
    model.plain_step = lambda caches: taken.append(offered(caches)) or taken[-1]  # records what generate took
    plain = model.generate(PROMPT, 12, **sample)
    del model.plain_step
    assert len(taken) == 1 and taken[0] is not None
    sample["rng"] = None if temperature == 0 else torch.Generator().manual_seed(3)
    hooked = model.head.register_forward_hook(lambda *_: None)  # forces the modules
    try:
        modules = model.generate(PROMPT, 12, **sample)
    finally:
        hooked.remove()
    assert torch.equal(plain, modules)
    if temperature == 0:
        assert torch.equal(plain, model.generate(PROMPT, 12, temperature=0.0, use_cache=False))


def test_the_language_model_takes_the_modules_where_the_plain_step_would_not_be_exact():
    model = _lm(4)
    with torch.inference_mode():
        assert model.plain_step(model.new_cache()) is not None
        model.train()
        assert model.plain_step(model.new_cache()) is None  # dropout draws: the modules must run
        model.eval()
        hook = model.decoder.layers[1].feed_forward.register_forward_hook(lambda *_: None)
        assert model.plain_step(model.new_cache()) is None  # a hook must see every call
        hook.remove()
        for overrides in (
            {"positional": "rope"},
            {"num_kv_heads": 2},
            {"parallel_block": True, "norm_first": True},
            {"qk_norm": True},
        ):
            other = _lm(4, **overrides)
            assert other.plain_step(other.new_cache()) is None, overrides

    class Shifted(tl.DecoderOnlyLM):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs) + torch.arange(13.0)  # prefers high ids

    torch.manual_seed(5)
    shifted = Shifted(vocab_size=13, positional="learned", **SMALL).eval()
    assert shifted.plain_step(shifted.new_cache()) is None
    out = shifted.generate(PROMPT, 6, temperature=0.0)
    assert torch.equal(out, shifted.generate(PROMPT, 6, temperature=0.0, use_cache=False))
    assert (out[:, 4:] == 12).all()  # the subclass's forward was the one that ran


def test_the_language_models_plain_step_refuses_a_wrong_shape_and_a_wrong_number_of_caches():
    model = _lm(7)
    with torch.inference_mode():
        with pytest.raises(ValueError, match=r"one KVCache per layer \(2\), got 1"):
            plain_decoder_step(model.decoder, None, None, 0, caches=model.new_cache()[:1])
        step = plain_decoder_step(model.decoder, None, None, 0, caches=model.new_cache(capacity=4))
        with pytest.raises(ValueError, match=r"one position, shape \(B, 1, 32\), got \(3, 2, 32\)"):
            step(torch.zeros(3, 2, 32))
        assert plain_decoder_step(_model(7).decoder, None, None, 4) is None  # cross-attention needs a memory
        assert plain_decoder_step(model.decoder, torch.zeros(1, 2, 32), None, 4) is None  # and no memory the other
