"""Checkers for the exercises of the encoder-decoder chapter."""

from __future__ import annotations

import torch

from .. import decoding, models
from ._common import CORRECT, _seeded, checker, no, run
from ._match import expect_tensor, number, spot

__all__ = ["check_shift", "check_greedy", "check_loss_positions", "check_memory_ablation"]


def _targets(seed: int, B: int, T: int, pad: int, bos: int, eos: int, vocab: int) -> torch.Tensor:
    """(B, T) targets <bos> words <eos> then padding, of random lengths; words avoid the special ids."""
    g = torch.Generator().manual_seed(seed)
    special = torch.tensor([pad, bos, eos])
    words = [w for w in range(vocab) if w not in special]
    rows = []
    for b in range(B):
        n = int(torch.randint(1, T - 1, (1,), generator=g)) if b else T - 2  # the first row has no padding
        body = [words[int(i)] for i in torch.randint(0, len(words), (n,), generator=g)]
        rows.append([bos, *body, eos] + [pad] * (T - 2 - n))
    return torch.tensor(rows)


_SHIFT_HINTS = {  # the mistakes check_shift names whatever the input, by id
    "swapped": "Swapped: the decoder sees <bos> first, so its input is tgt[:, :-1] and the labels tgt[:, 1:].",
    "roll": "torch.roll wraps the sequence around: slice instead, so that no token comes back at the other end.",
    "unshifted": "Nothing is shifted: the decoder input drops the last token, the labels drop the first.",
    "input-unshifted": "The decoder input is not shifted: drop the last token, tgt[:, :-1].",
    "labels-unshifted": "The labels are not shifted: drop the first token (<bos>), tgt[:, 1:].",
    "shifted-by-two": "Shifted by two: the labels are the next token, one place on.",
}


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
        seen = [  # (id, whether the answer makes that mistake): the first one made is named
            ("swapped", torch.equal(inp, tgt[:, 1:]) and torch.equal(lab, tgt[:, :-1])),
            ("roll", torch.equal(lab, tgt.roll(-1, 1)) or torch.equal(inp, tgt.roll(1, 1))),
            ("fixed-length", passed and lengths),  # right on an earlier input, so the lengths are typed in
            ("unshifted", torch.equal(inp, tgt) and torch.equal(lab, tgt)),
            ("input-unshifted", torch.equal(inp, tgt)),
            ("labels-unshifted", torch.equal(lab, tgt)),
            ("shifted-by-two", T > 3 and torch.equal(inp, tgt[:, :-2]) and torch.equal(lab, tgt[:, 2:])),
            ("fixed-length", lengths),
        ]
        hints = {
            **_SHIFT_HINTS,
            "fixed-length": f"On {case} both should have {T - 1} positions, got {tuple(inp.shape)} and "
            f"{tuple(lab.shape)}: slice with -1 and 1, not with fixed lengths.",
            "other": f"Not quite on {case}: decoder input tgt[:, :-1], labels tgt[:, 1:].",
        }
        mistake = next((mistake for mistake, made in seen if made), "other")
        return no(mistake, hints[mistake])
    return CORRECT


def _names(ids, tok) -> str:
    return " ".join(tok.itos[i] if hasattr(tok, "itos") else str(i) for i in ids)


