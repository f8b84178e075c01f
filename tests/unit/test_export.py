"""ONNX files from transformer_lib.export give PyTorch's logits and attention weights in onnxruntime, at any length."""

import pytest
import torch

import transformer_lib as tl

ort = pytest.importorskip("onnxruntime")  # the test extra installs onnx, onnxscript and onnxruntime
from transformer_lib.export import export_onnx, with_attention  # noqa: E402

SMALL = dict(vocab_size=20, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=64)
MODELS = {
    "2017 language model": lambda: tl.DecoderOnlyLM(**SMALL),
    "modern language model": lambda: tl.DecoderOnlyLM(
        **SMALL, positional="rope", norm="rms", activation="swiglu", num_kv_heads=2, bias=False, norm_first=True
    ),  # fmt: skip
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
