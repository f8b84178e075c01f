"""Mutation suite for the checkers of chapter 19 (sound as tokens, pictures with words): classic mistakes are named,
other valid routes pass."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch19_sound_tokens_and_clip as ex19


# The notebook's solutions (notebooks/19_sound_tokens_and_clip.ipynb).
def residual_codes(x, codebooks):
    residual, codes = x, []
    for book in codebooks:
        distance = ((residual[:, None, :] - book[None, :, :]) ** 2).sum(-1)  # (N, 1, dim) - (1, K, dim) -> (N, K)
        chosen = distance.argmin(-1)  # (N,)
        codes.append(chosen)
        residual = residual - book[chosen]  # (N, dim): what this codebook left
    return torch.stack(codes, -1)  # (N, number of codebooks)


def contrastive_loss(logits):
    labels = torch.arange(logits.shape[0])
    images = F.cross_entropy(logits, labels)  # each row: an image over the captions
    captions = F.cross_entropy(logits.T, labels)  # each column: a caption over the images
    return (images + captions) / 2


def read_back_share(model, n, clips, seed):
    samples, keys = tl.recipes.codec_clips(clips, seed)  # (clips, 4000) and the keys dialled
    with torch.no_grad():
        rebuilt = model.decode(model.encode(samples, n))  # (clips, 4000)
    read = tl.speech.dtmf_decode(rebuilt, sampling_rate=tl.recipes.CODEC_RATE, frame=100, hop=40)
    return sum(r == k for r, k in zip(read, keys)) / clips


# the read-back checker runs the shipped codec on clips, a second or two a call: make test runs it, make check does not
SLOW = pytest.mark.slow
SOLUTIONS = [
    (residual_codes, ex19.check_residual_codes),
    (contrastive_loss, ex19.check_contrastive_loss),
    pytest.param(read_back_share, ex19.check_read_back_share, marks=SLOW),
]
CHECKS = [
    ex19.check_residual_codes,
    ex19.check_contrastive_loss,
    pytest.param(ex19.check_read_back_share, marks=SLOW),
]


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_the_notebook_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", CHECKS)
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    rejected_as(check(raising(IndexError("index 7 is out of bounds"))), "raised")
    assert "index 7" in check(raising(IndexError("index 7 is out of bounds")))


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_a_check_leaves_torchs_random_state_as_it_was_and_takes_little_time(solution, check):
    state = torch.random.get_rng_state()
    start = time.perf_counter()
    assert check(solution) == CORRECT
    assert time.perf_counter() - start < 20  # a generous net against hangs; a few seconds on a laptop core
    assert torch.equal(torch.random.get_rng_state(), state)


# ---- residual vector quantization ---------------------------------------------------------------------------------


def _rvq(pick=None, update=None, stack=lambda codes: torch.stack(codes, -1)):
    """A residual quantizer with one step changed: how it picks an entry, or how it updates the residual."""

    def nearest(r, book):
        return ((r[:, None, :] - book[None]) ** 2).sum(-1).argmin(-1)

    def fn(x, codebooks):
        residual, codes = x, []
        for book in codebooks:
            chosen = (pick or nearest)(residual, book)
            codes.append(chosen)
            residual = (update or (lambda r, x, e: r - e))(residual, x, book[chosen])
        return stack(codes)

    return fn


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_rvq(update=lambda r, x, e: r), "no-residual"),
        (_rvq(update=lambda r, x, e: r + e), "added"),
        (_rvq(update=lambda r, x, e: x - e), "from-x"),
        (_rvq(pick=lambda r, b: ((r[:, None] - b[None]) ** 2).sum(-1).argmax(-1)), "farthest"),
        (_rvq(pick=lambda r, b: (r @ b.T).argmax(-1)), "dot-product"),
        (_rvq(stack=lambda codes: torch.stack(codes)), "transposed"),
        (_rvq(stack=lambda codes: torch.stack(codes, -1).float()), "dtype"),
        (_rvq(stack=lambda codes: torch.stack(codes, -1).tolist()), "not-a-tensor"),
        (_rvq(stack=lambda codes: torch.stack(codes, -1)[:, :1]), "shape"),
        (_rvq(update=lambda r, x, e: r - 0.5 * e), "later-codebooks"),
        (lambda x, books: tl.codec.kmeans(x, 2)[1][:, None].repeat(1, len(books)), "by-hand"),
        (lambda x, books: (x.add_(1), residual_codes(x, books))[1], "in-place"),
    ],
)
def test_residual_codes_mistakes_are_named(wrong, mistake):
    rejected_as(ex19.check_residual_codes(wrong), mistake)


def _with_library(x, codebooks):
    q = tl.codec.ResidualVectorQuantizer(len(codebooks), codebooks[0].shape[0], x.shape[1])
    return q.encode(x)


def _by_cdist(x, codebooks):
    residual, codes = x.double(), []
    for book in codebooks:
        chosen = torch.cdist(residual, book.double()).argmin(-1)  # the distance itself, not its square
        codes.append(chosen)
        residual = residual - book.double()[chosen]
    return torch.stack(codes, -1).int()


def _by_expansion(x, codebooks):
    residual, codes = x, []
    for book in codebooks:
        distance = residual.pow(2).sum(-1, keepdim=True) - 2 * residual @ book.T + book.pow(2).sum(-1)  # (N, K)
        codes.append(distance.argmin(-1))
        residual = residual - F.embedding(codes[-1], book)
    return torch.stack(codes, 1)


def test_residual_codes_refuses_the_library():
    rejected_as(ex19.check_residual_codes(_with_library), "by-hand")


@pytest.mark.parametrize("right", [_by_cdist, _by_expansion])
def test_residual_codes_other_routes_pass(right):
    assert ex19.check_residual_codes(right) == CORRECT


def test_the_residual_reference_is_the_librarys_quantizer():
    """The checker's reference gives the codes of tl.codec's quantizer loaded with the same codebooks."""
    for case in ex19._RVQ_CASES:
        x, books, want, _ = ex19._rvq_case(case)
        if len({b.shape[0] for b in books}) != 1:
            continue  # the library's codebooks are all one size
        q = tl.codec.ResidualVectorQuantizer(len(books), books[0].shape[0], x.shape[1]).to(x.dtype)
        for layer, book in zip(q.layers, books):
            layer.codebook.embed.copy_(book)
        assert torch.equal(q.encode(x), want)


# ---- CLIP's contrastive loss --------------------------------------------------------------------------------------


def _ce(z, labels):
    return F.cross_entropy(z, labels)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda z: _ce(z, torch.arange(len(z))), "images-only"),
        (lambda z: _ce(z.T, torch.arange(len(z))), "texts-only"),
        (lambda z: _ce(z, torch.arange(len(z))) + _ce(z.T, torch.arange(len(z))), "sum"),
        (
            lambda z: (
                (
                    F.cross_entropy(z, torch.arange(len(z)), reduction="sum")
                    + F.cross_entropy(z.T, torch.arange(len(z)), reduction="sum")
                )
                / 2
            ),
            "summed-batch",
        ),  # fmt: skip
        (lambda z: -z.flatten().log_softmax(0)[:: len(z) + 1].mean(), "all-entries"),
        (lambda z: F.binary_cross_entropy_with_logits(z, torch.eye(len(z), dtype=z.dtype)), "sigmoid"),
        (
            lambda z: (
                (_ce(z, torch.zeros(len(z), dtype=torch.long)) + _ce(z.T, torch.zeros(len(z), dtype=torch.long))) / 2
            ),
            "labels-zero",
        ),  # fmt: skip
        (lambda z: torch.tensor(1.5), "constant"),
        (lambda z: (z.log_softmax(0).diagonal().mean() + z.log_softmax(1).diagonal().mean()) / 2, "other"),  # sign
        (lambda z: torch.stack([_ce(z, torch.arange(len(z))), _ce(z.T, torch.arange(len(z)))]), "not-a-number"),
        (lambda z: tl.clip.clip_loss(z), "by-hand"),
        (lambda z: (z.mul_(2), contrastive_loss(z / 2))[1], "in-place"),
    ],
)
def test_contrastive_loss_mistakes_are_named(wrong, mistake):
    rejected_as(ex19.check_contrastive_loss(wrong), mistake)


def _by_log_softmax(z):
    z = z.double()
    return -(z.log_softmax(1).diagonal().mean() + z.log_softmax(0).diagonal().mean()) / 2


def _by_logsumexp(z):
    rows = (z.logsumexp(1) - z.diagonal()).mean()
    columns = (z.logsumexp(0) - z.diagonal()).mean()
    return float((rows + columns) / 2)


@pytest.mark.parametrize("right", [_by_log_softmax, _by_logsumexp])
def test_contrastive_loss_other_routes_pass(right):
    assert ex19.check_contrastive_loss(right) == CORRECT


def test_the_loss_reference_is_the_librarys():
    for case in ex19._LOSS_CASES:
        z = ex19._logits(*case)
        assert float(ex19._symmetric(z)) == pytest.approx(float(tl.clip.clip_loss(z.double())), rel=1e-9)


# ---- how much survives the codec ----------------------------------------------------------------------------------


def _share(n_of=lambda n, model: n, through=True, per_key=False, count=False, seed_of=lambda s: s):
    @torch.no_grad()
    def fn(model, n, clips, seed):
        samples, keys = tl.recipes.codec_clips(clips, seed_of(seed))
        rebuilt = model.decode(model.encode(samples, n_of(n, model))) if through else samples
        read = tl.speech.dtmf_decode(rebuilt, sampling_rate=tl.recipes.CODEC_RATE, frame=100, hop=40)
        if per_key:
            return sum(sum(a == b for a, b in zip(r, k)) for r, k in zip(read, keys)) / sum(map(len, keys))
        right = sum(r == k for r, k in zip(read, keys))
        return right if count else right / clips

    return fn


@SLOW
@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_share(n_of=lambda n, model: model.quantizer.num_quantizers), "ignores-n"),  # 1 everywhere, as it happens
        (_share(n_of=lambda n, model: 1), "first-codebook"),
        (_share(through=False), "ignores-n"),
        (lambda model, n, clips, seed: 1.0, "ignores-n"),
        (_share(per_key=True), "per-key"),
        (_share(count=True), "count"),
        (lambda model, n, clips, seed: 0.25, "constant"),
        (lambda model, n, clips, seed: "0.5", "not-a-number"),
        (lambda model, n, clips, seed: 1 - 0.75**n, "other"),  # a formula, not a measurement
    ],
)
def test_read_back_share_mistakes_are_named(wrong, mistake):
    rejected_as(ex19.check_read_back_share(wrong), mistake)


def _after_four_calls(then):
    """Right on the checker's four settings, then `then(n, clips, seed)` on the repeated and the new seed."""
    calls = []

    def fn(model, n, clips, seed):
        calls.append(seed)
        return read_back_share(model, n, clips, seed) if len(calls) <= 4 else then(model, n, clips, seed)

    return fn


