"""The draw-a-digit page (book/playground/draw_digit.md): chapter 16's Vision Transformer, models/digits_vit.onnx.

The reader draws on a canvas of CANVAS x CANVAS pixels, each on or off, or sets the cells of the 8 x 8 grid that the
model reads with the keyboard. The page counts the inked pixels of each BLOCK x BLOCK block, 0 to LEVELS, and feeds
count / LEVELS: how scikit-learn's digits were made (32 x 32 bitmaps, 4 x 4 blocks, 0..16) and what
transformer_lib.vit.digits_data gives the model (0..16 divided by 16). So a drawing's counts are the model's input
exactly, in float32, in the page and here.

The build records PyTorch's answers on CASES, each an 8 x 8 grid of counts: the first held-out digit of each class
(EXAMPLES, which meta.json gives the page for its "Load the example" button; defaults.json names the one it opens
with), the first held-out digit the model gets wrong, a digit drawn with whole and half cells as the keyboard draws
it, a single full cell, the full grid, and the empty grid. The page refuses the empty grid with a message and never
runs the model on it; its answer is recorded all the same, for the page's prose: a classifier names a digit even
for nothing. For each case: its probabilities and the class token's attention in every layer and head.

The int8 file would ship when, on the cases and on all 597 held-out digits (vit.DIGITS_TEST), it gives the same
likeliest digit and the same ten probabilities at two decimals as PyTorch: the page shows them, and its prose
quotes them. Where it does not, the fp32 file ships (meta.json's "int8" records how many agree).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import vit
from transformer_lib.export import with_attention

from .common import check_session, export_checked, page_defaults, try_int8

PAGE = page_defaults("draw_digit")  # the form's starting value: {"draw-example": "4"}, the example the page opens with
EXAMPLE = PAGE["draw-example"]
LEVELS = 16  # a cell's count of inked pixels: 0 to 16, as scikit-learn's digits
BLOCK = 4  # canvas pixels per cell, along each side
CANVAS = 8 * BLOCK  # the canvas the reader draws on: 32 x 32 pixels
MARGIN = 1e-3  # the two likeliest digits' logits must be this far apart on every case the page answers

# Drawn as the keyboard draws: F a full cell (16 of 16 pixels), h half a cell (8), . none
KEYBOARD_SEVEN = """
. . . . . . . .
. F F F F F . .
. . . . . F . .
. . . . h F . .
. . . . F . . .
. . . h F . . .
. . . F . . . .
. . . F . . . .
"""


def drawn(picture: str) -> list[list[int]]:
    """A grid written as text (F full, h half, . none; one row a line) -> its counts (8, 8)."""
    counts = {".": 0, "h": LEVELS // 2, "F": LEVELS}
    rows = [[counts[c] for c in line.split()] for line in picture.strip().splitlines()]
    if len(rows) != 8 or any(len(row) != 8 for row in rows):
        raise SystemExit(f"a drawn grid must be 8 x 8, got {[len(row) for row in rows]}")
    return rows


def counts_of(image: torch.Tensor) -> list[list[int]]:
    """One of digits_data's images (1, 8, 8), pixels k / 16 -> its counts k (8, 8); fails unless they are whole."""
    counts = image[0] * LEVELS
    if not torch.equal(counts, counts.round()):
        raise SystemExit("digits_data's pixels are not whole sixteenths: the page's counts would not be its input")
    return counts.round().int().tolist()


def image_of(counts: list[list[int]]) -> torch.Tensor:
    """Counts (8, 8) -> the model's input (1, 1, 8, 8) in float32, count / 16, as the page builds it."""
    return torch.tensor(counts, dtype=torch.float32)[None, None] / LEVELS


