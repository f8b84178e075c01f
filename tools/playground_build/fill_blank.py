"""The fill-in-the-blank page (book/playground/fill_blank.md): chapter 15's BERT, models/plays_bert.onnx.

The reader types a line with one blank, written `___` (three underscores or more) or `[MASK]`. The page splits the
line into words as transformer_lib.pretraining.PlayWords does (lowercased, the same pattern; a word outside the
vocabulary is [UNK]), puts [MASK] in the blank and [CLS] ... [SEP] around it (blank_ids), and shows the model's
TOP likeliest words at the blank and the attention from the blank. The patterns come from here: meta.json holds the
word pattern of PlayWords, written for JavaScript (js_word_pattern), and the blank's pattern (BLANK), which the page
compiles, so that the two splits cannot drift apart.

The build records PyTorch's answers on LINES: the page's default line (defaults.json), lines from the training
plays and from Twelfth Night, which the model never saw, one written with [MASK], one with a word outside the
vocabulary, one whose splitting tries the pattern's corners (capitals, apostrophes, marks outside the vocabulary,
other spaces) and one of the most words and marks the model reads (62). For each: the tokens the model reads, the
TOP words at the blank with their probabilities, and every layer's and head's attention from the blank. The int8
file would ship when the TOP words at the blank are PyTorch's, in order, on all AGREEMENT lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import pretraining, recipes
from transformer_lib.export import with_attention
from transformer_lib.pretraining import CLS, MASK, SEP, SPECIALS

from .common import AGREEMENT, check_session, export_checked, page_defaults, try_int8

PAGE = page_defaults("fill_blank")  # the form's starting value: {"fill-text": "If music be the food of ___, ..."}
BLANK = re.compile(r"_{3,}|\[mask\]", re.IGNORECASE)  # a blank: three underscores or more, or [MASK] in any case
TOP = 5  # the page shows the model's five likeliest words at the blank
LINES = {  # the lines whose answers are recorded; a line of a play is as tl.corpus has it, one word made the blank
    "default": PAGE["fill-text"],  # Twelfth Night's first line: held out, the model never read it
    "semicolon": PAGE["fill-text"].removesuffix(",") + ";",  # the page's prose: one mark changes the order
    "hamlet": "The lady protests too ___, methinks.",  # a training play; "protests" is not in the vocabulary
    "romeo": "O Romeo, Romeo! wherefore art thou ___?",  # a training play
    "mask": "I will not be thy [MASK].",  # the other way to write the blank
    "unknown": "Give me some coffee, my good ___.",  # not the plays': "coffee" is not in the vocabulary
    # the pattern's corners: capitals, apostrophes, marks outside the vocabulary, an astral character, a tab and three
    # spaces of other kinds, two of which JavaScript's \s and Python's disagree on: U+0085 (a space) and U+FEFF (not)
    "split": "O, it CAME o'er my ___ like the sweet-sound\u00a0of\tmusic\x85—\u2003'tis\ufeffo'er…\U0001f3b5",
    "longest": (  # Twelfth Night, seven lines of the first speech: 62 words and marks, the blank included
        "Stealing and giving odour.--Enough; no more; 'Tis not so sweet now as it was before. O spirit of ___, how "
        "quick and fresh art thou! That, notwithstanding thy capacity Receiveth as the sea, nought enters there, Of "
        "what validity and pitch soever, But falls into abatement and low price"
    ),
}


def blank_ids(vocab: pretraining.PlayWords, text: str) -> list[int]:
    """A line with one blank -> the ids the page feeds: [CLS], the words before the blank, [MASK], the words after,
    [SEP]. Each side is split by vocab.encode (an unknown word is [UNK]). Fails on another number of blanks or a line
    longer than the model's BERT_WINDOW positions: the page refuses those lines with a message."""
    pieces = BLANK.split(text)
    if len(pieces) != 2:
        raise ValueError(f"the line must have one blank (___ or [MASK]), got {len(pieces) - 1}: {text!r}")
    before, after = (vocab.encode(piece) for piece in pieces)
    ids = [CLS, *before, MASK, *after, SEP]
    if len(ids) > recipes.BERT_WINDOW:
        raise ValueError(f"{len(ids)} tokens with [CLS] and [SEP], more than BERT_WINDOW = {recipes.BERT_WINDOW}")
    return ids


def js_word_pattern() -> str:
    """PlayWords' pattern, written for JavaScript's RegExp with the u flag: Python's \\s is every character that
    str.isspace() accepts, which JavaScript's \\s is not quite (it lacks \\x1c-\\x1f and \\x85 and adds \\ufeff), so
    \\s becomes the explicit list. Fails on any other escape, which would need the same care."""
    pattern = pretraining.PlayWords.pattern  # the one pattern PlayWords.split uses
    if "\\" in pattern.replace("\\s", ""):
        raise SystemExit(f"PlayWords' pattern {pattern!r} has an escape other than \\s: translate it in fill_blank.py")
    spaces, start = [], None
    for c in range(sys.maxunicode + 2):  # runs of whitespace code points, as \u{a}-\u{d}
        space = c <= sys.maxunicode and chr(c).isspace()
        if space and start is None:
            start = c
        elif not space and start is not None:
            spaces.append(f"\\u{{{start:x}}}" + (f"-\\u{{{c - 1:x}}}" if c - 1 > start else ""))
            start = None
    return pattern.replace("\\s", "".join(spaces))


