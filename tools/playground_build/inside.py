"""The inside page (book/playground/inside.md, "Inside the language model"): the Shakespeare character model's
logit lens with every layer's attention, models/shakespeare_char_lens.onnx.

The build records PyTorch's answers on the page's default text (VERSE) and on the repeated random string that the
page's button draws for its default seed (RANDOM; both from defaults.json): the logit lens's top three next
characters per layer and position with their probabilities, and every head's induction score. The random string
is drawn here with the pages' own generator (mulberry32), number for number. The int8 file would ship when the
lens's top three are PyTorch's, in order, at every layer and position of all AGREEMENT texts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import export_lens, lens_model

from .common import AGREEMENT, check_session, corpus_texts, mulberry32, page_defaults, specials, try_int8

PAGE = page_defaults("inside")  # the form's starting values: {"inside-text": "To be, ...", "inside-seed": 0}
VERSE = PAGE["inside-text"]  # the page's default text
RANDOM = {
    "seed": PAGE["inside-seed"],
    "block": 24,
}  # "Repeated random string": 24 characters drawn with the seed, twice
LENS_TOP = 3  # the inside page shows the lens's three likeliest next characters


def repeated_random(tok, seed: int, block: int) -> str:
    """`block` characters of the vocabulary (no special token) drawn with mulberry32(seed), shown twice: the page's
    button does the same, so a seed gives the same string here and there."""
    chars = tok.itos[specials(tok)["count"] :]
    draw = mulberry32(seed)
    text = "".join(chars[int(next(draw) * len(chars))] for _ in range(block))
    return text + text


def _lens_answers(model, tok, text: str) -> dict:
    """PyTorch's answers for the inside page on `text`: per layer and position the logit lens's LENS_TOP likeliest
    next tokens with their probabilities, and every head's induction score (tl.inside), per layer. Fails when a
    top-three comparison sits on a near tie: the lens's logits of ranks 1 to 4 must be 1e-3 apart or more."""
    tokens = torch.tensor([tok.encode(text)])  # (1, T)
    logits, cache = tl.inside.run_with_cache(model, tokens)
    lens = tl.inside.logit_lens(model, cache)[:, 0]  # (L, T, V)
    top = lens.topk(LENS_TOP + 1, dim=-1).values  # (L, T, 4)
    margin = float((top[..., :-1] - top[..., 1:]).min())
    if margin < 1e-3:
        raise SystemExit(
            f"the logit lens on {text!r} has a near tie in its top {LENS_TOP} ({margin:.1e}); pick another"
        )
    probs = lens.double().softmax(-1)  # (L, T, V), as the page computes them from the same logits
    p, ids = probs.topk(LENS_TOP, dim=-1)  # (L, T, 3) each
    layers = len(model.decoder.layers)
    patterns = [cache[f"decoder.layers.{i}.self_attn.pattern"] for i in range(layers)]  # (1, h, T, T) each
    return {
        "text": text,
        "margin": margin,
        "top": [[[tok.itos[i] for i in row] for row in layer] for layer in ids.tolist()],  # (L, T, 3) tokens
        "probs": p.tolist(),  # (L, T, 3)
        "induction": [tl.inside.induction_scores(pattern, tokens).tolist() for pattern in patterns],  # (L, h)
    }


def _top(lens: np.ndarray) -> list:
    """The logit lens (L, T, V) -> the LENS_TOP likeliest ids at each layer and position, likeliest first."""
    return np.argsort(-lens, axis=-1, kind="stable")[..., :LENS_TOP].tolist()  # (L, T, 3)


def build(models: Path) -> tuple[dict, dict]:
    """The inside page: the Shakespeare character model's logit lens and attention, as ONNX, and PyTorch's answers on
    a line of verse and on a repeated random string."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    random_text = repeated_random(tok, RANDOM["seed"], RANDOM["block"])
    answers = {
        "verse": _lens_answers(model, tok, VERSE),
        "random": {**RANDOM, **_lens_answers(model, tok, random_text)},
    }
    path = export_lens(model, models / "shakespeare_char_lens.onnx")
    session = ort.InferenceSession(str(path))
    gap = 0.0
    for text in (VERSE, random_text, "T", repeated_random(tok, 1, cfg.max_len // 2)):
        tokens = torch.tensor([tok.encode(text)])  # (1, T): the answers' texts, one character, all of max_len
        with torch.no_grad():
            expected = lens_model(model)(tokens)  # lens (L, T, V), attention (L, h, T, T)
        gap = max(gap, check_session(f"{path.stem} on {len(text)} characters", session, (tokens,), expected))
    texts = [tok.encode(VERSE), tok.encode(random_text), *corpus_texts(val, AGREEMENT - 2, 64)]  # (T,) ids each
    with torch.no_grad():
        reference = [_top(lens_model(model)(torch.tensor([ids]))[0].numpy()) for ids in texts]
    path, int8 = try_int8(
        path,
        f"the lens's top {LENS_TOP} identical, in order, at every layer and position",
        texts,
        reference,
        lambda session, ids: _top(session.run(None, {"tokens": np.array([ids])})[0]),
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 lens would need its own probabilities in expected.json (the test holds them to 5e-5)")
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "top": LENS_TOP,
        "random_block": RANDOM["block"],
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers
