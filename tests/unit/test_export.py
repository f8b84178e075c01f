"""ONNX files from transformer_lib.export give PyTorch's logits and attention weights in onnxruntime, at any length,
the step model with its KV cache gives, call after call, the logits of the full forward pass, and the lens model
gives tl.inside's logit lens and attention patterns."""

import pytest
import torch

import transformer_lib as tl

ort = pytest.importorskip("onnxruntime")  # the test extra installs onnx, onnxscript and onnxruntime
from transformer_lib.export import (  # noqa: E402
    empty_past,
    export_first_attention,
    export_lens,
    export_onnx,
    export_step,
    first_attention,
    lens_model,
    step_model,
    with_attention,
)

SMALL = dict(vocab_size=20, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=64)
MODELS = {
    "2017 language model": lambda: tl.DecoderOnlyLM(**SMALL),
    "modern language model": lambda: tl.DecoderOnlyLM(
        **SMALL, positional="rope", norm="rms", activation="swiglu", num_kv_heads=2, bias=False, norm_first=True
    ),
    "classifier": lambda: tl.EncoderClassifier(num_classes=2, **SMALL),
    "encoder-decoder": lambda: tl.Transformer(**SMALL, norm_first=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_onnxruntime_gives_pytorchs_outputs_and_attention_at_several_lengths(kind, tmp_path):
    torch.manual_seed(0)
    model = MODELS[kind]()
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "model.onnx")))
    reference = with_attention(model)
    g = torch.Generator().manual_seed(1)
    for length in (1, 6, 23):  # none of them the traced length (5)
        inputs = (torch.randint(1, 20, (1, length), generator=g),)
        if isinstance(model, tl.Transformer):
            inputs += (torch.randint(1, 20, (1, max(1, length - 3)), generator=g),)
        with torch.no_grad():
            logits, weights = reference(*inputs)
        feeds = {spec.name: x.numpy() for spec, x in zip(session.get_inputs(), inputs)}
        got_logits, got_weights = session.run(None, feeds)
        torch.testing.assert_close(torch.from_numpy(got_logits), logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.from_numpy(got_weights), weights, atol=1e-5, rtol=0)
        assert got_weights.shape[:2] == (2, 4)  # (layers, heads, T_q, T_k)
        assert abs(got_weights.sum(-1) - 1).max() < 1e-5  # each row of attention weights sums to 1


def test_export_names_what_it_takes(tmp_path):
    with pytest.raises(TypeError, match="DecoderOnlyLM, an EncoderOnlyModel, a Transformer or a VisionTransformer"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match=r"tokens must be a \(1, length\) tensor"):
        export_onnx(tl.DecoderOnlyLM(**SMALL), tmp_path / "x.onnx", example=(torch.ones(2, 3, dtype=torch.long),))


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [True, False])
def test_first_attention_probe_takes_any_mask_and_gives_zeros_for_a_fully_masked_row(norm_first, tmp_path):
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(**SMALL, norm_first=norm_first)
    session = ort.InferenceSession(str(export_first_attention(model, tmp_path / "probe.onnx")))
    tokens = torch.tensor([[0, 0, 5, 6, 7, 8, 9]])  # two <pad> on the left
    is_pad = tokens[0] == 0
    causal = tl.causal_mask(7)  # (7, 7)
    for mask in (causal & ~is_pad[None, :], ~is_pad[None, :].expand(7, 7), torch.ones(7, 7, dtype=torch.bool)):
        with torch.no_grad():
            expected = first_attention(model)(tokens, mask)  # (h, 7, 7)
            _, direct = model.decoder.layers[0].self_attn(*[_first_input(model, tokens)] * 3, mask, need_weights=True)
        (got,) = session.run(None, {"tokens": tokens.numpy(), "mask": mask.numpy()})
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(expected, direct[0], atol=0, rtol=0)  # the probe is the layer's own attention
    # causal and padding mask with left padding: rows 0 and 1 may see only <pad> keys, so they are all zeros
    (got,) = session.run(None, {"tokens": tokens.numpy(), "mask": (causal & ~is_pad[None, :]).numpy()})
    assert not torch.from_numpy(got).isnan().any()
    assert (got[:, :2] == 0).all() and abs(got[:, 2:].sum(-1) - 1).max() < 1e-5


