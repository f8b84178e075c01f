"""The inside page's switches ("Break it, and watch"): the Shakespeare character model as one graph whose inputs say
which heads, layers, positions and norms are switched off, models/shakespeare_char_ablation.onnx
(transformer_lib.export.ablation_model).

Mean ablation needs each head's and each sublayer's mean output: the build takes them over MEAN_WINDOWS windows of
128 characters of the validation text (tl.inside.mean_activations), and bakes them into the file. The page reads the
bits per character on a fixed passage of the validation text (PASSAGE_AT) and writes a greedy continuation of the
reader's text with the model as switched. The build records PyTorch's numbers for CASES, each computed with
tl.inside's own interventions (zero_heads, mean_heads, zero_output, mean_output, without_positions, skip_norms),
not with the graph: the file is checked against them here, and the page in the browser tests. Its int8 file would
ship when the bits per character were PyTorch's at four decimals and the text the same on CASES and on AGREEMENT -
len(CASES) settings drawn at random (random_cases): the page's numbers are compared at that precision.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import (
    ABLATION_MEAN,
    ABLATION_ZERO,
    ablation_model,
    ablation_points,
    ablation_switches,
    export_ablation,
)

from .common import AGREEMENT, check_session, corpus_texts, page_defaults, try_int8

PAGE = page_defaults("inside")
PROMPT = PAGE["inside-text"]  # the page continues the reader's text; its default is the answers' prompt
NEW = 40  # characters the page writes after the text (fewer when the text leaves less room)
MEAN_WINDOWS = 64  # windows of 128 characters of the validation text whose means mean ablation writes
PASSAGE_AT = "\n\n"  # the passage starts after the first blank line from character 2000 of the validation text
BPC_TOLERANCE = 1e-4  # the page's bits per character against PyTorch's

# The switches the answers are recorded for: what a reader tries first, one kind at a time, then several at once.
# (layer, head) pairs and layers count from 0; "mean" replaces by the mean output, "zero" by zeros.
CASES = [
    {"name": "the whole model"},
    {"name": "layer 1 head 3 zeroed", "heads": {(0, 2): "zero"}},
    {"name": "layer 4 head 1 by its mean", "heads": {(3, 0): "mean"}},
    {"name": "layer 2 zeroed", "layers": {1: "zero"}},
    {"name": "layer 1 by its mean", "layers": {0: "mean"}},
    {"name": "no positions", "positions": False},
    {"name": "layer 2's feed-forward norm skipped", "norms": [3]},
    {"name": "the final norm skipped", "norms": [8]},
    {"name": "several at once", "heads": {(1, 1): "zero", (2, 3): "mean"}, "layers": {3: "zero"}, "norms": [0]},
]


def random_cases(model, count: int, seed: int = 0) -> list[dict]:
    """`count` settings of the switches drawn with `seed`: each head off with probability 1/8 (zeroed or its mean),
    each layer with 1/10, the positions with 1/10, each norm with 1/10; for the int8 trial."""
    g = torch.Generator().manual_seed(seed)
    L, h, norms = model.config.num_layers, model.config.num_heads, len(tl.inside.norm_names(model))
    u = lambda *shape: torch.rand(*shape, generator=g).tolist()  # noqa: E731
    cases = []
    for k in range(count):
        how = lambda x: "zero" if x < 0.5 else "mean"  # noqa: E731
        heads = {(i, j): how(v) for i, row in enumerate(u(L, h)) for j, x in enumerate(row) if x < 1 / 8 for v in u(1)}
        layers = {i: how(v) for i, x in enumerate(u(L)) if x < 0.1 for v in u(1)}
        cases.append({"name": f"random {k}", "heads": heads, "layers": layers, "positions": u(1)[0] >= 0.1,
                      "norms": [i for i, x in enumerate(u(norms)) if x < 0.1]})  # fmt: skip
    return cases


def switches(model, case: dict) -> tuple[torch.Tensor, ...]:
    """A case -> the graph's switch inputs: heads (L, h), layers (L,), positions (1,), norms (2L + 1,), int64."""
    heads, layers, positions, norms = ablation_switches(model)
    code = {"zero": ABLATION_ZERO, "mean": ABLATION_MEAN}
    for (layer, head), how in case.get("heads", {}).items():
        heads[layer, head] = code[how]
    for layer, how in case.get("layers", {}).items():
        layers[layer] = code[how]
    positions[0] = int(case.get("positions", True))
    for norm in case.get("norms", []):
        norms[norm] = 0
    return heads, layers, positions, norms


@contextlib.contextmanager
def intervened(model, means: dict, case: dict):
    """Within the block, `model` is switched as `case` says, with tl.inside's own interventions."""
    edits, by_layer = {}, {}
    for (layer, head), how in case.get("heads", {}).items():
        by_layer.setdefault(layer, {}).setdefault(how, []).append(head)
    for layer, hows in by_layer.items():  # a layer's zeroed heads, then its heads replaced by their means
        name = f"decoder.layers.{layer}.self_attn.heads"
        zero = tl.inside.zero_heads(hows.get("zero", []))
        mean = tl.inside.mean_heads(hows.get("mean", []), means[name])
        edits[name] = lambda value, zero=zero, mean=mean: mean(zero(value))
    for layer, how in case.get("layers", {}).items():
        for sub in ("self_attn.out", "feed_forward.out"):
            name = f"decoder.layers.{layer}.{sub}"
            edits[name] = tl.inside.zero_output() if how == "zero" else tl.inside.mean_output(means[name])
    names = tl.inside.norm_names(model)
    with contextlib.ExitStack() as stack:
        stack.enter_context(tl.inside.intervene(model, edits))
        stack.enter_context(tl.inside.skip_norms(model, [names[i] for i in case.get("norms", [])]))
        if not case.get("positions", True):
            stack.enter_context(tl.inside.without_positions(model))
        yield


def bits_per_character(logits: torch.Tensor, ids: torch.Tensor) -> float:
    """logits (T, V) over a passage `ids` (T,) -> the mean of -log2 p(next character), over T - 1 positions."""
    logp = logits[:-1].double().log_softmax(-1)  # (T - 1, V)
    return float(-logp.gather(-1, ids[1:, None]).mean() / math.log(2))


def _answers(model, tok, means: dict, case: dict, passage: torch.Tensor, strict: bool = True) -> dict:
    """PyTorch's numbers for one case: the bits per character on the passage and the greedy continuation of PROMPT
    (the whole text run at every step, as the page does), with the smallest gap between its two likeliest logits
    (strict: fail when it is under 1e-3, where onnxruntime's rounding could pick the other character)."""
    ids = tok.encode(PROMPT)
    with intervened(model, means, case), torch.no_grad():
        bpc = bits_per_character(model(passage[None])[0], passage)
        margin = math.inf
        for _ in range(NEW):
            logits = model(torch.tensor([ids]))[0, -1]  # (V,)
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
    if strict and margin < 1e-3:
        raise SystemExit(f"{case['name']}: the greedy text passes a near tie ({margin:.1e}); pick another case")
    text = tok.decode(ids[len(tok.encode(PROMPT)) :])
    return {"name": case["name"], "switches": [s.tolist() for s in switches(model, case)], "bpc": bpc,
            "text": text, "margin": margin}  # fmt: skip


def build(models: Path) -> tuple[dict, dict]:
    """Write the switchable model into `models`; -> (meta, PyTorch's answers for CASES)."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    windows = torch.tensor(corpus_texts(val, MEAN_WINDOWS, cfg.max_len))  # (64, 128)
    means = tl.inside.mean_activations(model, windows, ablation_points(model))
    text = tok.decode(val[:6000])
    start = text.index(PASSAGE_AT, 2000) + len(PASSAGE_AT)
    passage = torch.tensor(tok.encode(text[start : start + cfg.max_len]))  # (128,)
    answers = [_answers(model, tok, means, case, passage) for case in CASES]
    path = export_ablation(model, means, models / "shakespeare_char_ablation.onnx")
    session, module = ort.InferenceSession(str(path)), ablation_model(model, means)
    gap = 0.0
    for case, answer in zip(CASES, answers, strict=True):
        inputs = (passage[None], *switches(model, case))
        with torch.no_grad(), intervened(model, means, case):
            expected = (model(passage[None]),)  # tl.inside's numbers, which the graph must give
        gap = max(gap, check_session(f"{path.stem}, {case['name']}", session, inputs, expected))
        with torch.no_grad():
            assert abs(bits_per_character(module(*inputs)[0], passage) - answer["bpc"]) < 1e-5

    def page_answer(session, case):  # the bits per character at four decimals, and the greedy text
        feeds = dict(zip(["heads", "layers", "positions", "norms"], [s.numpy() for s in switches(model, case)]))
        logits = session.run(None, {"tokens": passage[None].numpy(), **feeds})[0][0]
        ids = tok.encode(PROMPT)
        for _ in range(NEW):
            ids.append(int(session.run(None, {"tokens": np.array([ids]), **feeds})[0][0, -1].argmax()))
        return round(bits_per_character(torch.from_numpy(logits), passage), 4), tok.decode(ids[len(PROMPT) :])

    trial = CASES + random_cases(model, AGREEMENT - len(CASES))
    reference = []
    for case in trial:  # PyTorch's answers, with tl.inside's interventions
        answer = _answers(model, tok, means, case, passage, strict=False)
        reference.append((round(answer["bpc"], 4), answer["text"]))
    path, int8 = try_int8(
        path,
        "the bits per character the same at four decimals and the greedy text the same",
        trial,
        reference,
        page_answer,
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 switchable model would need its own numbers in expected.json")
    meta = {
        "file": path.name,
        "gap": gap,
        "int8": int8,
        "passage": tok.decode(passage),
        "new": NEW,
        "norms": tl.inside.norm_names(model),
        "mean_windows": MEAN_WINDOWS,
        "codes": {"on": 0, "zero": ABLATION_ZERO, "mean": ABLATION_MEAN},
    }
    return meta, {"prompt": PROMPT, "cases": answers}
