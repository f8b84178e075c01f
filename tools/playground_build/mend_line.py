"""The mend-the-line page (book/playground/mend_line.md): chapter 18's BART, models/plays_bart.onnx.

The reader types a line with one gap, written `___` or `[MASK]`, that may hide any number of words. The page splits
the line into words as fill_blank does (PlayWords' pattern from meta.json; a word outside the vocabulary is [UNK]),
puts ONE [MASK] where the gap is and [SEP] after the line (gap_ids: bart.gap_source's layout), and BART writes the
line back by beam search. The page's search is transformer_lib.decoding's (beam_candidates): every hypothesis still
growing is extended by one token, the BEAM best extensions of all of them are kept, one that writes [SEP] is finished,
and the search stops when BEAM are finished or none is left growing; finished ones are ranked by log-probability
per written token. The ONNX file has batch 1 and no cache, so the page runs each hypothesis alone, the whole model
again at each step (search_onnx is that loop in Python).

The build records PyTorch's candidates on LINES: the page's default line (defaults.json), lines of the plays it was
trained on and of Twelfth Night, which it never saw, a gap written [MASK], one with a word outside the vocabulary, a
gap at the start and at the end, and one of the most words the page takes. For each: the tokens the model reads and
every finished hypothesis, best first (ids, log-probability, rank, and the fill read between the untouched ends as
bart.read_fill reads it), at the beam widths the page offers. A line is refused when two of the candidates that a
step compares sit within MARGIN of each other (a near tie onnxruntime's rounding could turn). The int8 file would ship
when its candidates are PyTorch's on all AGREEMENT lines; its own log-probabilities would then be the page's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import bart, recipes
from transformer_lib.export import with_attention
from transformer_lib.pretraining import CLS, MASK, SEP, SPECIALS

from .common import AGREEMENT, check_session, export_checked, page_defaults, try_int8
from .fill_blank import BLANK, js_word_pattern

PAGE = page_defaults("mend_line")  # the form's starting values: {"mend-text": "...", "mend-beam": "4"}
BEAMS = (1, 2, 4, 8)  # the widths the page offers; 1 is greedy decoding
MOST = recipes.BART_LINE - 1  # words and marks besides the gap: the model learned lines of 24 tokens
MAX_NEW = recipes.BART_LINE + 4  # new tokens at most, as bart_scores writes: the line and [SEP], with room
LENGTH_PENALTY = 1.0  # finished hypotheses ranked by log-probability per written token
ANCHOR = 2  # the fill ends where the first two words after the gap come back (bart.read_fill)
MARGIN = 1e-4  # the smallest gap allowed between the log-probabilities a recorded search compares
LINES = {  # the lines whose candidates are recorded
    "default": PAGE["mend-text"],
    "romeo": "O Romeo, Romeo! wherefore art thou Romeo? Deny thy father and ___ thy name;",  # a training play
    "rome": "Friends, Romans, countrymen, lend me your ears; I come to bury ___, not to praise him.",
    "hand": "I pray you, sir, [MASK] me your hand, and let us go together to the king.",  # the other way to write it
    "unknown": "Give me some coffee, ___ good lord, and let me sleep.",  # "coffee" is not in the vocabulary
    "start": "___ the king hath sent for you, my lord.",  # the gap first
    "end": "Come, let us go in; the night is cold, and ___",  # the gap last
    "longest": (  # Twelfth Night: 23 words and marks besides the gap, the most the page takes
        "Enough; no more: 'Tis not so sweet now as it was. O spirit of ___, how quick art thou!"
    ),
}


def gap_ids(vocab, text: str) -> tuple[list[int], list[int], list[int]]:
    """A line with one gap -> (the source the page feeds: the words before the gap, [MASK], the words after, [SEP];
    the words before; the words after). Fails on another number of gaps or more than MOST words and marks."""
    pieces = BLANK.split(text)
    if len(pieces) != 2:
        raise ValueError(f"the line must have one gap (___ or [MASK]), got {len(pieces) - 1}: {text!r}")
    before, after = (vocab.encode(piece) for piece in pieces)
    if len(before) + len(after) > MOST:
        raise ValueError(f"{len(before) + len(after)} words and marks besides the gap, more than MOST = {MOST}")
    return [*before, MASK, *after, SEP], before, after


def search_onnx(session: ort.InferenceSession, src: list[int], beam: int) -> list[tuple[list[int], float, float]]:
    """The page's beam search in onnxruntime: src ids -> every finished hypothesis, best first, as
    decoding.beam_candidates gives them ((ids, log-probability, rank)); one hypothesis per call, batch 1."""
    source = np.array([src])
    alive: list[tuple[list[int], float]] = [([CLS], 0.0)]
    finished: list[tuple[float, list[int], float]] = []
    for _ in range(MAX_NEW):
        extensions = []
        for ids, logp in alive:
            logits = session.run(None, {"src": source, "tgt": np.array([ids])})[0][0, -1].astype(np.float64)  # (V,)
            shifted = logits - logits.max()
            extensions.append(shifted - np.log(np.exp(shifted).sum()) + logp)  # log-softmax, plus the history
        flat = np.concatenate(extensions)  # (n * V,)
        V = extensions[0].size
        order = np.argsort(-flat, kind="stable")[: min(beam, flat.size)]  # the best first; ties: the lower index
        grown = []
        for index in order.tolist():
            ids, logp = alive[index // V][0] + [index % V], float(flat[index])
            if index % V == SEP:
                finished.append((logp / (len(ids) - 1) ** LENGTH_PENALTY, ids, logp))
            else:
                grown.append((ids, logp))
        if not grown or len(finished) >= beam:
            alive = []
            break
        alive = grown
    if not finished:  # after MAX_NEW, nothing finished: rank what is still growing
        finished = [(logp / (len(ids) - 1) ** LENGTH_PENALTY, ids, logp) for ids, logp in alive]
    ranked = sorted(range(len(finished)), key=lambda i: -finished[i][0])
    return [(finished[i][1], finished[i][2], finished[i][0]) for i in ranked]


def _candidates(model, vocab, text: str, beam: int) -> dict:
    """PyTorch's candidates for `text` at width `beam`, and what the page shows of each."""
    src, before, after = gap_ids(vocab, text)
    found = tl.beam_candidates(model, torch.tensor([src]), CLS, SEP, MAX_NEW, beam, LENGTH_PENALTY)
    shown = []
    for ids, logp, rank in found:
        line = ids[1:-1] if ids[-1] == SEP else ids[1:]  # what it wrote, without [CLS] and [SEP]
        fill = bart.read_fill(line, before + after, len(before), 0, anchor=ANCHOR)
        shown.append({
            "ids": ids,
            "logp": logp,
            "rank": rank,
            "written": [vocab.itos[i] for i in line],
            "fill": None if fill is None else [vocab.itos[i] for i in fill],
        })  # fmt: skip
    return {"beam": beam, "candidates": shown}


