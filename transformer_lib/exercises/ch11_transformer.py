"""Checkers for the exercises of the encoder-decoder chapter."""

from __future__ import annotations

import functools

import torch

from .. import decoding, models
from ._common import CORRECT, _seeded, checker, no, run
from ._match import _shape, expect_tensor, number, spot

__all__ = ["check_shift", "check_greedy", "check_loss_positions", "check_memory_ablation"]


def _targets(seed: int, B: int, T: int, pad: int, bos: int, eos: int, vocab: int) -> torch.Tensor:
    """(B, T) targets <bos> words <eos> then padding, of random lengths; words avoid the special ids."""
    g = _seeded(seed)
    words = [w for w in range(vocab) if w not in (pad, bos, eos)]
    rows = []
    for b in range(B):
        n = int(torch.randint(1, T - 1, (1,), generator=g)) if b else T - 2  # the first row has no padding
        body = [words[int(i)] for i in torch.randint(0, len(words), (n,), generator=g)]
        rows.append([bos, *body, eos] + [pad] * (T - 2 - n))
    return torch.tensor(rows)


@checker
def check_shift(fn) -> str:
    """fn(tgt (B, T)) must return (decoder_input, labels) = (tgt[:, :-1], tgt[:, 1:])."""
    passed = False
    for seed, B, T, pad, bos, eos, vocab in [(0, 2, 7, 0, 1, 2, 12), (1, 3, 5, 3, 7, 4, 9), (2, 1, 11, 11, 0, 5, 15)]:
        tgt = _targets(seed, B, T, pad, bos, eos, vocab)
        case = f"targets of shape ({B}, {T})"
        result = run(fn, tgt.clone(), case=case)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return no("not-a-pair", f"Return a pair (decoder_input, labels); on {case} got {type(result).__name__}.")
        inp, lab = result
        for got, what in ((inp, "decoder input"), (lab, "labels")):
            if not isinstance(got, torch.Tensor):
                return no("not-a-tensor", f"The {what} should be a tensor; on {case} got {type(got).__name__}.")
        if torch.equal(inp, tgt[:, :-1]) and torch.equal(lab, tgt[:, 1:]):
            passed = True
            continue
        lengths = any(x.dim() > 1 and x.shape[1] != T - 1 for x in (inp, lab))  # not T - 1 positions
        fixed = f"On {case} both should have {T - 1} positions, got {tuple(inp.shape)} and {tuple(lab.shape)}"
        if torch.equal(inp, tgt[:, 1:]) and torch.equal(lab, tgt[:, :-1]):
            return no("swapped", "Swapped: the decoder reads <bos> first: input tgt[:, :-1], labels tgt[:, 1:].")
        if torch.equal(lab, tgt.roll(-1, 1)) or torch.equal(inp, tgt.roll(1, 1)):
            return no("roll", "torch.roll wraps around: slice instead, so that no token comes back at the other end.")
        if passed and lengths:  # right on an earlier input, so the lengths are typed in
            return no("fixed-length", f"{fixed}: slice with -1 and 1, not with fixed lengths.")
        if torch.equal(inp, tgt) and torch.equal(lab, tgt):
            return no("unshifted", "Nothing is shifted: the decoder input drops the last token, the labels the first.")
        if torch.equal(inp, tgt):
            return no("input-unshifted", "The decoder input is not shifted: drop the last token, tgt[:, :-1].")
        if torch.equal(lab, tgt):
            return no("labels-unshifted", "The labels are not shifted: drop the first token (<bos>), tgt[:, 1:].")
        if T > 3 and torch.equal(inp, tgt[:, :-2]) and torch.equal(lab, tgt[:, 2:]):
            return no("shifted-by-two", "Shifted by two: the labels are the next token, one place on.")
        if lengths:
            return no("fixed-length", f"{fixed}: slice with -1 and 1, not with fixed lengths.")
        return no("other", f"Not quite on {case}: decoder input tgt[:, :-1], labels tgt[:, 1:].")
    return CORRECT