def _first_input(model, tokens):
    """What the first layer's attention reads: the embedded tokens, normalised first in a pre-LN block."""
    x = model.pos(model.embed(tokens))
    return model.decoder.layers[0].norm1(x) if model.config.norm_first else x


def test_first_attention_takes_only_a_language_model():
    with pytest.raises(TypeError, match="takes a DecoderOnlyLM, got EncoderClassifier"):
        first_attention(tl.EncoderClassifier(num_classes=2, **SMALL))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bracket_classifier", "numbers_to_words", "shakespeare_char"])
def test_shipped_models_in_onnxruntime_give_pytorchs_outputs_at_several_lengths(name, tmp_path):
    """The playgrounds' models: the shipped checkpoints, exported, against PyTorch on real-sized inputs."""
    model, _ = tl.load_checkpoint(name)
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / f"{name}.onnx")))
    reference = with_attention(model)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    for length in (1, 9, 40 if name != "numbers_to_words" else 12):
        inputs = (torch.randint(4, vocab, (1, length), generator=g),)  # ids after the four specials
        if name == "numbers_to_words":
            inputs = (
                torch.randint(4, 14, (1, 5), generator=g),
                torch.randint(4, model.config.tgt_vocab_size, (1, length), generator=g),
            )
        with torch.no_grad():
            expected = reference(*inputs)
        got = session.run(None, {spec.name: x.numpy() for spec, x in zip(session.get_inputs(), inputs)})
        for g_out, e_out in zip(got, expected):  # logits, then the attention weights
            torch.testing.assert_close(torch.from_numpy(g_out), e_out, atol=1e-5, rtol=1e-5)


def _run_steps(session, model, sequence, chunks):
    """Feed `sequence` (1, T) to the step model `session` in chunks of the given sizes, carrying the cache;
    check each call's logits against the full forward pass's for the same positions (1e-5 relative)."""
    with torch.no_grad():
        full = model(sequence)  # (1, T, V)
    keys = values = empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k): the first call feeds the prompt
    start = 0
    for n in chunks:
        feeds = {"tokens": sequence[:, start : start + n].numpy(), "past_keys": keys, "past_values": values}
        logits, keys, values = session.run(None, feeds)
        torch.testing.assert_close(torch.from_numpy(logits), full[:, start : start + n], atol=1e-5, rtol=1e-5)
        start += n
        assert keys.shape[3] == values.shape[3] == start  # (L, 1, h_kv, T_past + T_new, d_k)
    return keys


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["2017 language model", "modern language model"])
def test_step_model_in_onnxruntime_gives_the_full_forward_pass_logits_prompt_then_token_by_token(kind, tmp_path):
    torch.manual_seed(0)
    model = MODELS[kind]()
    with torch.no_grad():
        model(torch.randint(1, 20, (1, 3)))  # run before the export, as a trained model has been (RoPE keeps tables)
    session = ort.InferenceSession(str(export_step(model, tmp_path / "step.onnx")))
    sequence = torch.randint(1, 20, (1, 64), generator=torch.Generator().manual_seed(1))  # all of max_len
    keys = _run_steps(session, model, sequence, [9] + [1] * 40 + [6] + [1] * 9)  # prompt, steps, a chunk, steps
    assert keys.shape == (2, 1, model.decoder.layers[0].self_attn.num_kv_heads, 64, 8)
    _run_steps(session, model, sequence, [1] * 64)  # a one-token prompt: the first call too has T_new = 1