def _cases(model: vit.VisionTransformer) -> tuple[dict, dict]:
    """(EXAMPLES for meta.json, CASES for expected.json without the answers): name -> counts and what they are."""
    _, _, images, labels = vit.digits_data()  # the held-out digits, (597, 1, 8, 8) and (597,)
    with torch.no_grad():
        read = model(images).argmax(-1)  # (597,)
    examples = {}
    for digit in range(10):
        index = int((labels == digit).nonzero()[0, 0])  # the first held-out digit of its class
        examples[str(digit)] = {"pixels": counts_of(images[index]), "label": digit, "index": index}
    missed = int((read != labels).nonzero()[0, 0])  # the first held-out digit the model reads wrong
    examples["misread"] = {"pixels": counts_of(images[missed]), "label": int(labels[missed]), "index": missed}
    if EXAMPLE not in examples:
        raise SystemExit(f"defaults.json: draw-example is {EXAMPLE!r}, not one of the examples {list(examples)}")
    full = [[LEVELS] * 8 for _ in range(8)]
    dot = [[LEVELS if (r, c) == (3, 3) else 0 for c in range(8)] for r in range(8)]  # row 4, column 4
    cases = {name: {"pixels": e["pixels"], "label": e["label"], "refused": False} for name, e in examples.items()}
    cases["keyboard"] = {"pixels": drawn(KEYBOARD_SEVEN), "label": 7, "refused": False}
    cases["dot"] = {"pixels": dot, "label": None, "refused": False}
    cases["full"] = {"pixels": full, "label": None, "refused": False}
    cases["empty"] = {"pixels": [[0] * 8 for _ in range(8)], "label": None, "refused": True}  # the page refuses it
    return examples, cases


def _answers(model: vit.VisionTransformer, case: dict) -> dict:
    """PyTorch's answers for the page on one case: the ten probabilities (the softmax of the logits, in float64 as
    the page computes it), the likeliest digit, the margin between the two likeliest logits, and every layer's and
    head's attention from the class token over itself and the 16 patches (L, h, 17). Fails on a near tie."""
    with torch.no_grad():
        logits, attention = with_attention(model)(image_of(case["pixels"]))  # (1, 10), (L, h, 17, 17)
    top = logits[0].topk(2).values
    margin = float(top[0] - top[1])
    if not case["refused"] and margin < MARGIN:
        raise SystemExit(f"a case's two likeliest digits are a near tie ({margin:.1e}): {case['pixels']}")
    probs = logits[0].double().softmax(-1)
    return {
        **case,
        "digit": int(probs.argmax()),
        "probs": probs.tolist(),
        "margin": margin,
        "attention": attention[:, :, 0].tolist(),  # (L, h, 1 + N): the class token's row, itself first
    }


def _answer(session: ort.InferenceSession, image: np.ndarray) -> tuple:
    """What the int8 trial compares: the likeliest digit and the ten probabilities at two decimals."""
    (logits,) = session.run(["logits"], {"images": image})  # (1, 10)
    return _rounded(logits[0])


def _rounded(logits: np.ndarray) -> tuple:
    p = torch.from_numpy(np.asarray(logits, dtype=np.float64)).softmax(-1)
    return int(p.argmax()), tuple(round(float(x), 2) for x in p)


def build(models: Path) -> tuple[dict, dict]:
    """The draw-a-digit page: chapter 16's ViT as ONNX, the examples the page can load, and PyTorch's answers."""
    model, _ = tl.load_checkpoint("digits_vit")
    model.eval()
    if (model.image_size, model.patches.channels, model.cls_token is None) != (8, 1, False):
        raise SystemExit("digits_vit is not the 8 x 8, one-channel ViT with a class token that the page draws for")
    examples, cases = _cases(model)
    answers = {name: _answers(model, case) for name, case in cases.items()}
    path = models / "digits_vit.onnx"
    gap = export_checked(model, path, (image_of(cases[EXAMPLE]["pixels"]),))
    session = ort.InferenceSession(str(path))
    for name, case in cases.items():
        image = image_of(case["pixels"])
        with torch.no_grad():
            expected = with_attention(model)(image)  # logits (1, 10), attention (L, h, 17, 17)
        gap = max(gap, check_session(f"{path.stem} on {name}", session, (image,), expected))
    _, _, held_out, _ = vit.digits_data()
    inputs = [image_of(c["pixels"]).numpy() for c in cases.values()] + [x[None].numpy() for x in held_out]
    with torch.no_grad():
        reference = [_rounded(model(torch.from_numpy(x))[0].numpy()) for x in inputs]
    path, int8 = try_int8(
        path, "the likeliest digit and the ten probabilities the same at two decimals", inputs, reference, _answer
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 ViT would need its own numbers in expected.json (the tests hold them to 5e-5)")
    cfg = model.config
    meta = {
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "image_size": model.image_size,  # 8: the grid the model reads
        "patch_size": model.patch_size,  # 2: cells per patch, along each side
        "levels": LEVELS,  # a cell holds 0..16 inked pixels; the model reads count / 16
        "block": BLOCK,  # canvas pixels per cell, along each side
        "canvas": CANVAS,  # the canvas: 32 x 32 pixels
        "examples": examples,  # name -> {pixels (8, 8) counts, label, index among the held-out digits}
        "default": EXAMPLE,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers
