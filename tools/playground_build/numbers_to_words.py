"""The numbers page (book/playground/numbers.md): the numbers-to-words translator, models/numbers_to_words.onnx.

The encoder-decoder reads a number's five digits, zero-padded as the data is, and writes its words greedily. The
build records PyTorch's greedy words on NUMBERS, the page's default first (defaults.json), which the browser tests
type into the page. Its int8 file ships when its greedy words are PyTorch's on all AGREEMENT numbers: NUMBERS,
then seeded ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import with_attention

from .common import AGREEMENT, check_session, export_checked, page_defaults, specials, try_int8

PAGE = page_defaults("numbers")  # the form's starting values: {"numbers-input": "4021"}
# the page's default, then numbers of other shapes; the page zero-pads to 5 digits, as the data does
NUMBERS = list(dict.fromkeys([PAGE["numbers-input"], "57913", "0", "99999", "700", "12", "80008"]))
NUMBERS_MAX_NEW = 16  # the longest answers, such as 'seventy-seven thousand ...', are 7 word tokens and <eos>


def _words_onnx(session: ort.InferenceSession, src: np.ndarray, tgt_tok) -> str:
    """The numbers page's greedy decoding in onnxruntime: `src` (1, 5) digit ids -> the words, up to <eos>."""
    tgt = [tgt_tok.bos_id]
    for _ in range(NUMBERS_MAX_NEW):
        logits = session.run(None, {"src": src, "tgt": np.array([tgt])})[0]  # (1, T, V)
        tgt.append(int(logits[0, -1].argmax()))
        if tgt[-1] == tgt_tok.eos_id:
            break
    return tgt_tok.decode(torch.tensor(tgt))


def build(models: Path) -> tuple[dict, dict]:
    """Write the translator's ONNX file (int8 where it agrees) into `models`; -> (meta, PyTorch's words by number)."""
    model, _ = tl.load_checkpoint("numbers_to_words")
    src_tok, tgt_tok = recipes.numbers_to_words_data()[:2]
    answers = {}
    for number in NUMBERS:
        src = torch.tensor([src_tok.encode(number.zfill(5))])  # (1, 5)
        out = model.greedy_decode(src, tgt_tok.bos_id, tgt_tok.eos_id, NUMBERS_MAX_NEW)  # (1, 1 + n)
        answers[number] = tgt_tok.decode(out[0])
    path = models / "numbers_to_words.onnx"
    gap = export_checked(model, path, (src, out))
    drawn = np.random.default_rng(0).integers(0, 100_000, AGREEMENT - len(NUMBERS))
    numbers = NUMBERS + [str(n) for n in drawn]  # the browser tests' numbers, then seeded ones
    sources = [np.array([src_tok.encode(n.zfill(5))]) for n in numbers]  # (1, 5) each
    reference = [
        tgt_tok.decode(model.greedy_decode(torch.tensor(x), tgt_tok.bos_id, tgt_tok.eos_id, NUMBERS_MAX_NEW)[0])
        for x in sources
    ]
    path, int8 = try_int8(
        path, "the greedy words identical", sources, reference, lambda session, x: _words_onnx(session, x, tgt_tok)
    )
    if int8["shipped"] == "int8":
        with torch.no_grad():
            expected = with_attention(model)(src, out)
        gap = check_session(path.stem, ort.InferenceSession(str(path)), (src, out), expected, None)
    cfg = model.config
    meta = {
        "src_itos": src_tok.itos,
        "tgt_itos": tgt_tok.itos,
        "src_specials": specials(src_tok),
        "tgt_specials": specials(tgt_tok),
        "width": 5,
        "max_number": 99_999,
        "gap": gap,
        "max_new_tokens": NUMBERS_MAX_NEW,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers
