"""Mutation suite for the checkers of chapter 15 (pre-train, then fine-tune): classic mistakes are named, other valid
routes pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch15_pretraining as ex15


# The notebook's solutions (notebooks/15_pretraining.ipynb).
def my_mask_tokens(tokens, mask_id, special_ids, vocab_size, generator):
    words = torch.tensor([i for i in range(vocab_size) if i not in special_ids])  # the ordinary ids
    can = ~torch.isin(tokens, torch.tensor(special_ids))  # (B, S): not special
    chosen = can & (torch.rand(tokens.shape, generator=generator) < 0.15)
    split = torch.rand(tokens.shape, generator=generator)  # (B, S): below 0.8 [MASK], then 0.1 random, 0.1 kept
    random_words = words[torch.randint(len(words), tokens.shape, generator=generator)]  # (B, S)
    inputs = torch.where(chosen & (split < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (split >= 0.8) & (split < 0.9), random_words, inputs)
    labels = torch.where(chosen, tokens, -100)
    return inputs, labels


def my_mlm_loss(logits, labels):
    chosen = labels != -100  # (B, S)
    if not chosen.any():
        return logits.sum() * 0.0  # no chosen position: 0, not the NaN of an empty mean
    return F.cross_entropy(logits[chosen], labels[chosen])  # (n, V) against (n,)


def masked_word_accuracy(model, windows, seed):
    generator = torch.Generator().manual_seed(seed)
    inputs, labels = tl.bert.mask_tokens(
        windows, mask_id=3, special_ids=(0, 1, 2, 3, 4), vocab_size=model.config.vocab_size, generator=generator
    )
    chosen = labels != -100  # (N, S): the positions to guess
    model.eval()
    with torch.no_grad():
        guesses = model(inputs).argmax(-1)  # (N, S): the top guess at every position
    return (guesses[chosen] == labels[chosen]).float().mean().item()


@pytest.mark.parametrize(
    ("solution", "check"),
    [
        (my_mask_tokens, ex15.check_mask_tokens),
        (my_mlm_loss, ex15.check_mlm_loss),
        (masked_word_accuracy, ex15.check_masked_word_accuracy),
    ],
)
def test_the_notebook_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", [ex15.check_mask_tokens, ex15.check_mlm_loss, ex15.check_masked_word_accuracy])
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    rejected_as(check(raising(IndexError("index 7 is out of bounds"))), "raised")


# ---- BERT's corruption --------------------------------------------------------------------------


def _corrupt(
    tokens,
    mask_id,
    special_ids,
    vocab_size,
    generator,
    *,
    rate=0.15,
    shares=(0.8, 0.1),
    specials_can=False,
    pick=None,
    labels_from=None,
    ignore=-100,
    global_rng=False,
):
    """A corruption with one knob turned per mistake: the rate, the [MASK] and random shares, the random words..."""
    g = None if global_rng else generator
    can = torch.ones_like(tokens, dtype=torch.bool) if specials_can else ~torch.isin(tokens, torch.tensor(special_ids))
    roll = torch.rand(tokens.shape, generator=g)  # (B, S)
    chosen = can & (roll < rate)
    to_mask = chosen & (roll < shares[0] * rate)
    to_random = chosen & ~to_mask & (roll < (shares[0] + shares[1]) * rate)
    if pick is None:
        words = torch.tensor([i for i in range(vocab_size) if i not in special_ids])
        picks = words[torch.randint(len(words), tokens.shape, generator=g)]
    else:
        picks = pick(tokens, special_ids, vocab_size, g)
    inputs = torch.where(to_random, picks, torch.where(to_mask, mask_id, tokens))
    labels = torch.where(chosen, tokens if labels_from is None else labels_from(tokens, inputs), ignore)
    return inputs, labels


def _with(**knobs):
    return lambda *args: _corrupt(*args, **knobs)


def _relabelled(relabel):
    def fn(*args):
        inputs, labels = my_mask_tokens(*args)
        return relabel(args[0], inputs, labels)

    return fn


def _in_place(tokens, mask_id, special_ids, vocab_size, generator):
    inputs, labels = my_mask_tokens(tokens, mask_id, special_ids, vocab_size, generator)
    tokens[labels != -100] = inputs[labels != -100]  # the caller's tokens overwritten
    return tokens, labels


def _stray_random(tokens, mask_id, special_ids, vocab_size, generator):
    """Random words drawn on their own, not only at chosen positions."""
    inputs, labels = my_mask_tokens(tokens, mask_id, special_ids, vocab_size, generator)
    words = torch.tensor([i for i in range(vocab_size) if i not in special_ids])
    stray = ~torch.isin(tokens, torch.tensor(special_ids)) & (torch.rand(tokens.shape, generator=generator) < 0.015)
    return torch.where(stray, words[torch.randint(len(words), tokens.shape, generator=generator)], inputs), labels


def _ordinary(special_ids, vocab_size):
    return torch.tensor([i for i in range(vocab_size) if i not in special_ids])


def _draw(n, tokens, g):  # (B, S) draws below n
    return torch.randint(n, tokens.shape, generator=g)


def _from_text(tokens, special_ids, vocab_size, g):  # random words drawn from the batch's own ordinary words
    words = tokens[~torch.isin(tokens, torch.tensor(special_ids))]
    return words[torch.randint(len(words), tokens.shape, generator=g)]


def _shared_roll(shape):
    """A corruption whose random numbers have `shape` (one per column, or per row), broadcast over the batch."""

    def fn(tokens, mask_id, special_ids, vocab_size, generator):
        roll = torch.rand(shape(tokens), generator=generator).expand(tokens.shape)  # (B, S), shared along an axis
        chosen = ~torch.isin(tokens, torch.tensor(special_ids)) & (roll < 0.15)
        words = _ordinary(special_ids, vocab_size)
        picks = words[torch.randint(len(words), tokens.shape, generator=generator)]
        inputs = torch.where(chosen & (roll < 0.12), mask_id, tokens)
        inputs = torch.where(chosen & (roll >= 0.12) & (roll < 0.135), picks, inputs)
        return inputs, torch.where(chosen, tokens, -100)

    return fn


def _shared_split(tokens, mask_id, special_ids, vocab_size, generator):
    """Each position chosen on its own, but one 80/10/10 roll per column, shared by every row."""
    chosen = ~torch.isin(tokens, torch.tensor(special_ids)) & (torch.rand(tokens.shape, generator=generator) < 0.15)
    split = torch.rand(tokens.shape[1], generator=generator).expand(tokens.shape)  # (B, S): one per column
    words = _ordinary(special_ids, vocab_size)
    picks = words[torch.randint(len(words), tokens.shape, generator=generator)]
    inputs = torch.where(chosen & (split < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (split >= 0.8) & (split < 0.9), picks, inputs)
    return inputs, torch.where(chosen, tokens, -100)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        # the random words: from part of the vocabulary, from the text, below the batch's largest id
        (
            _with(pick=lambda t, s, v, g: _ordinary(s, v)[_draw(len(_ordinary(s, v)) // 2, t, g)]),
            "random-part",
        ),
        (_with(pick=lambda t, s, v, g: _ordinary(s, v)[_draw(40, t, g)]), "random-part"),
        (_with(pick=lambda t, s, v, g: _ordinary(s, v)[-1 - _draw(29, t, g)]), "random-part"),
        (_with(pick=_from_text), "random-from-text"),
        (lambda t, m, s, v, g: my_mask_tokens(t, m, s, int(t.max()) + 1, g), "vocab-from-batch"),
        # one draw shared by every row or every column; a [MASK] id typed in
        (_shared_roll(lambda t: (t.shape[1],)), "shared-draw"),
        (_shared_roll(lambda t: (t.shape[0], 1)), "shared-draw"),
        (_shared_split, "shared-draw"),
        (lambda t, m, s, v, g: my_mask_tokens(t, 3, s, v, g), "mask-id"),  # the chapter's [MASK], 3
        (lambda t, m, s, v, g: my_mask_tokens(t, 103, s, v, g), "mask-id"),  # BERT's
        (_with(specials_can=True), "specials-chosen"),
        (_with(shares=(1.0, 0.0)), "all-masked"),
        (_relabelled(lambda t, i, lab: (i, t.clone())), "labels-everywhere"),
        (
            lambda t, m, s, v, g: (
                my_mask_tokens(t, m, s, v, g)[0],
                torch.where(torch.isin(t, torch.tensor(s)), -100, t),
            ),
            "labels-everywhere",
        ),
        (_with(labels_from=lambda t, i: i), "labels-from-inputs"),
        (_with(pick=lambda t, s, v, g: torch.randint(v, t.shape, generator=g)), "random-special"),
        (_with(pick=lambda t, s, v, g: torch.randint(5, v, t.shape, generator=g)), "random-special"),  # 0..4 special?
        (_with(pick=lambda t, s, v, g: torch.randint(len(s), v + len(s), t.shape, generator=g)), "random-range"),
        (_with(rate=0.8), "rate"),
        (_with(rate=0.12), "rate"),
        (_with(shares=(0.1, 0.8)), "split"),
        (_with(shares=(0.8, 0.02)), "split"),  # random words for 10% of the remaining 20%
        (_with(shares=(0.9, 0.1)), "split"),  # no kept words
        (_with(global_rng=True), "generator-ignored"),
        (lambda t, m, s, v, g: my_mask_tokens(t, m, s, v, torch.Generator().manual_seed(0)), "generator-ignored"),
        (_with(ignore=0), "ignore-id"),
        (_relabelled(lambda t, i, lab: (i, torch.where(lab != -100, lab + 1, lab))), "wrong-labels"),
        (_stray_random, "unchosen-changed"),
        (lambda *args: my_mask_tokens(*args)[0], "not-a-pair"),
        (lambda t, m, s, v, g: my_mask_tokens(t, m, s, 2560, g), "random-range"),  # the chapter's vocabulary only
        (_relabelled(lambda t, i, lab: (i, lab.float())), "dtype"),
        (_relabelled(lambda t, i, lab: (i, lab[:, 1:])), "shape"),
        (_relabelled(lambda t, i, lab: (i.tolist(), lab)), "not-a-tensor"),
        (lambda t, m, s, v, g: tl.bert.mask_tokens(t, mask_id=m, special_ids=s, vocab_size=v, generator=g), "by-hand"),
        (_in_place, "in-place"),
    ],
)
def test_mask_tokens_mistakes_are_named(wrong, mistake):
    rejected_as(ex15.check_mask_tokens(wrong), mistake)


def _bernoulli_route(tokens, mask_id, special_ids, vocab_size, generator):
    """Hugging Face's way: a coin per position, a coin for [MASK], a fair coin between random and kept."""
    coin = lambda p: torch.bernoulli(torch.full(tokens.shape, p), generator=generator).bool()  # noqa: E731
    chosen = coin(0.15) & ~torch.isin(tokens, torch.tensor(list(special_ids)))
    to_mask = chosen & coin(0.8)
    to_random = chosen & ~to_mask & coin(0.5)
    words = sorted(set(range(vocab_size)) - set(special_ids))
    picks = torch.tensor(words)[torch.randint(len(words), tokens.shape, generator=generator)]
    inputs = tokens.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = picks[to_random]
    labels = torch.full_like(tokens, -100)
    labels[chosen] = tokens[chosen]
    return inputs, labels


def _one_roll_route(tokens, mask_id, special_ids, vocab_size, generator):
    """One uniform number per position decides everything, as tl.bert.mask_tokens does."""
    roll = torch.rand(tokens.shape, generator=generator)
    special = sum(tokens == s for s in special_ids).bool()
    words = torch.tensor([i for i in range(vocab_size) if i not in special_ids])
    picks = words[torch.randint(len(words), tokens.shape, generator=generator)]
    chosen = (roll < 0.15) & ~special
    inputs = torch.where(chosen & (roll < 0.12), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (roll >= 0.12) & (roll < 0.135), picks, inputs)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


@pytest.mark.parametrize("right", [_bernoulli_route, _one_roll_route])
def test_mask_tokens_other_routes_pass(right):
    assert ex15.check_mask_tokens(right) == CORRECT


# ---- the masked-LM loss -------------------------------------------------------------------------


def _nll(logits, labels):
    """(B, S): -log p(label) at every position (-100 read as 0)."""
    return -logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]


def _guarded(loss):
    """loss(logits, labels, chosen) when some position is chosen, else 0."""
    return lambda lo, la: loss(lo, la, la != -100) if (la != -100).any() else torch.tensor(0.0)


def _row_mean(lo, la, chosen):
    rows = chosen.sum(1)
    return ((_nll(lo, la) * chosen).sum(1) / rows).nanmean()