@torch.no_grad()
def _greedy_with_target_padding_mask(model, src, bos: int, eos: int, n: int) -> list[int]:
    """Greedy decoding through model.decode's default target mask, which also hides a generated pad id:
    the route most answers take. It differs from tl.greedy_decode only once a model emits the pad id."""
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
    """fn(model, src (1, S), bos_id, eos_id, max_new_tokens) must match greedy decoding, token for token.

    Written by hand: tl.greedy_decode and model.greedy_decode refuse to run during the check. The
    checker also passes an eos_id and a bos_id other than the tokenizer's, and a small max_new_tokens.
    """
    device = next(model.parameters()).device
    model.eval()
    bos_id, eos_id = tgt_tok.bos_id, tgt_tok.eos_id

    @torch.no_grad()
    def greedy(digits: str, bos: int = bos_id, eos: int = eos_id, n: int = 60, **options) -> list[int]:
        src = torch.tensor([src_tok.encode(digits)], device=device)
        return decoding.greedy_decode(model, src, bos, eos, n, **options)[0].tolist()

    runs = [(f"the number {digits}", digits, bos_id, eos_id, 60) for digits in numbers]  # (case, src, bos, eos, n)
    longest = max(numbers, key=lambda digits: len(greedy(digits)))
    plain = greedy(longest)
    if len(plain) > 3:  # stop at the second word: eos_id is an argument, not tgt_tok's <eos>
        runs.append((f"{longest} with eos_id={plain[2]} (the id of a word)", longest, bos_id, plain[2], 60))
    short = max(1, len(plain) - 3)  # fewer steps than this number needs
    runs.append((f"{longest} with max_new_tokens={short}", longest, bos_id, eos_id, short))
    other_bos = max(i for i in range(tgt_tok.vocab_size) if i not in (bos_id, eos_id, tgt_tok.pad_id))
    runs.append((f"{numbers[1]} with bos_id={other_bos}", numbers[1], other_bos, eos_id, 60))
    forbidden = (decoding.greedy_decode, models.Transformer.greedy_decode, decoding.beam_search)
    for case, digits, bos, eos, n in runs:
        src = torch.tensor([src_tok.encode(digits)], device=device)
        wants = [greedy(digits, bos, eos, n)]
        with torch.no_grad():
            result = run(fn, model, src, bos, eos, n, case=case, forbidden=forbidden, names="greedy_decode")
        if not isinstance(result, torch.Tensor) or result.dim() != 2 or result.shape[0] != 1:
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            mistake = "shape" if isinstance(result, torch.Tensor) else "not-a-tensor"
            return no(mistake, f"Return a (1, n) tensor of ids for a batch of one; on {case} got {shape}.")
        got = result[0].tolist()
        if got not in wants:  # the other routes: a decoder without a cache (it may differ in a near tie), a pad mask
            wants.append(greedy(digits, bos, eos, n, use_cache=False))
            wants.append(_greedy_with_target_padding_mask(model, src, bos, eos, n))
        if got in wants:
            continue
        want = wants[0]
        seen = [  # (id, whether the answer makes that mistake): the first one made is named
            ("no-bos", got[:1] != [bos]),
            ("tokenizer-eos", eos != eos_id and got[-1:] == [eos_id] and eos in got),
            ("past-eos", eos in got[:-1]),
            ("eos-dropped", want[-1] == eos and got == want[:-1]),
            ("never-stops", want[-1] == eos and got[: len(want) - 1] == want[:-1] and eos not in got),
            ("too-long", len(got) > n + 1),
            ("stopped-early", len(got) < len(want) and want[: len(got)] == got),
        ]
        hints = {
            "no-bos": f"Start the output with bos_id ({bos} on {case}), the token the decoder reads first.",
            "tokenizer-eos": f"On {case} your decoder stopped at <eos> id {eos_id}, not at the eos_id it was given "
            f"({eos}): use the eos_id argument.",
            "past-eos": f"On {case} your output goes on after <eos>: stop as soon as eos_id is produced (and keep it).",
            "eos-dropped": f"On {case} your output has no <eos> at the end: append the eos_id token, then stop.",
            "never-stops": f"On {case} your decoder never emits <eos> ({eos}): it ran on past the point where the "
            "argmax was eos_id. Append that token and stop.",
            "too-long": f"On {case} you produced {len(got) - 1} tokens: at most max_new_tokens={n}.",
            "stopped-early": f"On {case} you stopped early, after {len(got) - 1} tokens: go on until eos_id or "
            "max_new_tokens.",
            "other": f"On {case}: expected {_names(want, tgt_tok)!r}, got {_names(got, tgt_tok)!r}.",
        }
        mistake = next((mistake for mistake, made in seen if made), "other")
        return no(mistake, hints[mistake])
    return CORRECT


_POSITION_HINTS = {  # the mistakes check_loss_positions names whatever the input, by id
    "reversed": "Reversed: the loss counts the real tokens (True), not the padding.",
    "eos-counted": "The <eos> label is counted too: the model must learn when to stop.",
    "all-counted": "Every position is counted, the padding too: leave out labels equal to pad_id.",
}


@checker
def check_loss_positions(fn) -> str:
    """fn(labels (B, T), pad_id) must return the bool mask of positions the loss counts: labels != pad_id."""
    for seed, B, T, pad, bos, eos, vocab in [(3, 2, 6, 0, 1, 2, 10), (4, 3, 7, 5, 1, 2, 9), (5, 4, 5, 9, 3, 0, 12)]:
        labels = _targets(seed, B, T + 1, pad, bos, eos, vocab)[:, 1:]  # labels drop <bos>
        labels[0, 0] = 0 if pad != 0 else labels[0, 0]  # with pad_id != 0, a real label 0 too
        case = f"labels of shape ({B}, {T}) with pad_id={pad}"
        want = labels != pad
        got = run(fn, labels.clone(), pad, case=case)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype != torch.bool:
            if torch.equal(got != 0, want):
                hint = f"The positions are right but the dtype is {got.dtype}: return a bool tensor (labels != pad_id)."
                return no("dtype", hint)
            return no("dtype", f"Return a bool tensor, True where the loss counts; on {case} got dtype {got.dtype}.")
        expect_tensor(got, want, case)
        if torch.equal(got, want):
            continue
        mistakes = [  # (the mask that mistake gives, its id)
            (~want, "reversed"),
            (labels != 0, "pad-ignored"),
            (want & (labels != eos), "eos-counted"),
            (want & (labels != 2), "eos-counted"),  # the usual <eos> id, whatever this input's is
            (torch.ones_like(want), "all-counted"),
        ]
        hints = {
            **_POSITION_HINTS,
            "pad-ignored": f"Your answer ignores pad_id: it treats 0 as padding, but on {case} padding is {pad}.",
        }
        spot(got.long(), want.long(), [(m.long(), mistake, hints[mistake]) for m, mistake in mistakes], atol=0)
        return no("other", f"Not quite on {case}: True at every position whose label is not pad_id.")
    return CORRECT


@torch.no_grad()
def _teacher_forced_accuracy(model, src, tgt, ablate: bool, count_pad: bool = False, no_shift: bool = False) -> float:
    """Fraction of non-pad target tokens predicted right under teacher forcing; ablate zeroes the encoder output."""
    src_mask = model.make_src_mask(src)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    if ablate:
        memory = torch.zeros_like(memory)
    logits = model.decode(tgt[:, :-1], memory, src_mask)  # (B, T-1, V)
    labels = tgt[:, :-1] if no_shift else tgt[:, 1:]  # (B, T-1)
    hit = logits.argmax(-1) == labels  # (B, T-1)
    return float((hit if count_pad else hit[labels != model.pad_id]).float().mean())


_ABLATION_HINTS = {  # the mistakes check_memory_ablation names, by id
    "not-ablated": "With ablate=True nothing changed: replace the encoder's output (memory) by zeros.",
    "always-ablated": "With ablate=False you zeroed the memory: only ablate=True replaces it.",
    "pad-counted": "The padding is counted: count only positions whose label is not padding.",
    "unshifted": "Compare the argmax with the next token, tgt[:, 1:], not with the decoder's own input.",
    "percent": "That is a percentage: return a fraction between 0 and 1.",
}


@checker
def check_memory_ablation(fn, model, src: torch.Tensor, tgt: torch.Tensor) -> str:
    """Experiment: fn(model, src, tgt, ablate) measures teacher-forced token accuracy.

    With ablate=True the encoder output (memory) is replaced by zeros. The checker runs the
    learner's function on the data given and on data of its own (a random subset of the rows, and
    sources paired with the wrong targets), and compares each result with its own measurement.
    """
    device = next(model.parameters()).device
    src, tgt = src.to(device), tgt.to(device)
    model.eval()
    rows = torch.randperm(len(src), generator=_seeded(11)).to(device)
    third = max(2, len(src) // 3)
    subset, others = rows[:third], rows[third : 2 * third]
    datasets = [
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
            want = _teacher_forced_accuracy(model, s, t, ablate)
            real = int((t[:, 1:] != model.pad_id).sum())
            if abs(value - want) <= 0.5 / max(real, 1) + 1e-6:
                continue
            mistakes = [  # (the accuracy that mistake measures, its id)
                (_teacher_forced_accuracy(model, s, t, not ablate), "not-ablated" if ablate else "always-ablated"),
                (_teacher_forced_accuracy(model, s, t, ablate, count_pad=True), "pad-counted"),
                (_teacher_forced_accuracy(model, s, t, ablate, no_shift=True), "unshifted"),
                (100 * want, "percent"),
            ]
            spot(value, want, [(wrong, mistake, _ABLATION_HINTS[mistake]) for wrong, mistake in mistakes])
            if any(abs(value - r) < 1e-12 for r in results[:-1]):
                return no(
                    "not-measured",
                    f"Your function returned {value} again on {case}, where the accuracy is {want:.4f}: it must "
                    "measure the model on the data it is given, not return a number found before.",
                )
            return no(
                "other",
                f"On {case} expected a token accuracy of {want:.4f}, got {value:.4f}. Feed tgt[:, :-1], "
                "compare the argmax with tgt[:, 1:], and count only positions that are not padding.",
            )
    return CORRECT