@torch.no_grad()
def _usual_greedy(model, src, bos: int, eos: int, n: int) -> list[int]:
    """Greedy decoding with model.decode's default target mask (it hides a generated pad id): most answers' route."""
    src_mask = model.make_src_mask(src)  # (1, 1, 1, S)
    memory = model.encode(src, src_mask)  # (1, S, d_model)
    out = torch.tensor([[bos]], device=src.device)  # (1, 1)
    for _ in range(n):
        next_id = model.decode(out, memory, src_mask)[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        out = torch.cat([out, next_id], dim=1)  # (1, t + 1)
        if next_id.item() == eos:
            break
    return out[0].tolist()


@checker
def check_greedy(fn, model, src_tok, tgt_tok, numbers=("00008", "00305", "61718", "4721", "90017")) -> str:
    """fn(model, src (1, S), bos_id, eos_id, max_new_tokens) must match greedy decoding, written by hand."""
    device = next(model.parameters()).device
    model.eval()
    bos_id, eos_id = tgt_tok.bos_id, tgt_tok.eos_id
    encode = lambda digits: torch.tensor([src_tok.encode(digits)], device=device)  # (1, S)
    names = lambda ids: " ".join(tgt_tok.itos[i] if hasattr(tgt_tok, "itos") else str(i) for i in ids)
    greedy = lambda digits, *args, **kw: decoding.greedy_decode(model, encode(digits), *args, **kw)[0].tolist()
    runs = [(f"the number {digits}", digits, bos_id, eos_id, 60) for digits in numbers]  # (case, src, bos, eos, n)
    longest, plain = max(((digits, greedy(digits, bos_id, eos_id, 60)) for digits in numbers), key=lambda p: len(p[1]))
    if len(plain) > 3:  # stop at the second word: eos_id is an argument, not tgt_tok's <eos>
        runs.append((f"{longest} with eos_id={plain[2]} (the id of a word)", longest, bos_id, plain[2], 60))
    short = max(1, len(plain) - 3)  # fewer steps than this number needs
    runs.append((f"{longest} with max_new_tokens={short}", longest, bos_id, eos_id, short))
    other_bos = max(i for i in range(tgt_tok.vocab_size) if i not in (bos_id, eos_id, tgt_tok.pad_id))
    runs.append((f"{numbers[1]} with bos_id={other_bos}", numbers[1], other_bos, eos_id, 60))
    forbidden = (decoding.greedy_decode, models.Transformer.greedy_decode, decoding.beam_search)
    for case, digits, bos, eos, n in runs:
        src, want = encode(digits), greedy(digits, bos, eos, n)
        with torch.no_grad():
            result = run(fn, model, src, bos, eos, n, case=case, forbidden=forbidden, names="greedy_decode")
        if not isinstance(result, torch.Tensor) or result.dim() != 2 or result.shape[0] != 1:
            mistake = "shape" if isinstance(result, torch.Tensor) else "not-a-tensor"
            return no(mistake, f"Return a (1, n) tensor of ids for a batch of one; on {case} got {_shape(result)}.")
        got = result[0].tolist()
        made = len(got) - 1  # the tokens generated after bos
        # the other routes: a decoder without a cache (it may differ in a near tie), one that masks a pad id
        if got == want or got in (greedy(digits, bos, eos, n, use_cache=False), _usual_greedy(model, src, bos, eos, n)):
            continue
        if got[:1] != [bos]:
            return no("no-bos", f"Start the output with bos_id ({bos} on {case}), the token the decoder reads first.")
        if eos != eos_id and got[-1:] == [eos_id] and eos in got:
            return no("tokenizer-eos", f"On {case} you stopped at <eos> id {eos_id}, not at the eos_id given ({eos}).")
        if eos in got[:-1]:
            return no("past-eos", f"On {case} your output goes on after <eos>: stop once eos_id is produced, keep it.")
        if want[-1] == eos and got == want[:-1]:
            return no("eos-dropped", f"On {case} your output lacks the <eos> at the end: append eos_id, then stop.")
        if want[-1] == eos and got[: len(want) - 1] == want[:-1] and eos not in got:
            return no("never-stops", f"On {case} <eos> ({eos}) never comes: once it is the argmax, append it and stop.")
        if made > n:
            return no("too-long", f"On {case} you produced {made} tokens: at most max_new_tokens={n}.")
        if len(got) < len(want) and want[: len(got)] == got:
            return no("stopped-early", f"On {case} you stopped after {made} tokens: go on to eos_id or max_new_tokens.")
        return no("other", f"On {case}: expected {names(want)!r}, got {names(got)!r}.")
    return CORRECT


@checker
def check_loss_positions(fn) -> str:
    """fn(labels (B, T), pad_id) must return the bool mask of positions the loss counts: labels != pad_id."""
    for seed, B, T, pad, bos, eos, vocab in [(3, 2, 6, 0, 1, 2, 10), (4, 3, 7, 5, 1, 2, 9), (5, 4, 5, 9, 3, 0, 12)]:
        labels = _targets(seed, B, T + 1, pad, bos, eos, vocab)[:, 1:]  # labels drop <bos>
        labels[0, 0] = 0 if pad != 0 else labels[0, 0]  # with pad_id != 0, a real label 0 too
        case = f"labels of shape ({B}, {T}) with pad_id={pad}"
        want = labels != pad
        got = run(fn, labels.clone(), pad, case=case)
        expect_tensor(got, want, case, kind="bool")
        if torch.equal(got, want):
            continue
        eos_counted = "The <eos> label must be counted too: the model must learn when to stop."
        mistakes = [  # (the mask that mistake gives, its id, hint)
            (~want, "reversed", "Reversed: the loss counts the real tokens (True), not the padding."),
            (labels != 0, "pad-ignored", f"You ignored pad_id: on {case} the padding is {pad}, not 0."),
            (want & (labels != eos), "eos-counted", eos_counted),
            (want & (labels != 2), "eos-counted", eos_counted),  # the usual <eos> id, whatever this input's is
            (torch.ones_like(want), "all-counted", "Every position counts, padding too: leave out labels == pad_id."),
        ]
        spot(got.long(), want.long(), [(mask.long(), mistake, hint) for mask, mistake, hint in mistakes], atol=0)
        return no("other", f"Not quite on {case}: True at every position whose label is not pad_id.")
    return CORRECT


@torch.no_grad()
def _accuracy(model, src, tgt, ablate: bool, count_pad: bool = False, no_shift: bool = False) -> float:
    """Fraction of non-pad target tokens predicted right under teacher forcing; ablate zeroes the encoder output."""
    src_mask = model.make_src_mask(src)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    if ablate:
        memory = torch.zeros_like(memory)
    logits = model.decode(tgt[:, :-1], memory, src_mask)  # (B, T-1, V)
    labels = tgt[:, :-1] if no_shift else tgt[:, 1:]  # (B, T-1)
    hit = logits.argmax(-1) == labels  # (B, T-1)
    return float((hit if count_pad else hit[labels != model.pad_id]).float().mean())


@checker
def check_memory_ablation(fn, model, src: torch.Tensor, tgt: torch.Tensor) -> str:
    """Experiment: fn(model, src, tgt, ablate) measures teacher-forced token accuracy, memory zeroed if ablate."""
    device = next(model.parameters()).device
    src, tgt = src.to(device), tgt.to(device)
    model.eval()
    rows = torch.randperm(len(src), generator=_seeded(11)).to(device)
    third = max(2, len(src) // 3)
    subset, others = rows[:third], rows[third : 2 * third]
    datasets = [  # the data given, and data of the checker's own
        ("the data you gave", src, tgt),
        (f"a random subset of {third} rows", src[subset], tgt[subset]),
        ("sources paired with other rows' targets", src[others], tgt[others.roll(1)]),
    ]
    results = []
    for name, s, t in datasets:
        for ablate in (False, True):
            case = f"{name}, ablate={ablate}"
            got = run(fn, model, s.clone(), t.clone(), ablate, case=case)
            value = number(got)
            if value is None:
                return no("not-a-number", f"Return the accuracy as a number; on {case} got {type(got).__name__}.")
            results.append(value)
            accuracy = functools.partial(_accuracy, model, s, t)
            want = accuracy(ablate)
            if abs(value - want) <= 0.5 / max(int((t[:, 1:] != model.pad_id).sum()), 1) + 1e-6:  # half a label
                continue
            mistakes = [  # (what that mistake measures, its id, hint): spot skips the one equal to want
                (accuracy(False), "not-ablated", "With ablate=True nothing changed: replace the memory by zeros."),
                (accuracy(True), "always-ablated", "With ablate=False you zeroed the memory: only ablate=True does."),
                (accuracy(ablate, count_pad=True), "pad-counted", "The padding is counted: count non-pad labels only."),
                (accuracy(ablate, no_shift=True), "unshifted", "Compare the argmax with the next token, tgt[:, 1:]."),
                (100 * want, "percent", "That is a percentage: return a fraction between 0 and 1."),
            ]
            spot(value, want, mistakes)
            if any(abs(value - r) < 1e-12 for r in results[:-1]):
                hint = f"you returned {value} again, where the accuracy is {want:.4f}: it must measure, not type it in."
                return no("not-measured", f"On {case} {hint}")
            hint = "compare the argmax for tgt[:, :-1] with tgt[:, 1:], counting only positions that are not padding."
            return no("other", f"On {case} expected a token accuracy of {want:.4f}, got {value:.4f}: {hint}")
    return CORRECT