def _by_softmax(lo, la):  # the softmax written out: exp overflows on large logits
    p = lo.exp() / lo.exp().sum(-1, keepdim=True)
    chosen = la != -100
    return -p.log().gather(-1, la.clamp(min=0)[..., None])[..., 0][chosen].mean() if chosen.any() else 0.0


def _flat_sum(logits, labels):  # a Python float, from the summed loss: right, but backward cannot reach the logits
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")
    return total.item() / max(int((labels != -100).sum()), 1)


def _straight_through(lo, la):
    """The right number, with a gradient that is not the loss's: 1 / (B S V) on every logit."""
    return my_mlm_loss(lo, la).detach() + (lo - lo.detach()).mean()


def _centres_in_place(lo, la):
    lo -= lo.amax(-1, keepdim=True)  # the caller's logits changed; the loss is the same
    return my_mlm_loss(lo, la)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda lo, la: F.cross_entropy(lo.flatten(0, 1), la.flatten().clamp(min=0)), "all-positions"),
        (lambda lo, la: F.cross_entropy(lo.transpose(1, 2), la, reduction="sum") / la.numel(), "divided-by-all"),
        (_guarded(lambda lo, la, c: F.cross_entropy(lo[c], la[c], reduction="sum")), "sum"),
        (_guarded(_row_mean), "row-mean"),
        (_guarded(lambda lo, la, c: -lo.gather(-1, la.clamp(min=0)[..., None])[..., 0][c].mean()), "no-log-softmax"),
        (
            _guarded(lambda lo, la, c: -lo.softmax(-1).gather(-1, la.clamp(min=0)[..., None])[..., 0][c].mean()),
            "probabilities",
        ),
        (_guarded(lambda lo, la, c: F.cross_entropy(lo[c].softmax(-1), la[c])), "softmax-first"),
        (_guarded(lambda lo, la, c: -F.cross_entropy(lo[c], la[c])), "sign"),
        (lambda lo, la: F.cross_entropy(lo.flatten(0, 1), la.flatten()), "nan-empty"),
        (_by_softmax, "overflow"),
        (lambda lo, la: F.cross_entropy(lo.transpose(1, 2), la, reduction="none"), "not-a-scalar"),
        (_guarded(lambda lo, la, c: _nll(lo, la)[c]), "not-a-scalar"),
        (lambda lo, la: "the loss", "not-a-number"),
        (lambda lo, la: float("inf"), "not-finite"),
        (_guarded(lambda lo, la, c: F.cross_entropy(lo[c], la[c]) * 1.1), "other"),
        (tl.bert.mlm_loss, "by-hand"),
        (lambda lo, la: torch.tensor(my_mlm_loss(lo, la).item(), requires_grad=True), "no-gradient"),  # a new leaf
        (lambda lo, la: my_mlm_loss(lo, la).detach().requires_grad_(), "no-gradient"),
        (lambda lo, la: my_mlm_loss(lo, la).item(), "detached"),  # a float
        (lambda lo, la: torch.tensor(my_mlm_loss(lo, la).item()), "detached"),  # a float wrapped in a tensor
        (_flat_sum, "detached"),
        (_straight_through, "wrong-gradient"),
        (_centres_in_place, "in-place"),
    ],
)
def test_mlm_loss_mistakes_are_named(wrong, mistake):
    rejected_as(ex15.check_mlm_loss(wrong), mistake)


