"""Checkers for the exercises of the encoder-decoder chapter."""

from __future__ import annotations

import torch

from .. import decoding, models
from ._common import CORRECT, attempt
from ._match import first_mistake, number, tensor_problem

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


_SHIFT_CASES = [  # (seed, B, T, pad, bos, eos, vocab)
    (0, 2, 7, 0, 1, 2, 12),
    (1, 3, 5, 3, 7, 4, 9),
    (2, 1, 11, 11, 0, 5, 15),
]


def check_shift(fn) -> str:
    """fn(tgt (B, T)) must return (decoder_input, labels) = (tgt[:, :-1], tgt[:, 1:])."""
    passed = 0
    for seed, B, T, pad, bos, eos, vocab in _SHIFT_CASES:
        tgt = _targets(seed, B, T, pad, bos, eos, vocab)
        case = f"targets of shape ({B}, {T})"
        result, hint = attempt(fn, tgt.clone(), case=case)
        if hint:
            return hint
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return f"Return a pair (decoder_input, labels); on {case} got {type(result).__name__}."
        inp, lab = result
        want_inp, want_lab = tgt[:, :-1], tgt[:, 1:]
        for got, what in ((inp, "decoder input"), (lab, "labels")):
            if not isinstance(got, torch.Tensor):
                return f"The {what} should be a tensor; on {case} got {type(got).__name__}."
        if torch.equal(inp, want_inp) and torch.equal(lab, want_lab):
            passed += 1
            continue
        if torch.equal(inp, tgt[:, 1:]) and torch.equal(lab, tgt[:, :-1]):
            return "Swapped: the decoder sees <bos> first, so its input is tgt[:, :-1] and the labels tgt[:, 1:]."
        if torch.equal(lab, tgt.roll(-1, 1)) or torch.equal(inp, tgt.roll(1, 1)):
            return "torch.roll wraps the sequence around: slice instead, so that no token comes back at the other end."
        if passed and (inp.shape[1] != T - 1 or lab.shape[1] != T - 1):
            return (
                f"On {case} both should have {T - 1} positions, got {tuple(inp.shape)} and {tuple(lab.shape)}: "
                "slice with -1 and 1, not with fixed lengths."
            )
        if torch.equal(inp, tgt) and torch.equal(lab, tgt):
            return "Nothing is shifted: the decoder input drops the last token, the labels drop the first."
        if torch.equal(inp, tgt):
            return "The decoder input is not shifted: drop the last token, tgt[:, :-1]."
        if torch.equal(lab, tgt):
            return "The labels are not shifted: drop the first token (<bos>), tgt[:, 1:]."
        if T > 3 and torch.equal(inp, tgt[:, :-2]) and torch.equal(lab, tgt[:, 2:]):
            return "Shifted by two: the labels are the next token, one place on."
        if inp.shape[1] != T - 1 or lab.shape[1] != T - 1:
            return (
                f"On {case} both should have {T - 1} positions, got {tuple(inp.shape)} and {tuple(lab.shape)}: "
                "slice with -1 and 1, not with fixed lengths."
            )
        return f"Not quite on {case}: decoder input tgt[:, :-1], labels tgt[:, 1:]."
    return CORRECT


def _names(ids, tok) -> str:
    return " ".join(tok.itos[i] if hasattr(tok, "itos") else str(i) for i in ids)


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


def check_greedy(fn, model, src_tok, tgt_tok, numbers=("00008", "00305", "61718", "4721", "90017")) -> str:
    """fn(model, src (1, S), bos_id, eos_id, max_new_tokens) must match greedy decoding, token for token.

    Written by hand: tl.greedy_decode and model.greedy_decode refuse to run during the check. The
    checker also passes an eos_id and a bos_id other than the tokenizer's, and a small max_new_tokens.
    """
    device = next(model.parameters()).device
    model.eval()
    runs = []  # (description, src, bos, eos, max_new_tokens)
    for digits in numbers:
        runs.append((f"the number {digits}", digits, tgt_tok.bos_id, tgt_tok.eos_id, 60))
    with torch.no_grad():
        outputs = {
            digits: decoding.greedy_decode(
                model, torch.tensor([src_tok.encode(digits)], device=device), tgt_tok.bos_id, tgt_tok.eos_id, 60
            )[0].tolist()
            for digits in numbers
        }
    longest = max(numbers, key=lambda digits: len(outputs[digits]))
    plain = outputs[longest]
    if len(plain) > 3:  # stop at the second word: eos_id is an argument, not tgt_tok's <eos>
        other_eos = plain[2]
        runs.append((f"{longest} with eos_id={other_eos} (the id of a word)", longest, tgt_tok.bos_id, other_eos, 60))
    short = max(1, len(plain) - 3)  # fewer steps than this number needs
    runs.append((f"{longest} with max_new_tokens={short}", longest, tgt_tok.bos_id, tgt_tok.eos_id, short))
    other_bos = max(i for i in range(tgt_tok.vocab_size) if i not in (tgt_tok.bos_id, tgt_tok.eos_id, tgt_tok.pad_id))
    runs.append((f"{numbers[1]} with bos_id={other_bos}", numbers[1], other_bos, tgt_tok.eos_id, 60))
    forbidden = (decoding.greedy_decode, models.Transformer.greedy_decode, decoding.beam_search)
    for case, digits, bos, eos, n in runs:
        src = torch.tensor([src_tok.encode(digits)], device=device)
        with torch.no_grad():
            wants = [decoding.greedy_decode(model, src, bos, eos, n)[0].tolist()]
            result, hint = attempt(fn, model, src, bos, eos, n, case=case, forbidden=forbidden, names="greedy_decode")
        if hint:
            return hint
        if not isinstance(result, torch.Tensor) or result.dim() != 2 or result.shape[0] != 1:
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            return f"Return a (1, n) tensor of ids for a batch of one; on {case} got {shape}."
        got = result[0].tolist()
        if got not in wants:  # the other route: a decoder without a cache (it may differ in a near tie)
            with torch.no_grad():
                wants.append(decoding.greedy_decode(model, src, bos, eos, n, use_cache=False)[0].tolist())
                wants.append(_greedy_with_target_padding_mask(model, src, bos, eos, n))
        if got in wants:
            continue
        want = wants[0]
        if not got or got[0] != bos:
            return f"Start the output with bos_id ({bos} on {case}), the token the decoder reads first."
        if eos != tgt_tok.eos_id and got[-1] == tgt_tok.eos_id and eos in got:
            return (
                f"On {case} your decoder stopped at <eos> id {tgt_tok.eos_id}, not at the eos_id it was given "
                f"({eos}): use the eos_id argument."
            )
        if eos in got[:-1]:
            return f"On {case} your output goes on after <eos>: stop as soon as eos_id is produced (and keep it)."
        if want[-1] == eos and got == want[:-1]:
            return f"On {case} your output has no <eos> at the end: append the eos_id token, then stop."
        if want[-1] == eos and got[: len(want) - 1] == want[:-1] and eos not in got:
            return (
                f"On {case} your decoder never emits <eos> ({eos}): it ran on past the point where the argmax was "
                "eos_id. Append that token and stop."
            )
        if len(got) > n + 1:
            return f"On {case} you produced {len(got) - 1} tokens: at most max_new_tokens={n}."
        if len(got) < len(want) and want[: len(got)] == got:
            return f"On {case} you stopped early, after {len(got) - 1} tokens: go on until eos_id or max_new_tokens."
        return f"On {case}: expected {_names(want, tgt_tok)!r}, got {_names(got, tgt_tok)!r}."
    return CORRECT


def check_loss_positions(fn) -> str:
    """fn(labels (B, T), pad_id) must return the bool mask of positions the loss counts: labels != pad_id."""
    for seed, B, T, pad, bos, eos, vocab in [(3, 2, 6, 0, 1, 2, 10), (4, 3, 7, 5, 1, 2, 9), (5, 4, 5, 9, 3, 0, 12)]:
        labels = _targets(seed, B, T + 1, pad, bos, eos, vocab)[:, 1:]  # labels drop <bos>
        labels[0, 0] = 0 if pad != 0 else labels[0, 0]  # with pad_id != 0, a real label 0 too
        case = f"labels of shape ({B}, {T}) with pad_id={pad}"
        want = labels != pad
        got, hint = attempt(fn, labels.clone(), pad, case=case)
        if hint:
            return hint
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype != torch.bool:
            if torch.equal(got.bool(), want) and got.is_floating_point() is False or torch.equal(got != 0, want):
                return f"The positions are right but the dtype is {got.dtype}: return a bool tensor (labels != pad_id)."
            return f"Return a bool tensor, True where the loss counts; on {case} got dtype {got.dtype}."
        problem = tensor_problem(got, want, case, kind="bool")
        if problem:
            return problem
        if torch.equal(got, want):
            continue
        mistakes = [
            (~want, "Reversed: the loss counts the real tokens (True), not the padding."),
            (labels != 0, f"Your answer ignores pad_id: it treats 0 as padding, but on {case} padding is {pad}."),
            (
                labels > 0,
                f"Your answer treats ids above 0 as real: on {case} padding is pad_id={pad}, compare with it.",
            ),
            (want & (labels != eos), "The <eos> label is counted too: the model must learn when to stop."),
            (want & (labels != 2), "The <eos> label is counted too: the model must learn when to stop."),
            (torch.ones_like(want), "Every position is counted, the padding too: leave out labels equal to pad_id."),
        ]
        return first_mistake(got.long(), want.long(), [(m.long(), h) for m, h in mistakes], atol=0) or (
            f"Not quite on {case}: True at every position whose label is not pad_id."
        )
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
    hit = logits.argmax(-1) == labels
    if count_pad:
        return float(hit.float().mean())
    return float(hit[labels != model.pad_id].float().mean())


def check_memory_ablation(fn, model, src: torch.Tensor, tgt: torch.Tensor) -> str:
    """Experiment: fn(model, src, tgt, ablate) measures teacher-forced token accuracy.

    With ablate=True the encoder output (memory) is replaced by zeros. The checker runs the
    learner's function on the data given and on data of its own (a random subset of the rows, and
    sources paired with the wrong targets), and compares each result with its own measurement.
    """
    device = next(model.parameters()).device
    src, tgt = src.to(device), tgt.to(device)
    model.eval()
    g = torch.Generator().manual_seed(11)
    rows = torch.randperm(len(src), generator=g).to(device)
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
            got, hint = attempt(fn, model, s.clone(), t.clone(), ablate, case=case)
            if hint:
                return hint
            value = number(got)
            if value is None:
                return f"Return the accuracy as a number; on {case} got {type(got).__name__}."
            results.append(value)
            want = _teacher_forced_accuracy(model, s, t, ablate)
            real = int((t[:, 1:] != model.pad_id).sum())
            if abs(value - want) <= 0.5 / max(real, 1) + 1e-6:
                continue
            mistakes = [
                (
                    _teacher_forced_accuracy(model, s, t, not ablate),
                    "With ablate=True nothing changed: replace the encoder's output (memory) by zeros."
                    if ablate
                    else "With ablate=False you zeroed the memory: only ablate=True replaces it.",
                ),
                (
                    _teacher_forced_accuracy(model, s, t, ablate, count_pad=True),
                    "The padding is counted: count only positions whose label is not padding.",
                ),
                (
                    _teacher_forced_accuracy(model, s, t, ablate, no_shift=True),
                    "Compare the argmax with the next token, tgt[:, 1:], not with the decoder's own input.",
                ),
                (100 * want, "That is a percentage: return a fraction between 0 and 1."),
            ]
            found = first_mistake(value, want, mistakes)
            if found:
                return found
            if any(abs(value - r) < 1e-12 for r in results[:-1]):
                return (
                    f"Your function returned {value} again on {case}, where the accuracy is {want:.4f}: it must "
                    "measure the model on the data it is given, not return a number found before."
                )
            return (
                f"On {case} expected a token accuracy of {want:.4f}, got {value:.4f}. Feed tgt[:, :-1], "
                "compare the argmax with tgt[:, 1:], and count only positions that are not padding."
            )
    return CORRECT