@SLOW
def test_a_share_that_ignores_the_seed_or_draws_anew_is_named():
    first = ex19._SHARE_CASES[0][2]
    same_clips = _after_four_calls(lambda model, n, clips, seed: read_back_share(model, n, clips, first))
    rejected_as(ex19.check_read_back_share(same_clips), "not-measured")
    fresh = _after_four_calls(lambda model, n, clips, seed: read_back_share(model, n, clips, seed + 100))
    rejected_as(ex19.check_read_back_share(fresh), "seed-ignored")


def _by_codec_scores(model, n, clips, seed):
    return tl.recipes.codec_scores(model, clips, seed)[f"read back, {n} codebooks"]


def _through_forward(model, n, clips, seed):
    samples, keys = tl.recipes.codec_clips(clips, torch.Generator().manual_seed(seed))
    model.eval()
    with torch.no_grad():
        rebuilt, _, _ = model(samples, n)  # straight through: the same codes' sound
    read = tl.speech.dtmf_decode(rebuilt, sampling_rate=tl.recipes.CODEC_RATE, frame=100, hop=40)
    return torch.tensor([r == k for r, k in zip(read, keys)]).float().mean()


@SLOW
@pytest.mark.parametrize("right", [_by_codec_scores, _through_forward])
def test_read_back_share_other_routes_pass(right):
    assert ex19.check_read_back_share(right) == CORRECT
