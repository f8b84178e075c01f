"""Checkers for the exercises of the chapter "Pre-train, then fine-tune" (a small BERT)."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from .. import bert
from ..bert import IGNORE
from ..pretraining import MASK, PlayWords
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, run
from ._match import expect_tensor

__all__ = ["check_mask_tokens", "check_mlm_loss", "check_masked_word_accuracy"]

# ---- BERT's corruption ----------------------------------------------------------------------------

# (rows, width, vocab_size, special ids, mask_id, pad id, [CLS] id, [SEP] id): specials neither contiguous nor 0
# (0 is an ordinary word in the first), the chapter's own ids, three-digit ids. Under 32768 positions each, so
# torch runs each operation on one thread (fast on a busy machine); enough for bounds of six standard deviations.
_CORRUPT_CASES = (
    (120, 270, 120, (7, 31, 64, 100, 113), 64, 31, 7, 113),
    (120, 270, 50, (0, 1, 2, 3, 4), 3, 0, 1, 2),
    (120, 270, 1000, (5, 250, 251, 600, 999), 600, 999, 5, 250),
)
# Texts that use part of the vocabulary, so that the random words show where they were drawn from: 40 words spread
# over 1000 ids (the top one among them), then only the ids below 200 (the largest id in the batch is far below
# vocab_size). (case, the text's words: a slice of the ordinary ids)
_PART_CASES = (
    ((120, 270, 1000, (5, 250, 251, 600, 998), 600, 998, 5, 250), slice(None, None, 25)),
    ((120, 270, 1000, (0, 1, 2, 3, 4), 3, 0, 1, 2), slice(0, 195)),
)


def _token_batch(rows, width, vocab, specials, pad, cls, sep, g, words: slice = slice(None)) -> torch.Tensor:
    """(rows, width) ids: [CLS], ordinary words (those of the slice `words` of them) and a few specials, [SEP], then
    padding (rows of other lengths)."""
    ordinary = torch.tensor([i for i in range(vocab) if i not in specials])[words]
    tokens = ordinary[torch.randint(len(ordinary), (rows, width), generator=g)]  # (rows, width)
    sprinkled = torch.rand(rows, width, generator=g) < 0.02  # a [MASK] or [UNK] already in the text: never chosen
    tokens[sprinkled] = torch.tensor(specials)[torch.randint(len(specials), (int(sprinkled.sum()),), generator=g)]
    lengths = torch.randint(width // 2, width + 1, (rows, 1), generator=g)  # (rows, 1)
    where = torch.arange(width)  # (width,)
    tokens[:, 0] = cls
    tokens[where == lengths - 1] = sep
    tokens[where >= lengths] = pad
    return tokens


def _off(share: float, p: float, n: int) -> bool:
    """share is more than six binomial standard deviations (n draws of probability p) from p."""
    return abs(share - p) > 6 * math.sqrt(p * (1 - p) / n) + 1e-3


def _corrupted(fn, tokens, mask_id, specials, vocab, seed, case) -> tuple[torch.Tensor, torch.Tensor]:
    """fn's (inputs, labels) on this input and a generator seeded with `seed`, checked for type, shape and dtype."""
    forbidden, names = (bert.mask_tokens,), "tl.bert.mask_tokens"
    got = run(fn, tokens.clone(), mask_id, specials, vocab, _seeded(seed), case=case, forbidden=forbidden, names=names)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise Wrong("not-a-pair", f"Return (inputs, labels); on {case} your answer returned a {type(got).__name__}.")
    for name, t in zip(("inputs", "labels"), got):
        expect_tensor(t, tokens, f"{case} ({name})")
        if t.dtype != tokens.dtype:
            raise Wrong("dtype", f"Return {name} as ids of the tokens' dtype, {tokens.dtype}; got {t.dtype}.")
    return got[0], got[1]


def _first(where: torch.Tensor) -> tuple[int, int]:
    """(row, column) of the first True in where (B, S)."""
    r, c = where.nonzero()[0].tolist()
    return r, c


def _judge_corruption(tokens, inputs, labels, mask_id, specials, vocab, case) -> None:
    """Raise the verdict of the first rule (inputs, labels) breaks: exactly first, then the 15% and 80/10/10 shares."""
    special = torch.isin(tokens, torch.tensor(specials))  # (B, S)
    chosen = labels != IGNORE  # (B, S)
    if chosen[~special].all():  # no ordinary word was left out
        common = labels.flatten().mode().values.item()
        if (labels == common).float().mean() > 0.5:
            raise Wrong("ignore-id", f"Most of your labels are {common}: a position not chosen gets the label -100.")
        raise Wrong("labels-everywhere", "Every word has a label: only the chosen positions do, the rest get -100.")
    if (touched := special & (chosen | (inputs != tokens))).any():
        r, c = _first(touched)
        got = f"label {labels[r, c].item()} and input {inputs[r, c].item()}"
        hint = f"the special id {tokens[r, c].item()} at row {r}, column {c} got {got}"
        raise Wrong("specials-chosen", f"On {case}: {hint}. A special position keeps its id and the label -100.")
    if (wrong := chosen & (labels != tokens)).any():
        if torch.equal(labels[chosen], inputs[chosen]):
            raise Wrong("labels-from-inputs", "Your labels are the corrupted inputs: a label is the original id.")
        r, c = _first(wrong)
        hint = f"the label at row {r}, column {c} is {labels[r, c].item()}, the original id {tokens[r, c].item()}"
        raise Wrong("wrong-labels", f"On {case}: {hint}. A chosen position's label is its id in tokens.")
    if (changed := ~chosen & (inputs != tokens)).any():
        r, c = _first(changed)
        hint = f"row {r}, column {c} has the label -100 but {tokens[r, c].item()} became {inputs[r, c].item()}"
        raise Wrong("unchosen-changed", f"On {case}: {hint}. Only chosen positions change.")
    if (typed := _typed_mask(inputs[chosen & (inputs != tokens)], mask_id)) is not None:
        share, typed_id = typed
        hint = f"{share:.0%} of the changed positions became the id {typed_id}, but [MASK] is mask_id = {mask_id} here"
        raise Wrong("mask-id", f"On {case}: {hint}. Use the argument mask_id, not a number typed in.")
    random = chosen & (inputs != tokens) & (inputs != mask_id)  # (B, S): the random words
    if (outside := random & ((inputs < 0) | (inputs >= vocab))).any():
        got = inputs[_first(outside)].item()
        raise Wrong("random-range", f"On {case}: a random word is {got}. Draw ids below vocab_size = {vocab}.")
    if (drawn := random & torch.isin(inputs, torch.tensor(specials))).any():
        got = inputs[_first(drawn)].item()
        raise Wrong("random-special", f"On {case}: a random word is the special id {got}. Draw only ordinary words.")
    n, ordinary, words = (
        int(chosen.sum()),
        int((~special).sum()),
        vocab - len(set(specials)),
    )  # positions, positions, ids
    _judge_shared(chosen, ~special, "chosen", case)
    if _off(n / ordinary, 0.15, ordinary):
        hint = f"you chose {n / ordinary:.1%} of the ordinary words; choose each with probability 0.15"
        raise Wrong("rate", f"On {case}: {hint}.")
    masked, kept = ((inputs == mask_id) & chosen).sum().item() / n, ((inputs == tokens) & chosen).sum().item() / n
    if masked > 0.99:
        hint = "Every chosen position became [MASK]: 10% of them become a random word and 10% stay as they are."
        raise Wrong("all-masked", hint)
    _judge_shared(inputs == mask_id, chosen, "made [MASK]", case)
    p_random = 0.1 * (1 - 1 / words)  # a random word can be the original one: then it counts as kept
    if _off(masked, 0.8, n) or _off(1 - masked - kept, p_random, n) or _off(kept, 1 - 0.8 - p_random, n):
        shares = f"{masked:.0%} became [MASK], {1 - masked - kept:.0%} a random word and {kept:.0%} stayed"
        raise Wrong("split", f"On {case}: of the chosen positions {shares}; expected 80%, 10% and 10%.")
    _judge_random_words(tokens[~special], inputs[random], specials, vocab, case)


def _typed_mask(changed: torch.Tensor, mask_id: int) -> tuple[float, int] | None:
    """(share, id) when one id other than mask_id fills at least half the changed positions `changed` (n,), as a
    [MASK] id typed in would (the random words spread over the vocabulary); else None."""
    if changed.numel() < 50:
        return None
    common = changed.mode().values.item()
    share = (changed == common).double().mean().item()
    return (share, common) if common != mask_id and share >= 0.5 else None


def _judge_shared(event: torch.Tensor, among: torch.Tensor, what: str, case: str) -> None:
    """Raise "shared-draw" when the positions where `event` (B, S) holds, among `among`, repeat down every column or
    along every row: one random number per column or row, broadcast over the other axis."""
    if (axis := _shared_axis(event, among)) is not None:
        hint = f"the positions {what} are the same in every {axis}: one random number was shared by all of them"
        raise Wrong("shared-draw", f"On {case}: {hint}. Draw one number per position, of the tokens' shape (B, S).")


def _shared_axis(event: torch.Tensor, among: torch.Tensor) -> str | None:
    """ "row" when `event` (B, S) is all or nothing down most columns (among the positions `among`), "column" when
    along most rows: one random number per column or per row, shared. Independent draws mix nearly everywhere."""
    for axis, dim in (("row", 0), ("column", 1)):
        counts, hits = among.sum(dim), (event & among).sum(dim)  # per column (dim 0) or per row (dim 1)
        judged = counts >= 10  # enough positions to expect both outcomes
        if judged.sum() >= 5:
            mixed = ((hits > 0) & (hits < counts))[judged].double().mean().item()
            if mixed < 0.5:
                return axis
    return None


def _judge_random_words(words: torch.Tensor, drawn: torch.Tensor, specials, vocab: int, case: str) -> None:
    """The random words `drawn` (n,) are uniform over the ordinary ids, whatever the text's words `words` are: not
    capped at the batch's largest id, not taken from the text, not from part of the range (a Kolmogorov-Smirnov
    distance under a bound a right answer passes with probability 1 - 1e-9)."""
    n = drawn.numel()
    ordinary = torch.tensor([i for i in range(vocab) if i not in set(specials)])  # sorted
    top = int(words.max()) + 1  # the vocabulary size a batch would suggest
    above = (ordinary >= top).double().mean().item()  # the share of uniform draws at or above it
    if above * n >= 30 and not (drawn >= top).any():
        hint = f"every random word is below {top}, the largest id in the batch + 1, but vocab_size = {vocab}"
        raise Wrong("vocab-from-batch", f"On {case}: {hint}. Draw from the whole vocabulary you are given.")
    text = torch.unique(words)
    p, share = torch.isin(ordinary, text).double().mean().item(), torch.isin(drawn, text).double().mean().item()
    if p < 0.5 and share > p and _off(share, p, n):
        hint = f"{share:.0%} of your random words occur in the text, where uniform draws give about {p:.0%}"
        raise Wrong("random-from-text", f"On {case}: {hint}. Draw each from all ordinary ids, not from the batch.")
    rank = torch.searchsorted(ordinary, drawn).double().sort().values / len(ordinary)  # (n,): in [0, 1), sorted
    steps = torch.arange(n + 1, dtype=torch.float64) / n  # (n + 1,): the empirical distribution's steps
    distance = max((steps[1:] - rank).max().item(), (rank - steps[:-1]).max().item())
    if distance > math.sqrt(math.log(2 / 1e-9) / (2 * n)) + 1 / len(ordinary):
        low, high = ordinary[int(rank[0] * len(ordinary))].item(), ordinary[int(rank[-1] * len(ordinary))].item()
        hint = f"your random words are not spread evenly over the ordinary ids (they run from {low} to {high})"
        raise Wrong(
            "random-part",
            f"On {case}: {hint}. Draw each uniformly from every id below vocab_size = {vocab} that is not special.",
        )