def _by_hand(logits, labels):
    chosen = labels != -100  # (B, S)
    nll = -logits.log_softmax(-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, S)
    return (nll * chosen).sum() / chosen.sum().clamp(min=1)


def _logsumexp(logits, labels):
    chosen = labels != -100
    if not chosen.any():
        return 0.0
    picked = logits[chosen]  # (n, V)
    return (picked.logsumexp(-1) - picked.gather(1, labels[chosen][:, None])[:, 0]).mean()


def _zero_tensor_when_empty(logits, labels):
    """A plain tensor 0.0 for a batch with no chosen position: nothing there for a gradient to reach."""
    chosen = labels != -100
    return F.cross_entropy(logits[chosen], labels[chosen]) if chosen.any() else torch.tensor(0.0)


@pytest.mark.parametrize("right", [_by_hand, _logsumexp, _zero_tensor_when_empty])
def test_mlm_loss_other_routes_pass(right):
    assert ex15.check_mlm_loss(right) == CORRECT


def test_mlm_loss_passes_when_checked_under_no_grad():
    with torch.no_grad():  # the checker turns gradients on for the answer's own run
        assert ex15.check_mlm_loss(my_mlm_loss) == CORRECT


# ---- the masked-word accuracy -------------------------------------------------------------------


def _masked(model, windows, seed):
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    return tl.bert.mask_tokens(windows, mask_id=3, special_ids=(0, 1, 2, 3, 4), vocab_size=vocab, generator=generator)