def _check_margins(model, vocab) -> float:
    """The smallest near-tie margin over LINES at every width; fails below MARGIN."""
    smallest = float("inf")
    for key, text in LINES.items():
        src = torch.tensor([gap_ids(vocab, text)[0]])
        for beam in BEAMS:
            gap = _search_margin(model, src, beam)
            if gap < MARGIN:
                raise SystemExit(f"LINES[{key!r}] at beam {beam}: a near tie in the search ({gap:.1e} < {MARGIN})")
            smallest = min(smallest, gap)
    return smallest


def _search_margin(model, src: torch.Tensor, beam: int) -> float:
    """Run decoding's search step by step on one source, in float64 log-probabilities, and return the smallest gap
    between the BEAM + 1 best extensions at any step: the choices a near tie could flip."""
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        alive, finished, smallest = [([CLS], 0.0)], 0, float("inf")
        for _ in range(MAX_NEW):
            rows = []
            for ids, logp in alive:
                tgt = torch.tensor([ids])
                logits = model.decode(tgt, memory, src_mask, tl.causal_mask(len(ids)))[0, -1]  # (V,)
                rows.append(logits.double().log_softmax(-1) + logp)
            flat = torch.cat(rows)  # (n * V,)
            V = rows[0].numel()
            top = flat.topk(min(beam + 1, flat.numel()))
            values = top.values
            if len(values) > 1:
                smallest = min(smallest, float((values[:-1] - values[1:]).min()))
            grown = []
            for value, index in zip(values[:beam].tolist(), top.indices[:beam].tolist()):
                if index % V == SEP:
                    finished += 1
                else:
                    grown.append((alive[index // V][0] + [index % V], value))
            if not grown or finished >= beam:
                break
            alive = grown
    return smallest


def _agreement_lines(vocab, count: int) -> list[list[int]]:
    """`count` more sources for the int8 trial: Twelfth Night's lines of 24 tokens, evenly spaced through the held-out
    ones, each with 1 to 3 tokens from token 10 behind one [MASK] (bart.gap_source)."""
    lines = recipes.plays_lines("validation")  # (N, 24)
    rows = np.linspace(0, len(lines) - 1, count).astype(int)
    return [bart.gap_source(lines[r], 10, 1 + k % 3, mask_id=MASK, eos_id=SEP).tolist() for k, r in enumerate(rows)]


def build(models: Path) -> tuple[dict, dict]:
    """The mend-the-line page: chapter 18's BART as ONNX, and PyTorch's candidates on LINES."""
    model, _ = tl.load_checkpoint("plays_bart")
    model.eval()
    vocab = recipes.plays_words()
    if vocab.vocab_size != model.config.vocab_size or vocab.itos[: len(SPECIALS)] != list(SPECIALS):
        raise SystemExit(f"plays_words() ({vocab.vocab_size} ids) is not the vocabulary of plays_bart")
    if int(PAGE["mend-beam"]) not in BEAMS:
        raise SystemExit(f"the page's default beam {PAGE['mend-beam']} is not one of BEAMS = {BEAMS}")
    margin = _check_margins(model, vocab)
    answers = {}
    for key, text in LINES.items():
        src, before, after = gap_ids(vocab, text)
        typed = [w for piece in BLANK.split(text) for w in vocab.split(piece)]
        answers[key] = {
            "text": text,
            "tokens": [vocab.itos[i] for i in src],
            "unknown": list(dict.fromkeys(w for w in typed if w not in vocab.stoi)),
            "searches": {str(beam): _candidates(model, vocab, text, beam) for beam in BEAMS},
        }
    if len(answers["longest"]["tokens"]) != MOST + 2:
        raise SystemExit(f"LINES['longest'] must hold MOST = {MOST} words and marks besides the gap")
    path = models / "plays_bart.onnx"
    src = torch.tensor([gap_ids(vocab, LINES["default"])[0]])
    tgt = torch.tensor([[CLS, *src[0, :5].tolist()]])
    gap = export_checked(model, path, (src, tgt))
    session = ort.InferenceSession(str(path))
    for text in LINES.values():  # the whole search, as the page runs it, against PyTorch's
        ids = gap_ids(vocab, text)[0]
        for beam in BEAMS:
            ours = search_onnx(session, ids, beam)
            theirs = tl.beam_candidates(model, torch.tensor([ids]), CLS, SEP, MAX_NEW, beam, LENGTH_PENALTY)
            if [c[0] for c in ours] != [c[0] for c in theirs]:
                raise SystemExit(f"the page's search in onnxruntime differs from PyTorch's on {text!r}, beam {beam}")
            gap = max(gap, max(abs(a[1] - b[1]) for a, b in zip(ours, theirs)))
        with torch.no_grad():
            written = tl.beam_candidates(model, torch.tensor([ids]), CLS, SEP, MAX_NEW, 1)[0][0]
            tokens = (torch.tensor([ids]), torch.tensor([written[:-1]]))
            expected = with_attention(model)(*tokens)
        gap = max(gap, check_session(f"{path.stem} on {len(ids)} source tokens", session, tokens, expected))
    sources = [gap_ids(vocab, t)[0] for t in LINES.values()]
    sources += _agreement_lines(vocab, AGREEMENT - len(sources))
    beam = int(PAGE["mend-beam"])
    reference = [
        [c[0] for c in tl.beam_candidates(model, torch.tensor([s]), CLS, SEP, MAX_NEW, beam, LENGTH_PENALTY)]
        for s in sources
    ]
    path, int8 = try_int8(
        path,
        f"every candidate of a beam of {beam} identical, in order",
        sources,
        reference,
        lambda session, s: [c[0] for c in search_onnx(session, s, beam)],
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 BART would need its own log-probabilities in expected.json (the test holds them)")
    meta = {
        "itos": vocab.itos,
        "specials": {name.strip("[]").lower(): i for i, name in enumerate(SPECIALS)} | {"count": len(SPECIALS)},
        "word_pattern": js_word_pattern(),  # RegExp(word_pattern, "gu") splits as PlayWords.split
        "blank_pattern": BLANK.pattern,  # RegExp(blank_pattern, "giu") finds the gap
        "most": MOST,
        "max_new_tokens": MAX_NEW,
        "beams": list(BEAMS),
        "length_penalty": LENGTH_PENALTY,
        "anchor": ANCHOR,
        "margin": margin,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers
