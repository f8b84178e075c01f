"""tl.export.for_playground: one file that the playground pages read from the reader's disk, and its checks.

The file's layout and its checks are the pages' too (book/_static/playground/playground.js, readOwnModel); the
browser tests load such a file into the language-model page (tests/browser/test_own_model.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import transformer_lib as tl
from transformer_lib.export import (
    PLAYGROUND_MAGIC,
    PLAYGROUND_MAX_BYTES,
    empty_past,
    for_playground,
    read_playground,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tok():
    return tl.CharTokenizer("abcdefgh ,.\n")


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(vocab_size=len(tok.itos), d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=24)


def test_the_file_holds_the_model_and_its_tokenizer_and_runs_as_pytorch(tmp_path, model, tok):
    model.train()  # the reader's model may still be in training mode: the file is the eval model, the model untouched
    path = for_playground(model, tok, "tiny", tmp_path)
    assert path.name == "tiny.playground" and model.training
    header, onnx_bytes = read_playground(path)
    assert header["itos"] == tok.itos and header["kind"] == "language_model" and header["name"] == "tiny"
    assert (header["max_len"], header["layers"], header["heads"], header["kv_heads"], header["head_width"]) == (
        24, 2, 2, 2, 8,
    )  # fmt: skip
    assert header["parameters"] == sum(p.numel() for p in model.parameters())
    assert header["specials"] == {"pad": 0, "bos": 1, "eos": 2, "unk": 3, "count": 4}
    session = ort.InferenceSession(onnx_bytes)
    ids = torch.tensor([tok.encode("abc de")])  # (1, 6)
    past = empty_past(model).numpy()
    logits = session.run(None, {"tokens": ids.numpy(), "past_keys": past, "past_values": past})[0]
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(ids).numpy(), atol=1e-5)


def test_a_bracket_classifier_runs_with_bos_first_and_gives_its_attention(tmp_path):
    bracket_tok = tl.CharTokenizer("()[]")
    torch.manual_seed(0)
    classifier = tl.EncoderClassifier(vocab_size=8, num_classes=2, d_model=16, num_heads=4, num_layers=2, max_len=32)
    header, onnx_bytes = read_playground(for_playground(classifier, bracket_tok, "brackets", tmp_path))
    assert header["kind"] == "bracket_classifier" and header["itos"][4:] == ["(", ")", "[", "]"]
    session = ort.InferenceSession(onnx_bytes)
    ids = torch.tensor([[bracket_tok.bos_id, *bracket_tok.encode("([)]((")]])  # (1, 7): <bos> first, as chapter 8
    logits, attention = session.run(None, {"tokens": ids.numpy()})
    classifier.eval()
    with torch.no_grad():
        np.testing.assert_allclose(logits, classifier(ids).numpy(), atol=1e-5)
    assert attention.shape == (2, 4, 7, 7)  # (L, h, S, S): the page draws it


def test_a_digit_vit_needs_no_tokenizer_and_gives_its_class_tokens_attention(tmp_path):
    vit = tl.recipes.digits_vit(seed=1)
    header, onnx_bytes = read_playground(for_playground(vit, None, "digits", tmp_path))
    assert header["kind"] == "digit_classifier" and header["itos"] == []
    assert (header["image_size"], header["patch_size"], header["classes"]) == (8, 2, 10)
    images = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(0))  # (1, 1, 8, 8) in 0..1
    logits, attention = ort.InferenceSession(onnx_bytes).run(None, {"images": images.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(logits, vit.eval()(images).numpy(), atol=1e-5)
    assert attention.shape == (2, 4, 17, 17)  # (L, h, 1 + 16 patches, same): the class token first
    with pytest.raises(TypeError, match="8 x 8 one-channel images, ten classes and a class token"):
        for_playground(tl.recipes.digits_vit(pool="mean"), None, "x", tmp_path)


def _rewritten(data: bytes, **changes) -> bytes:
    start = len(PLAYGROUND_MAGIC)
    version, n = struct.unpack("<II", data[start : start + 8])
    header = json.loads(data[start + 8 : start + 8 + n])
    text = json.dumps({**header, **changes}).encode()
    return data[:start] + struct.pack("<II", version, len(text)) + text + data[start + 8 + n :]


def test_reading_names_what_was_expected_and_what_came(tmp_path, model, tok):
    data = for_playground(model, tok, "tiny", tmp_path).read_bytes()
    magic = len(PLAYGROUND_MAGIC)
    bad = {
        b"To be, or not to be": "is not a playground file",
        data[:magic] + struct.pack("<I", 2) + data[magic + 4 :]: "format version 2",
        data[: magic + 8 + 10]: "is cut short: its header",
        data[:-7]: "is cut short or padded",
        data + b"\0": "is cut short or padded",
        _rewritten(data, kind="image_classifier"): "of kind 'image_classifier'",
        data[: magic + 8] + b"\xff" + data[magic + 9 :]: "is damaged: its header is not readable JSON",
    }
    for i, (content, words) in enumerate(bad.items()):
        path = tmp_path / f"bad{i}.playground"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=words):
            read_playground(path)


def test_for_playground_refuses_what_the_page_cannot_run(tmp_path, model, tok):
    letters = tl.EncoderClassifier(vocab_size=len(tok.itos), num_classes=2, d_model=16, num_heads=2)
    with pytest.raises(TypeError, match=r"DecoderOnlyLM with a CharTokenizer.*\( \) \[ \].*got EncoderClassifier"):
        for_playground(letters, tok, "x", tmp_path)  # an encoder on letters: no page reads it
    three = tl.EncoderClassifier(vocab_size=8, num_classes=3, d_model=16, num_heads=2)
    with pytest.raises(TypeError, match="two classes"):
        for_playground(three, tl.CharTokenizer("()[]"), "x", tmp_path)
    with pytest.raises(TypeError, match="got DecoderOnlyLM with a WordTokenizer"):
        for_playground(model, tl.WordTokenizer("a b".split()), "x", tmp_path)
    with pytest.raises(ValueError, match="the tokenizer has 7 tokens and the model's vocabulary 16"):
        for_playground(model, tl.CharTokenizer("abc"), "x", tmp_path)
    for name in ("", "my model", "../up", "a" * 65, 3):
        with pytest.raises(ValueError, match="name must be 1 to 64"):
            for_playground(model, tok, name, tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written for a refused call


def test_a_model_too_large_for_a_page_is_refused_before_anything_is_written(tmp_path, tok, monkeypatch):
    big = tl.DecoderOnlyLM(vocab_size=len(tok.itos), d_model=64, num_heads=2, num_layers=2, d_ff=128, max_len=24)
    monkeypatch.setattr(tl.export, "PLAYGROUND_MAX_BYTES", 50_000)
    with pytest.raises(ValueError, match="the pages take up to .* Train a smaller model"):
        for_playground(big, tok, "big", tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_pages_read_the_same_layout_and_limit():
    """playground.js's readOwnModel checks what read_playground checks: the same first bytes, version and limit."""
    script = (Path(__file__).resolve().parents[2] / "book" / "_static" / "playground" / "playground.js").read_text()
    assert f"export const OWN_MAX_BYTES = {PLAYGROUND_MAX_BYTES:_};" in script
    assert 'const OWN_MAGIC = "TBS-PLAYGROUND\\r\\n";' in script and PLAYGROUND_MAGIC == b"TBS-PLAYGROUND\r\n"
    assert f"const OWN_VERSION = {tl.export.PLAYGROUND_VERSION};" in script