def _answers(model, vocab: pretraining.PlayWords, text: str) -> dict:
    """PyTorch's answers for the page on `text`: the tokens the model reads, the words outside the vocabulary, the
    TOP likeliest tokens at the blank with their probabilities, and every layer's and head's attention from the blank
    (L, h, S). Fails when the top words sit on a near tie: the logits of ranks 1 to TOP + 1 must be 1e-3 apart."""
    ids = blank_ids(vocab, text)
    with torch.no_grad():
        logits, attention = with_attention(model)(torch.tensor([ids]))  # (1, S, V), (L, h, S, S)
    blank = ids.index(MASK)
    row = logits[0, blank]  # (V,)
    top = row.topk(TOP + 1).values
    margin = float((top[:-1] - top[1:]).min())
    if margin < 1e-3:
        raise SystemExit(f"the logits at the blank of {text!r} have a near tie in their top {TOP} ({margin:.1e})")
    p, words = row.double().softmax(-1).topk(TOP)  # as the page computes them from the same logits
    typed = [w for piece in BLANK.split(text) for w in vocab.split(piece)]
    return {
        "text": text,
        "tokens": [vocab.itos[i] for i in ids],  # (S,): [CLS] ... [MASK] ... [SEP]
        "unknown": list(dict.fromkeys(w for w in typed if w not in vocab.stoi)),  # in order, each once
        "blank": blank,
        "margin": margin,
        "top": [vocab.itos[i] for i in words.tolist()],
        "probs": p.tolist(),
        "attention": attention[:, :, blank].tolist(),  # (L, h, S): from the blank to every token
    }


def _agreement_lines(vocab: pretraining.PlayWords, count: int) -> list[list[int]]:
    """`count` more inputs for the int8 trial: pieces of Twelfth Night of 4 to 62 words and marks, evenly spaced
    through the play, each with the word at its middle made the blank."""
    stream = vocab.encode(tl.corpus.shakespeare("validation"))
    lengths = [4 + (k * 23) % 59 for k in range(count)]  # 4 .. 62
    starts = np.linspace(0, len(stream) - 63, count).astype(int)
    lines = []
    for start, length in zip(starts, lengths):
        words = stream[start : start + length]
        words[length // 2] = MASK
        lines.append([CLS, *words, SEP])
    return lines


def _top(logits: np.ndarray, ids: list[int]) -> list[int]:
    """logits (1, S, V) -> the TOP likeliest ids at the blank, likeliest first."""
    return np.argsort(-logits[0, ids.index(MASK)], kind="stable")[:TOP].tolist()


def build(models: Path) -> tuple[dict, dict]:
    """The fill-in-the-blank page: chapter 15's BERT as ONNX, and PyTorch's answers on LINES."""
    model, _ = tl.load_checkpoint("plays_bert")
    model.eval()
    vocab = recipes.plays_words()
    if vocab.vocab_size != model.config.vocab_size or vocab.itos[: len(SPECIALS)] != list(SPECIALS):
        raise SystemExit(f"plays_words() ({vocab.vocab_size} ids) is not the vocabulary of plays_bert")
    answers = {key: _answers(model, vocab, text) for key, text in LINES.items()}
    if len(answers["longest"]["tokens"]) != recipes.BERT_WINDOW:
        raise SystemExit(f"LINES['longest'] must fill all {recipes.BERT_WINDOW} positions")
    path = models / "plays_bert.onnx"
    gap = export_checked(model, path, (torch.tensor([blank_ids(vocab, LINES["default"])]),))
    session = ort.InferenceSession(str(path))
    for ids in ([CLS, MASK, SEP], *(blank_ids(vocab, t) for t in LINES.values())):  # 3 to 64 tokens
        tokens = torch.tensor([ids])  # (1, S)
        with torch.no_grad():
            expected = with_attention(model)(tokens)  # logits (1, S, V), attention (L, h, S, S)
        gap = max(gap, check_session(f"{path.stem} on {len(ids)} tokens", session, (tokens,), expected))
    lines = [blank_ids(vocab, t) for t in LINES.values()]
    lines += _agreement_lines(vocab, AGREEMENT - len(lines))
    with torch.no_grad():
        reference = [_top(model(torch.tensor([ids])).numpy(), ids) for ids in lines]
    path, int8 = try_int8(
        path,
        f"the top {TOP} words at the blank identical, in order",
        lines,
        reference,
        lambda session, ids: _top(session.run(None, {"tokens": np.array([ids])})[0], ids),
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 BERT would need its own probabilities in expected.json (the test holds them to 5e-5)")
    cfg = model.config
    meta = {
        "itos": vocab.itos,
        "specials": {name.strip("[]").lower(): i for i, name in enumerate(SPECIALS)} | {"count": len(SPECIALS)},
        "word_pattern": js_word_pattern(),  # RegExp(word_pattern, "gu") splits as PlayWords.split
        "blank_pattern": BLANK.pattern,  # RegExp(blank_pattern, "giu") finds the blanks
        "max_len": recipes.BERT_WINDOW,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "top": TOP,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers
