"""The brackets page (book/playground/brackets.md): the bracket classifier, models/bracket_classifier.onnx.

The build records PyTorch's P(balanced) on BRACKETS, among them the page's default string (defaults.json), and the
head that tracks partners (partner_head), on which the page opens. Its int8 file ships when the verdict is
PyTorch's on BRACKETS and on every held-out string, and P too at two decimals on the strings the page quotes
(QUOTED); expected.json then also holds the int8 file's own P, which the page must show.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import with_attention

from .common import check_session, export_checked, page_defaults, specials, try_int8

PAGE = page_defaults("brackets")  # the form's starting values: {"brackets-text": "[[()]]"}
QUOTED = ["([()])[]", "([(])][]", PAGE["brackets-text"], "[]"]  # the page's prose quotes their P, the default's too
BRACKETS = list(dict.fromkeys([*QUOTED, "(()", "([)]", "((((()))))"]))


def partner_head(model, tok) -> tuple[int, int, float]:
    """(layer, head, mean weight) of the head that looks most from each bracket to its partner, on held-out
    balanced strings: the encoder chapter's measure."""
    x_test, y_test = recipes.bracket_classifier_data()[3:]
    total, count = None, 0
    for ids in x_test[y_test == 1][:200]:
        ids = ids[ids != tok.pad_id][None]  # (1, S) with <bos> first
        with torch.no_grad():
            _, weights = with_attention(model)(ids)  # (L, h, S, S)
        text = tok.decode(ids[0])
        stack, pairs = [], []
        for i, c in enumerate(text, start=1):  # +1: position 0 is <bos>
            if c in "([":
                stack.append(i)
            else:
                j = stack.pop()
                pairs += [(i, j), (j, i)]
        rows, cols = zip(*pairs)
        mass = weights[:, :, list(rows), list(cols)].sum(-1)  # (L, h)
        total = mass if total is None else total + mass
        count += len(pairs)
    mean = total / count  # (L, h)
    layer, head = divmod(int(mean.argmax()), mean.shape[1])
    return layer, head, float(mean[layer, head])


def build(models: Path) -> tuple[dict, dict, dict | None]:
    """The bracket classifier's meta, its P(balanced) on BRACKETS, and the shipped int8 file's own P (None: fp32)."""
    model, _ = tl.load_checkpoint("bracket_classifier")
    tok = recipes.bracket_classifier_data()[0]
    answers = {}
    for text in BRACKETS:
        ids = torch.tensor([tok.encode(text, bos=True)])  # (1, 1 + S)
        with torch.no_grad():
            answers[text] = float(model(ids).softmax(-1)[0, 1])  # P(balanced)
    path = models / "bracket_classifier.onnx"
    gap = export_checked(model, path, (ids,))
    x_test = recipes.bracket_classifier_data()[3]
    texts = BRACKETS + [tok.decode(row[row != tok.pad_id]) for row in x_test]  # and every held-out string
    with torch.no_grad():
        probs = [float(model(torch.tensor([tok.encode(t, bos=True)])).softmax(-1)[0, 1]) for t in texts]

    def onnx_probability(session: ort.InferenceSession, text: str) -> float:
        logits = session.run(None, {"tokens": np.array([tok.encode(text, bos=True)])})[0][0]  # (2,)
        return float(torch.tensor(logits).softmax(-1)[1])

    def verdict(p: float, text: str) -> tuple:  # the page's verdict, and P at two decimals where the prose quotes it
        return (p > 0.5, round(p, 2) if text in QUOTED else None)

    path, int8 = try_int8(
        path,
        "the verdict (P > 0.5) identical; P at two decimals too for the four strings the page quotes",
        texts,
        [verdict(p, t) for p, t in zip(probs, texts)],
        lambda session, t: verdict(onnx_probability(session, t), t),
    )
    onnx_answers = None
    if int8["shipped"] == "int8":
        session = ort.InferenceSession(str(path))
        with torch.no_grad():
            expected = with_attention(model)(ids)
        gap = check_session(path.stem, session, (ids,), expected, None)
        shipped = [onnx_probability(session, t) for t in texts]
        int8["max_probability_change"] = max(abs(a - b) for a, b in zip(shipped, probs))
        onnx_answers = {t: onnx_probability(session, t) for t in BRACKETS}  # what the page must show
    layer, head, weight = partner_head(model, tok)
    cfg = model.config
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "partner": {"layer": layer, "head": head, "mean_weight": weight},
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers, onnx_answers
