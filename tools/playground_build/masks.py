"""The masks page (book/playground/masks.md): the Shakespeare character model's first attention layer, with the
mask as an input, models/shakespeare_char_layer1.onnx.

The build records PyTorch's masked weights, every head's, on the page's default text, padding and masks (MASKS,
from defaults.json), which the browser test reads back from the page as it opens. The int8 file would ship when
every head's weights are PyTorch's at two decimals, as the page's table prints them, on all AGREEMENT probes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import export_first_attention, first_attention

from .common import AGREEMENT, check_session, corpus_texts, page_defaults, specials, try_int8

PAGE = page_defaults("masks")  # the form's starting values: {"masks-text": "to be", "masks-pad": 2, ...}
MASKS = {
    "text": PAGE["masks-text"],
    "pad": PAGE["masks-pad"],
    "side": PAGE["masks-side"],
    "padding_mask": PAGE["masks-padding"],
    "causal": PAGE["masks-causal"],
}


def build(models: Path) -> tuple[dict, dict]:
    """Write the first layer's probe into `models`; -> (meta, MASKS with PyTorch's weights (h, T, T))."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    ids = tok.encode(MASKS["text"])
    ids = [tok.pad_id] * MASKS["pad"] + ids if MASKS["side"] == "left" else ids + [tok.pad_id] * MASKS["pad"]
    tokens = torch.tensor([ids])  # (1, T)
    T = tokens.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool)
    if MASKS["padding_mask"]:
        mask &= tl.padding_mask(tokens, tok.pad_id)[0, 0]  # (1, T): no query looks at a <pad> key
    if MASKS["causal"]:
        mask &= tl.causal_mask(T)
    path = export_first_attention(model, models / "shakespeare_char_layer1.onnx")
    with torch.no_grad():
        weights = first_attention(model)(tokens, mask)  # (h, T, T)
    gap = check_session(path.stem, ort.InferenceSession(str(path)), (tokens, mask), (weights,))
    probes = [(tokens, mask)]  # the browser test's input, then pieces of verse with the causal mask
    probes += [(torch.tensor([ids]), tl.causal_mask(len(ids))) for ids in corpus_texts(val, AGREEMENT - 1, 16)]
    with torch.no_grad():
        reference = [np.round(first_attention(model)(*probe).numpy(), 2).tolist() for probe in probes]

    def weights_onnx(session: ort.InferenceSession, probe: tuple[torch.Tensor, torch.Tensor]) -> list:
        feeds = {"tokens": probe[0].numpy(), "mask": probe[1].numpy()}
        return np.round(session.run(None, feeds)[0], 2).tolist()  # (h, T, T), as the table prints them

    rule = "every head's weights identical at two decimals, as the page's table prints them"
    path, int8 = try_int8(path, rule, probes, reference, weights_onnx)
    if int8["shipped"] == "int8":
        raise SystemExit(
            "an int8 masks probe would need its own weights in expected.json (the test holds them to 1e-5)"
        )
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "heads": cfg.num_heads,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, {**MASKS, "weights": weights.tolist()}
