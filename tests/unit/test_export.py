"""ONNX files from transformer_lib.export give PyTorch's logits and attention weights in onnxruntime, at any length."""

import pytest
import torch

import transformer_lib as tl

ort = pytest.importorskip("onnxruntime")  # the test extra installs onnx, onnxscript and onnxruntime
from transformer_lib.export import export_first_attention, export_onnx, first_attention, with_attention  # noqa: E402

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
    with pytest.raises(TypeError, match="DecoderOnlyLM, an EncoderOnlyModel or a Transformer"):
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
