"""Breaking a model: tl.inside's interventions (zero_output, mean_output, skip_norms, without_positions) against
closed forms, and the switchable graph of the inside playground (tl.export.ablation_model) against them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import transformer_lib as tl
from transformer_lib import inside
from transformer_lib.export import ablation_model, ablation_points, ablation_switches, export_ablation


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(
        vocab_size=20,
        d_model=16,
        num_heads=2,
        num_layers=2,
        d_ff=32,
        max_len=16,
        positional="learned",
        norm_first=True,
        final_norm=True,  # as the book's character model
    ).eval()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(4, 20, (3, 10), generator=torch.Generator().manual_seed(1))  # (3, 10)


@pytest.fixture(scope="module")
def means(model, tokens):
    return inside.mean_activations(model, tokens, ablation_points(model))


def test_without_positions_is_the_model_without_its_position_table(model, tokens):
    with torch.no_grad(), inside.without_positions(model):
        got = model(tokens)
    saved = model.pos.table.weight.detach().clone()
    try:
        with torch.no_grad():
            model.pos.table.weight.zero_()  # a table of zeros adds nothing: the closed form of "no positions"
            expected = model(tokens)
    finally:
        with torch.no_grad():
            model.pos.table.weight.copy_(saved)
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="learned or sinusoidal.*positional='rope'"):
        with inside.without_positions(tl.DecoderOnlyLM(vocab_size=20, d_model=16, num_heads=2, positional="rope")):
            pass


def test_a_skipped_norm_hands_its_input_on_and_a_zeroed_layer_adds_nothing(model, tokens):
    names = inside.norm_names(model)
    assert names == [
        "decoder.layers.0.attn_norm", "decoder.layers.0.ff_norm", "decoder.layers.1.attn_norm",
        "decoder.layers.1.ff_norm", "decoder.norm",
    ]  # fmt: skip
    with torch.no_grad(), inside.skip_norms(model, ["decoder.norm"]):
        _, cache = inside.run_with_cache(model, tokens, names=["decoder.layers.1.resid_post"])
        logits = model(tokens)
    torch.testing.assert_close(logits, model.head(cache["decoder.layers.1.resid_post"]))  # the head reads the stream
    edits = {f"decoder.layers.1.{s}.out": inside.zero_output() for s in ("self_attn", "feed_forward")}
    with torch.no_grad(), inside.intervene(model, edits):
        out, cache = inside.run_with_cache(
            model, tokens, names=["decoder.layers.1.resid_pre", "decoder.layers.1.resid_post"]
        )
    torch.testing.assert_close(cache["decoder.layers.1.resid_pre"], cache["decoder.layers.1.resid_post"])
    with pytest.raises(KeyError, match="no norm .*decoder.layers.0.norm1"):
        with inside.skip_norms(model, ["decoder.layers.0.norm1"]):
            pass


def test_mean_output_writes_the_mean_everywhere(model, tokens, means):
    name = "decoder.layers.0.feed_forward.out"
    with inside.intervene(model, {name: inside.mean_output(means[name])}):
        _, cache = inside.run_with_cache(model, tokens, names=[name])
    torch.testing.assert_close(cache[name], means[name].expand(3, 10, -1))
    _, plain = inside.run_with_cache(model, tokens, names=[name])
    torch.testing.assert_close(means[name], plain[name].mean((0, 1)))


CASES = [
    {},
    {"heads": [(0, 1, 1)]},
    {"heads": [(1, 0, 2)]},
    {"layers": [(0, 1)]},
    {"layers": [(1, 2)]},
    {"positions": 0},
    {"norms": [1]},
    {"norms": [4]},
    {"heads": [(0, 0, 2), (1, 1, 1)], "layers": [(1, 1)], "positions": 0, "norms": [0, 3]},
]


def _reference(model, means, case, tokens):
    """tl.inside's interventions for a case: the numbers the switches must give."""
    edits = {}
    for layer, head, code in case.get("heads", []):
        name = f"decoder.layers.{layer}.self_attn.heads"
        edits[name] = inside.zero_heads(head) if code == 1 else inside.mean_heads(head, means[name])
    for layer, code in case.get("layers", []):
        for sub in ("self_attn.out", "feed_forward.out"):
            name = f"decoder.layers.{layer}.{sub}"
            edits[name] = inside.zero_output() if code == 1 else inside.mean_output(means[name])
    names = inside.norm_names(model)
    with (
        torch.no_grad(),
        inside.intervene(model, edits),
        inside.skip_norms(model, [names[i] for i in case.get("norms", [])]),
    ):
        if case.get("positions", 1):
            return model(tokens)
        with inside.without_positions(model):
            return model(tokens)


def _switches(model, case):
    heads, layers, positions, norms = ablation_switches(model)
    for layer, head, code in case.get("heads", []):
        heads[layer, head] = code
    for layer, code in case.get("layers", []):
        layers[layer] = code
    positions[0] = case.get("positions", 1)
    for i in case.get("norms", []):
        norms[i] = 0
    return heads, layers, positions, norms


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c) or "all on")
def test_the_switchable_graph_gives_tl_insides_numbers(model, means, tokens, case):
    module = ablation_model(model, means)
    with torch.no_grad():
        got = module(tokens[:1], *_switches(model, case))
    expected = _reference(model, means, case, tokens[:1])
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    if case:  # every case changes the model's logits: the switch does something
        assert not torch.allclose(expected, model(tokens[:1]), atol=1e-4)


@pytest.mark.slow
def test_one_onnx_file_takes_every_switch_as_an_input(tmp_path, model, means, tokens):
    ort = pytest.importorskip("onnxruntime")  # the test extra has it; a bare GPU machine may not
    path = export_ablation(model, means, tmp_path / "ablation.onnx")
    session = ort.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ["tokens", "heads", "layers", "positions", "norms"]
    for case in CASES:
        for length in (1, 7):
            ids = tokens[:1, :length]  # (1, T)
            feeds = dict(zip(["heads", "layers", "positions", "norms"], (s.numpy() for s in _switches(model, case))))
            got = session.run(None, {"tokens": ids.numpy(), **feeds})[0]
            np.testing.assert_allclose(got, _reference(model, means, case, ids).numpy(), atol=2e-5, rtol=1e-5)


def test_ablation_model_names_what_it_needs(model, means):
    with pytest.raises(KeyError, match="means lacks .*self_attn.heads"):
        ablation_model(model, {})
    with pytest.raises(TypeError, match="takes a DecoderOnlyLM, got EncoderClassifier"):
        ablation_model(tl.EncoderClassifier(vocab_size=20, num_classes=2, d_model=16, num_heads=2), means)
    rope = tl.DecoderOnlyLM(vocab_size=20, d_model=16, num_heads=2, num_layers=2, positional="rope")
    with pytest.raises(ValueError, match="positional='rope'"):
        ablation_model(rope, means)