@pytest.mark.slow
def test_step_model_in_pytorch_is_the_models_own_forward_pass_with_its_cache():
    torch.manual_seed(0)
    model = MODELS["2017 language model"]().eval()
    step = step_model(model)
    sequence = torch.randint(1, 20, (1, 12))
    with torch.no_grad():
        full = model(sequence)
        logits, keys, values = step(sequence[:, :8], empty_past(model), empty_past(model))
        caches = [tl.KVCache() for _ in model.decoder.layers]
        direct = model(sequence[:, :8], caches)  # the package's own cached forward pass
        torch.testing.assert_close(logits, direct, atol=0, rtol=0)
        torch.testing.assert_close(keys, torch.stack([c.key for c in caches]), atol=0, rtol=0)
        for t in range(8, 12):
            logits, keys, values = step(sequence[:, t : t + 1], keys, values)
            torch.testing.assert_close(logits, full[:, t : t + 1], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_shipped_language_model_step_file_writes_the_longest_greedy_text_as_pytorch(tmp_path):
    """The playground's case: an 8-character prompt, then one token per call up to max_len (128) positions."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    session = ort.InferenceSession(str(export_step(model, tmp_path / "step.onnx")))
    prompt = torch.randint(4, model.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
    greedy = model.generate(prompt, model.config.max_len - 8, temperature=0.0)  # (1, 128)
    keys = values = empty_past(model).numpy()
    ids = prompt
    feed = prompt
    while ids.shape[1] < model.config.max_len:
        logits, keys, values = session.run(None, {"tokens": feed.numpy(), "past_keys": keys, "past_values": values})
        feed = torch.tensor([[int(logits[0, -1].argmax())]])  # (1, 1): only the new token next time
        ids = torch.cat([ids, feed], dim=1)
    assert torch.equal(ids, greedy)
    _run_steps(session, model, greedy, [8] + [1] * 120)  # and every call's logits are the full pass's


@pytest.mark.slow
def test_exports_leave_the_model_in_eval_mode(tmp_path):
    """torch.onnx.export puts the traced wrapper back in its own mode, and with it the model: an exported
    model left in training mode would run its dropout afterwards, in PyTorch."""
    model = tl.DecoderOnlyLM(**SMALL).eval()
    for export in (export_onnx, export_first_attention, export_step, export_lens):
        export(model, tmp_path / f"{export.__name__}.onnx")
        assert not model.training, export.__name__


def test_step_model_names_what_it_takes():
    with pytest.raises(TypeError, match="step_model takes a DecoderOnlyLM, got EncoderClassifier"):
        step_model(tl.EncoderClassifier(num_classes=2, **SMALL))
    model = tl.DecoderOnlyLM(**SMALL)
    step, past = step_model(model), empty_past(model)  # (2, 1, 4, 0, 8)
    assert past.shape == (2, 1, 4, 0, 8)
    with pytest.raises(TypeError, match="tokens must be an int64 tensor"):
        step(torch.ones(1, 3), past, past)
    with pytest.raises(ValueError, match=r"tokens must be a \(1, T_new\) tensor"):
        step(torch.ones(2, 3, dtype=torch.long), past, past)
    with pytest.raises(
        ValueError, match=r"past_keys must have shape \(L, 1, h_kv, T_past, d_k\) = \(2, 1, 4, T_past, 8\)"
    ):
        step(torch.ones(1, 3, dtype=torch.long), torch.zeros(2, 1, 4, 0), past)
    with pytest.raises(TypeError, match="past_values must be a float tensor"):
        step(torch.ones(1, 3, dtype=torch.long), past, past.long())
    with pytest.raises(ValueError, match="past_keys and past_values must have the same shape"):
        step(torch.ones(1, 3, dtype=torch.long), past, torch.zeros(2, 1, 4, 1, 8))


@pytest.mark.parametrize("kind", ["2017 language model", "modern language model"])
def test_lens_model_is_insides_logit_lens_and_patterns(kind):
    """lens_model computes, for batch 1, what tl.inside's logit lens and captured patterns hold; the last row is
    the model's logits."""
    torch.manual_seed(0)
    model = MODELS[kind]().eval()
    tokens = torch.randint(1, 20, (1, 13), generator=torch.Generator().manual_seed(2))
    logits, cache = tl.inside.run_with_cache(model, tokens)
    expected = tl.inside.logit_lens(model, cache)[:, 0]  # (L, T, V)
    with torch.no_grad():
        lens, attention = lens_model(model)(tokens)
        plain = model(tokens)  # the model's own forward pass, outside any capture
    assert lens.shape == (2, 13, 20) and attention.shape == (2, 4, 13, 13)
    torch.testing.assert_close(lens, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(lens[-1], logits[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(lens[-1], plain[0], atol=1e-5, rtol=0)
    patterns = torch.stack([cache[f"decoder.layers.{i}.self_attn.pattern"][0] for i in range(2)])  # (L, h, T, T)
    torch.testing.assert_close(attention, patterns, atol=1e-6, rtol=0)
    assert not lens.isclose(lens[-1]).all(-1).all(-1)[0]  # the first layer's row is not a copy of the last


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["2017 language model", "modern language model"])
def test_lens_file_in_onnxruntime_gives_the_lens_model_at_several_lengths(kind, tmp_path):
    torch.manual_seed(0)
    model = MODELS[kind]()
    with torch.no_grad():
        model(torch.randint(1, 20, (1, 3)))  # run before the export, as a trained model has been (RoPE keeps tables)
    session = ort.InferenceSession(str(export_lens(model, tmp_path / "lens.onnx")))
    assert [i.name for i in session.get_inputs()] == ["tokens"]
    assert [o.name for o in session.get_outputs()] == ["lens", "attention"]
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # no hook left behind
    reference = lens_model(model)
    g = torch.Generator().manual_seed(1)
    for length in (1, 6, 64):  # none of them the traced length (5); 64 is all of max_len
        tokens = torch.randint(1, 20, (1, length), generator=g)
        with torch.no_grad():
            lens, attention = reference(tokens)
        got_lens, got_attention = session.run(None, {"tokens": tokens.numpy()})
        torch.testing.assert_close(torch.from_numpy(got_lens), lens, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.from_numpy(got_attention), attention, atol=1e-5, rtol=0)
        assert got_lens.shape == (2, length, 20) and got_attention.shape == (2, 4, length, length)


def test_lens_model_takes_only_a_language_model(tmp_path):
    with pytest.raises(TypeError, match="lens_model takes a DecoderOnlyLM, got EncoderClassifier"):
        lens_model(tl.EncoderClassifier(num_classes=2, **SMALL))
    with pytest.raises(TypeError, match="export_lens takes a DecoderOnlyLM, got Transformer"):
        export_lens(tl.Transformer(**SMALL), tmp_path / "x.onnx")


def test_bert_for_masked_lm_exports_with_its_attention_at_several_lengths(tmp_path):
    """The fill-in-the-blank page's file: tokens (1, S) -> logits (1, S, V) and attention (layers, heads, S, S)."""
    torch.manual_seed(0)
    cfg = tl.bert.bert_config(vocab_size=20, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=64, dropout=0.0)
    model = tl.bert.BertForMaskedLM(cfg)
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "bert.onnx")))
    for length in (1, 9, 64):
        tokens = torch.randint(1, 20, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            logits, weights = with_attention(model)(tokens)
        got_logits, got_weights = session.run(None, {"tokens": tokens.numpy()})
        assert got_logits.shape == (1, length, 20) and got_weights.shape == (2, 4, length, length)
        torch.testing.assert_close(torch.from_numpy(got_logits), logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.from_numpy(got_weights), weights, atol=1e-5, rtol=0)


def _small_vit(pool: str = "cls") -> tl.vit.VisionTransformer:
    cfg = tl.vit.vit_config(d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=64)
    return tl.vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10, pool=pool).eval()


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vision_transformer_exports_with_its_attention(pool, tmp_path):
    """The draw-a-digit page's file: images (1, 1, 8, 8) -> logits (1, 10) and attention (layers, heads, T, T), with
    T = 17 (the class token and 16 patches) or 16 (mean pooling), equal to PyTorch's on images it was not traced on."""
    torch.manual_seed(0)
    model = _small_vit(pool)
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "vit.onnx")))
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("images", [1, 1, 8, 8])]
    T = 17 if pool == "cls" else 16
    g = torch.Generator().manual_seed(1)
    for images in (torch.rand(1, 1, 8, 8, generator=g), torch.ones(1, 1, 8, 8), torch.zeros(1, 1, 8, 8)):
        with torch.no_grad():
            logits, weights = with_attention(model)(images)
        got_logits, got_weights = session.run(None, {"images": images.numpy()})
        assert got_logits.shape == (1, 10) and got_weights.shape == (2, 4, T, T)
        torch.testing.assert_close(torch.from_numpy(got_logits), logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.from_numpy(got_weights), weights, atol=1e-5, rtol=0)
        if pool == "cls":  # the last layer's class-token row over the patches is vit.cls_attention's map
            torch.testing.assert_close(
                weights[-1, :, 0, 1:].mean(0).reshape(4, 4), tl.vit.cls_attention(model, images)[0]
            )


def test_vision_transformer_export_names_the_image_it_takes(tmp_path):
    model = _small_vit()
    for wrong in (
        (torch.zeros(1, 1, 16, 16),),
        (torch.zeros(2, 1, 8, 8),),
        (torch.zeros(1, 1, 8, 8, dtype=torch.long),),
    ):
        with pytest.raises(ValueError, match=r"images must be one float tensor of shape \(1, 1, 8, 8\)"):
            export_onnx(model, tmp_path / "x.onnx", example=wrong)