@checker
def check_mask_tokens(fn: Callable) -> str:
    """fn(tokens (B, S), mask_id, special_ids, vocab_size, generator) -> (inputs, labels): BERT's 80/10/10 rule."""
    g = _seeded(15)
    for rows, width, vocab, specials, mask_id, pad, cls, sep in _CORRUPT_CASES:
        tokens = _token_batch(rows, width, vocab, specials, pad, cls, sep, g)
        case = f"tokens of shape {(rows, width)}, vocab_size={vocab}, special_ids={specials}, mask_id={mask_id}"
        inputs, labels = _corrupted(fn, tokens, mask_id, specials, vocab, 1, case)
        _judge_corruption(tokens, inputs, labels, mask_id, specials, vocab, case)
    for part_case, words in _PART_CASES:  # the seed is judged below on the last case above, not on these
        part = _token_batch(*part_case[:4], *part_case[5:], g, words)
        vocab_size, special_ids, mask = part_case[2], part_case[3], part_case[4]
        given = f"a text of {len(torch.unique(part))} distinct ids, vocab_size={vocab_size}, special_ids={special_ids}"
        got = _corrupted(fn, part, mask, special_ids, vocab_size, 1, given)
        _judge_corruption(part, *got, mask, special_ids, vocab_size, given)
    # the last input again: the same seed must give the same corruption, another seed another
    again = _corrupted(fn, tokens, mask_id, specials, vocab, 1, case)
    if not (torch.equal(again[0], inputs) and torch.equal(again[1], labels)):
        hint = "The same seed gave two different corruptions: draw every random number from `generator`"
        return no("generator-ignored", f"{hint} (torch.rand(..., generator=generator)).")
    other = _corrupted(fn, tokens, mask_id, specials, vocab, 2, case)
    if torch.equal(other[0], inputs) and torch.equal(other[1], labels):
        return no("generator-ignored", "Two seeds gave the same corruption: draw the random numbers from `generator`.")
    return CORRECT


# ---- the masked-LM loss -----------------------------------------------------------------------

# (B, S, V, logits' scale, their shift, chosen positions per row): rows of different counts, a large vocabulary,
# logits far from 0, a row with none and a batch with none. Small: each operation runs on one thread.
_LOSS_CASES = (
    (3, 7, 11, 1.0, 0.0, (1, 4, 2)),
    (3, 10, 1000, 3.0, 0.0, (4, 1, 7)),
    (2, 6, 13, 40.0, 200.0, (2, 5)),
    (3, 5, 9, 1.0, 0.0, (0, 3, 1)),
    (2, 5, 9, 2.0, 0.0, (0, 0)),
)
_LOSS_HINTS = {
    "all-positions": "You averaged over every position: the loss reads only the chosen ones (label != -100).",
    "divided-by-all": "You divided by the number of all positions: divide by the number of chosen ones.",
    "sum": "That is the sum over the chosen positions: take their mean.",
    "row-mean": "You averaged each row, then the rows: rows hold different numbers of chosen positions, so "
    "average over all chosen positions at once.",
    "no-log-softmax": "You read the raw logits: the loss is -log softmax(logits)[label], F.cross_entropy.",
    "probabilities": "You averaged -probability: the loss is -log of the label's probability.",
    "softmax-first": "You applied softmax before F.cross_entropy, which does log-softmax itself: pass it raw logits.",
    "sign": "The sign is flipped: the loss is -mean(log p(label)), a positive number.",
}
_NO_GRADIENT = "your loss is a new tensor, cut from the logits (torch.tensor(loss.item()), or "
_NO_GRADIENT += ".detach().requires_grad_()): return the loss computed from them, without .item() or .detach(), so "
_NO_GRADIENT += "that loss.backward() reaches the model"


def _loss_case(g, B, S, V, scale, shift, counts) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B, S, V) and labels (B, S) with counts[row] chosen positions in each row, -100 elsewhere."""
    logits = torch.randn(B, S, V, generator=g) * scale + shift
    labels = torch.full((B, S), IGNORE)
    for row, n in enumerate(counts):
        labels[row, torch.randperm(S, generator=g)[:n]] = torch.randint(V, (n,), generator=g)
    return logits, labels


def _losses(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The right loss ("right") and what each mistake of _LOSS_HINTS computes instead, in float64."""
    chosen = labels != IGNORE  # (B, S)
    x, at = logits.double(), labels.clamp(min=0)[..., None]  # -100 read as 0
    nll = -x.log_softmax(-1).gather(-1, at)[..., 0]  # (B, S)
    n, total, rows = chosen.sum(), nll[chosen].sum(), chosen.sum(1)  # rows: (B,)
    per_row = (nll * chosen).sum(1)[rows > 0] / rows[rows > 0]
    right = (total / n).item() if n else 0.0
    return {
        "right": right,
        "all-positions": nll.mean().item(),
        "divided-by-all": (total / chosen.numel()).item(),
        "sum": total.item(),
        "row-mean": per_row.mean().item() if n else 0.0,
        "no-log-softmax": -x.gather(-1, at)[..., 0][chosen].mean().item() if n else 0.0,
        "probabilities": -x.softmax(-1).gather(-1, at)[..., 0][chosen].mean().item() if n else 0.0,
        "softmax-first": F.cross_entropy(x.softmax(-1)[chosen], labels[chosen]).item() if n else 0.0,
        "sign": -right,
    }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def _loss_gradient(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The right loss's gradient with respect to the logits, (B, S, V), in float64; some label must be chosen."""
    chosen = labels != IGNORE  # (B, S)
    x = logits.detach().double().requires_grad_()
    with torch.enable_grad():
        return torch.autograd.grad(F.cross_entropy(x[chosen], labels[chosen]), x)[0]  # (n, V) against (n,)


def _judge_gradient(got, leaf: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor, case: str) -> None:
    """Raise the verdict unless loss.backward() on the answer leaves the right loss's gradient on `leaf`, the
    logits the answer was given (through a copy)."""
    if not isinstance(got, torch.Tensor) or not got.requires_grad:
        what = "a tensor cut from the logits" if isinstance(got, torch.Tensor) else f"a {type(got).__name__}"
        hint = "training calls loss.backward() on the loss: return the tensor computed from the logits, without "
        hint += ".item(), .detach() or torch.no_grad()"
        raise Wrong("detached", f"On {case} you returned {what}, the right number: {hint}.")
    try:
        with torch.enable_grad():
            got.reshape(()).backward()  # () from one element, as training would call it
    except Exception as error:  # the learner's graph, e.g. a tensor changed in place after it was used
        raise Wrong("raised", f"loss.backward() raised {type(error).__name__} on {case}: {error}") from None
    if leaf.grad is None or not leaf.grad.any():
        raise Wrong("no-gradient", f"On {case} no gradient reaches the logits: {_NO_GRADIENT}.")
    want = _loss_gradient(logits, labels)  # (B, S, V)
    if not torch.allclose(leaf.grad.double(), want, rtol=1e-4, atol=1e-6):
        worst = (leaf.grad.double() - want).abs().amax().item()
        hint = "return the loss computed from the logits you are given, so that its gradient is the loss's"
        raise Wrong("wrong-gradient", f"On {case} the gradient on the logits is off by up to {worst:.3g}: {hint}.")


@checker
def check_mlm_loss(fn: Callable) -> str:
    """fn(logits (B, S, V), labels (B, S)) -> the mean cross-entropy over labels != -100 (0 if none): a 0-dim tensor
    whose gradient reaches the logits (with no label chosen, 0.0 as a float or a tensor)."""
    g = _seeded(16)
    for B, S, V, scale, shift, counts in _LOSS_CASES:
        logits, labels = _loss_case(g, B, S, V, scale, shift, counts)
        far = f" around {shift:g}" if shift else ""
        case = f"logits{far} of shape {(B, S, V)} and labels with {list(counts)} chosen positions per row"
        forbidden, names = (bert.mlm_loss,), "tl.bert.mlm_loss"
        leaf = logits.clone().requires_grad_()  # (B, S, V): where loss.backward() leaves the gradient
        with torch.enable_grad():  # a check run under torch.no_grad() still lets the answer build its graph
            given = leaf.clone()  # not a leaf: an answer that changes it in place is named so
            got = run(fn, given, labels.clone(), case=case, forbidden=forbidden, names=names)
        if isinstance(got, torch.Tensor) and got.numel() != 1:
            what = "one loss per position" if got.numel() in (labels.numel(), sum(counts)) else "a tensor"
            return no("not-a-scalar", f"On {case} you returned {what} of shape {tuple(got.shape)}: return their mean.")
        value = measure("the loss", got.detach() if isinstance(got, torch.Tensor) else got)[0]
        losses = _losses(logits, labels)
        if not math.isfinite(value):
            if not sum(counts):
                return no("nan-empty", f"On {case} you returned {value}: with no chosen position, return 0.0.")
            if shift:
                hint = "exp of large logits overflows: use F.cross_entropy or log_softmax, which subtract the max"
                return no("overflow", f"On {case} you returned {value}: {hint}.")
            return no("not-finite", f"On {case} you returned {value}: expected {losses['right']:.4f}.")
        if _close(value, losses["right"]):
            if sum(counts):  # a batch with no chosen position has no gradient to check: 0.0 is fine there
                _judge_gradient(got, leaf, logits, labels, case)
            continue
        for mistake, hint in _LOSS_HINTS.items():
            if not _close(losses[mistake], losses["right"]) and _close(value, losses[mistake]):
                return no(mistake, f"On {case}: {hint}")
        hint = "the mean of -log softmax(logits)[label] over the positions whose label is not -100"
        return no("other", f"On {case} expected {losses['right']:.4f}, got {value:.4f}: {hint}.")
    return CORRECT


# ---- the masked-word accuracy (experiment) ------------------------------------------------------


class _Guesser(nn.Module):
    """A toy masked-word model: at a word it guesses that word, at [MASK] the word its chain puts after the left
    neighbour. In training mode dropout erases half its guesses; it notes (training, grad enabled) of each call."""

    def __init__(self, follows: torch.Tensor):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=len(follows))
        self.register_buffer("follows", follows)  # (V,): the word that follows each id in the chain
        self.sharpness = nn.Parameter(torch.tensor(5.0))
        self.dropout = nn.Dropout(0.5)
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, tokens, token_types=None, *, at=None) -> torch.Tensor:
        """tokens (B, S) -> logits (B, S, V); given `at` (B, S) bool, only there: (n, V), as BertForMaskedLM."""
        self.calls.append((self.training, torch.is_grad_enabled()))
        left = torch.cat([tokens[:, :1], tokens[:, :-1]], dim=1)  # (B, S): each position's left neighbour
        guess = torch.where(tokens == MASK, self.follows[left], tokens)  # (B, S)
        logits = self.dropout(F.one_hot(guess, len(self.follows)).float() * self.sharpness)  # (B, S, V)
        return logits if at is None else logits[at]


def _play(n: int, length: int, vocab: int, seed: int) -> tuple[_Guesser, torch.Tensor]:
    """A toy model and windows (n, length) of [CLS], words that mostly follow its chain, [SEP]."""
    g = _seeded(seed)
    words = torch.arange(len(PlayWords.special_ids), vocab)  # the ordinary ids
    follows = torch.full((vocab,), int(words[0]))
    follows[words] = words[torch.randperm(len(words), generator=g)]
    windows = torch.empty(n, length, dtype=torch.long)
    windows[:, 0], windows[:, -1] = PlayWords.special_ids[1], PlayWords.special_ids[2]  # [CLS], [SEP]
    word = words[torch.randint(len(words), (n,), generator=g)]  # (n,)
    for i in range(1, length - 1):
        windows[:, i] = word
        jump = torch.rand(n, generator=g) < 0.1  # now and then a word off the chain
        word = torch.where(jump, words[torch.randint(len(words), (n,), generator=g)], follows[word])
    return _Guesser(follows), windows


def _accuracies(model: _Guesser, windows: torch.Tensor, seed: int) -> list[tuple[str, float]]:
    """(id, value): the accuracy asked for ("right"), then what each classic mistake measures instead."""
    vocab, g = model.config.vocab_size, _seeded(seed)
    inputs, labels = bert.mask_tokens(
        windows, mask_id=MASK, special_ids=PlayWords.special_ids, vocab_size=vocab, generator=g
    )
    chosen = labels != IGNORE  # (N, S)
    with torch.no_grad():
        guess, seen = model.eval()(inputs).argmax(-1), model(windows).argmax(-1)  # (N, S) each
    model.train().calls.clear()
    hits, n = (guess == labels)[chosen].sum().item(), chosen.sum().item()
    words = ~torch.isin(windows, torch.tensor(PlayWords.special_ids))  # (N, S)
    masked = inputs == MASK  # (N, S): only chosen positions became [MASK]
    return [
        ("right", hits / n),
        ("unmasked", (seen == labels)[chosen].double().mean().item()),
        ("all-positions", (guess == windows).double().mean().item()),
        ("all-positions", (guess == windows)[words].double().mean().item()),
        ("divided-by-all", hits / labels.numel()),
        ("mask-only", (guess == labels)[masked].double().mean().item()),
        ("count", float(hits)),
        ("percent", 100 * hits / n),
    ]


_ACCURACY_HINTS = {
    "unmasked": "You ran the model on the windows themselves, so it saw every answer: run it on the masked inputs.",
    "all-positions": "You counted every position: count only the chosen ones (label != -100).",
    "divided-by-all": "You divided by the number of all positions: divide by the number of chosen ones.",
    "mask-only": "You counted only the positions that became [MASK]: count every chosen position (label != -100), "
    "the random and kept words too.",
    "count": "That is a count: divide it by the number of chosen positions.",
    "percent": "That is a percentage: return the fraction, between 0 and 1.",
}


def _answer(fn: Callable, model: _Guesser, windows: torch.Tensor, seed: int, given: str) -> float:
    """fn's accuracy on the model (handed over in training mode, as after fit), windows and seed."""
    got = run(fn, model.train(), windows.clone(), seed, case=f"{given}, seed={seed}")
    if any(training for training, _ in model.calls):
        raise Wrong("train-mode", "The model ran in training mode, so dropout was on: call model.eval() first.")
    return measure("the accuracy", got)[0]


def _measures(got: float, accuracies: list[tuple[str, float]], mistake: str) -> bool:
    """got is what `mistake` measures (one of its ways), and that differs from the right accuracy."""
    right = accuracies[0][1]
    return any(m == mistake and abs(v - right) > 1e-6 and abs(got - v) <= 1e-6 * max(1, v) for m, v in accuracies)


@checker
def check_masked_word_accuracy(fn: Callable) -> str:
    """Experiment: fn(model, windows (N, S), seed) -> the fraction of chosen positions whose top guess is the word."""
    cases = ((40, 20, 40, (7, 8)), (30, 26, 41, (11, 12)))
    for n, length, vocab, seeds in cases:
        model, windows = _play(n, length, vocab, seed=vocab)
        given = f"windows of shape {(n, length)} and a model with vocab_size={vocab}"
        wants = [_accuracies(model, windows, seed) for seed in seeds]  # per seed, the right value first
        gots = [_answer(fn, model, windows, seed, given) for seed in seeds]
        if all(abs(got - want[0][1]) <= 1e-6 for got, want in zip(gots, wants)):
            if any(grad for _, grad in model.calls):
                return no("grad-enabled", "Right number, but the model ran with gradients on: use torch.no_grad().")
            continue
        case = f"{given}, seed={seeds[0]}"
        for mistake, hint in _ACCURACY_HINTS.items():  # named only when the answer follows it on both seeds
            if all(_measures(got, want, mistake) for got, want in zip(gots, wants)):
                return no(mistake, f"On {case}: {hint}")
        other_n, other_length, other_vocab, _ = cases[1] if vocab == cases[0][2] else cases[0]
        other_model, other_windows = _play(other_n, other_length, other_vocab, seed=other_vocab)
        elsewhere = _answer(fn, other_model, other_windows, seeds[0], "another model")
        if gots[0] == gots[1] == elsewhere:
            hint = "compute the accuracy from the model, the windows and the seed it is given"
            return no("constant", f"Your function gives {gots[0]!r} for every model, window and seed: {hint}.")
        if _answer(fn, model, windows, seeds[0], given) != gots[0] or gots[0] == gots[1]:
            hint = "mask with torch.Generator().manual_seed(seed), passed to tl.bert.mask_tokens as generator"
            return no("seed-ignored", f"Your number does not follow the seed: {hint}.")
        hint = "mask, run the model in eval mode, compare its top guesses with the labels at the chosen positions"
        return no("other", f"On {case} expected {wants[0][0][1]:.4f}, got {gots[0]:.4f}: {hint}.")
    return CORRECT