def _accuracy(score, *, seed_of=lambda seed: seed, seen=False, train=False, grad=False):
    """An experiment with one knob turned per mistake; score(guesses, windows, inputs, labels) is the number."""

    def fn(model, windows, seed):
        inputs, labels = _masked(model, windows, seed_of(seed))
        model.train(train)
        with torch.set_grad_enabled(grad):
            guesses = model(windows if seen else inputs).argmax(-1)
        return score(guesses, windows, inputs, labels)

    return fn


def _right(guesses, windows, inputs, labels):
    chosen = labels != -100
    return (guesses[chosen] == labels[chosen]).float().mean().item()


def _global_rng(model, windows, seed):  # mask_tokens draws from torch's global state, never seeded
    inputs, labels = tl.bert.mask_tokens(windows, mask_id=3, special_ids=range(5), vocab_size=model.config.vocab_size)
    model.eval()
    with torch.no_grad():
        return _right(model(inputs).argmax(-1), windows, inputs, labels)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_accuracy(_right, seen=True), "unmasked"),
        (_accuracy(lambda g, w, i, lab: (g == w).float().mean().item()), "all-positions"),
        (_accuracy(lambda g, w, i, lab: (g == lab).float().mean().item()), "divided-by-all"),
        (_accuracy(lambda g, w, i, lab: (g == lab)[i == 3].float().mean().item()), "mask-only"),
        (_accuracy(lambda g, w, i, lab: (g == lab).sum().item()), "count"),
        (_accuracy(lambda g, w, i, lab: 100 * _right(g, w, i, lab)), "percent"),
        (_accuracy(_right, seed_of=lambda seed: 0), "seed-ignored"),
        (_accuracy(_right, seed_of=lambda seed: seed + 1), "other"),
        (_global_rng, "seed-ignored"),
        (_accuracy(_right, train=True), "train-mode"),
        (_accuracy(_right, grad=True), "grad-enabled"),
        (_accuracy(lambda g, w, i, lab: g), "not-a-number"),
        (_accuracy(lambda g, w, i, lab: _right(g, w, i, lab) + 0.01), "other"),
        (lambda model, windows, seed: 0.358, "constant"),  # the chapter's printed accuracy, typed in
        (lambda model, windows, seed: 0.3584699453551913, "constant"),
    ],
)
def test_masked_word_accuracy_mistakes_are_named(wrong, mistake):
    rejected_as(ex15.check_masked_word_accuracy(wrong), mistake)


def _at_chosen(model, windows, seed):
    """Only the chosen positions' logits, as BertForMaskedLM(tokens, at=...) gives them, under inference_mode."""
    inputs, labels = _masked(model, windows, seed)
    chosen = labels != -100
    with torch.inference_mode():
        guesses = model.eval()(inputs, at=chosen).argmax(-1)  # (n,)
    return int((guesses == labels[chosen]).sum()) / int(chosen.sum())


def _global_seeded(model, windows, seed):
    """torch.manual_seed(seed) and no generator: the same draws as a generator seeded with seed."""
    torch.manual_seed(seed)
    inputs, labels = tl.bert.mask_tokens(windows, mask_id=3, special_ids=range(5), vocab_size=model.config.vocab_size)
    model.eval()
    with torch.no_grad():
        return torch.tensor(_right(model(inputs).argmax(-1), windows, inputs, labels))


@pytest.mark.parametrize("right", [_at_chosen, _global_seeded])
def test_masked_word_accuracy_other_routes_pass(right):
    assert ex15.check_masked_word_accuracy(right) == CORRECT
