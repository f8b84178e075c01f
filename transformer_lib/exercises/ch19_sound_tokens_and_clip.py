"""Checkers for the exercises of the chapter "Sound as tokens, pictures with words: a codec, VioLA and CLIP"
(residual vector quantization by hand, CLIP's symmetric contrastive loss by hand, and how much of a clip's keys
survive the codec at each number of codebooks)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import clip, codec
from ..recipes import CODEC_RATE, codec_clips
from ..speech import dtmf_decode
from ._common import CORRECT, Wrong, checker, measure, no, one_thread, reproducible, run
from ._match import number

__all__ = ["check_residual_codes", "check_contrastive_loss", "check_read_back_share"]

# ---- residual vector quantization (by hand) ----------------------------------------------------------------------

# (rows N, width, codebook sizes, dtype, seed): one codebook and several, sizes that differ between codebooks,
# float32 and float64, so that no shortcut fits them all
_RVQ_CASES = (
    (12, 2, (4,), torch.float32, 0),
    (30, 3, (8, 5), torch.float64, 1),
    (25, 5, (6, 6, 3), torch.float32, 2),
    (40, 4, (16, 2, 7, 9), torch.float64, 3),
    (9, 1, (3, 4), torch.float32, 4),
)
_RVQ_LIBRARY = "tl.codec's quantizer (Codebook.nearest, ResidualVectorQuantizer.encode or kmeans)"


def _rvq_inputs(n, dim, sizes, dtype, seed) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Vectors (n, dim) and codebooks whose entries shrink from one codebook to the next, as trained ones do."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, dim, generator=g) * 2).to(dtype)  # (n, dim)
    books = [(torch.randn(k, dim, generator=g) * 2 / 2**i).to(dtype) for i, k in enumerate(sizes)]  # (k_i, dim)
    return x, books


def _nearest(r: torch.Tensor, book: torch.Tensor) -> torch.Tensor:
    return ((r[:, None, :] - book[None, :, :]) ** 2).sum(-1).argmin(-1)  # (N, K) -> (N,)


def _codes(x, books, *, keep=True, sign=-1, pick=_nearest, from_x=False) -> torch.Tensor:
    """The reference (defaults) and its mistakes: each codebook codes what the ones before it left."""
    residual, codes, used = x, [], torch.zeros_like(x)
    for book in books:
        chosen = pick(residual, book)  # (N,)
        codes.append(chosen)
        if from_x:  # each codebook codes x minus the previous codebook's entry alone
            residual = x - book[chosen]
        elif keep:
            used = used + book[chosen]
            residual = x + sign * used
    return torch.stack(codes, -1)  # (N, n)


def _farthest(r, book):
    return ((r[:, None, :] - book[None, :, :]) ** 2).sum(-1).argmax(-1)


def _most_similar(r, book):
    return (r @ book.T).argmax(-1)  # the largest dot product, blind to the entries' lengths


_RVQ_MISTAKES = (
    (
        "no-residual",
        dict(keep=False),
        "every codebook coded the vector itself: each codebook after the first codes "
        "the residual, what the codebooks before it left (residual = residual - the chosen entry)",
    ),
    (
        "added",
        dict(sign=1),
        "you added the chosen entries to the residual: subtract them (what is left is x minus everything coded so far)",
    ),
    (
        "from-x",
        dict(from_x=True),
        "each codebook coded x minus the previous codebook's entry alone: subtract every "
        "chosen entry so far, so that codebook j codes x - e_1 - ... - e_(j-1)",
    ),
    (
        "farthest",
        dict(pick=_farthest),
        "you took the farthest entry (argmax of the distance): take the nearest, the argmin",
    ),
    (
        "dot-product",
        dict(pick=_most_similar),
        "you picked the entry with the largest dot product: that favours long "
        "entries; pick the smallest squared distance, |r|^2 - 2 r.e + |e|^2, the entries' lengths included",
    ),
)


@torch.no_grad()
def _ints(got, want: torch.Tensor, case: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise Wrong("not-a-tensor", f"Return a tensor of codes; on {case} your answer returned a {type(got).__name__}.")
    if got.shape == want.shape[::-1] and want.shape[0] != want.shape[1]:
        raise Wrong("transposed", f"On {case} expected shape {tuple(want.shape)} (one row per vector, one column "
                    f"per codebook), got {tuple(got.shape)}: stack the codes along the last axis.")  # fmt: skip
    if got.shape != want.shape:
        raise Wrong("shape", f"On {case} expected shape {tuple(want.shape)} (vectors, codebooks), got "
                    f"{tuple(got.shape)}.")  # fmt: skip
    if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
        raise Wrong("dtype", f"On {case} the codes came back as {got.dtype}: codes are integer ids (torch.long), "
                    "as argmin returns them.")  # fmt: skip
    return got.long().cpu()


@torch.no_grad()
def _rvq_case(case) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, str]:
    n, dim, sizes, dtype, seed = case
    x, books = _rvq_inputs(*case)
    return x, books, _codes(x, books), f"{n} vectors of width {dim}, codebooks of {list(sizes)} entries, {dtype}"


@checker
def check_residual_codes(fn: Callable) -> str:
    """fn(x (N, dim), codebooks [(K_j, dim), ...]) -> codes (N, len(codebooks)), residual vector quantization by
    hand: codebook j picks the entry nearest (squared distance) to what codebooks 1 to j - 1 left of x."""
    cases = [_rvq_case(case) for case in _RVQ_CASES]
    forbidden = (codec.Codebook.nearest, codec.ResidualVectorQuantizer.encode, codec.kmeans)
    gots = []
    for x, books, want, name in cases:
        got = run(fn, x.clone(), [b.clone() for b in books], case=name, forbidden=forbidden, names=_RVQ_LIBRARY)
        gots.append(_ints(got, want, name))
    if all(torch.equal(got, want) for got, (_, _, want, _) in zip(gots, cases)):
        return CORRECT
    first = next(i for i, (got, (_, _, want, _)) in enumerate(zip(gots, cases)) if not torch.equal(got, want))
    x, books, want, name = cases[first]
    wrong_rows = int((gots[first] != want).any(-1).sum())
    on = f"On {name}, {wrong_rows} of {x.shape[0]} vectors got other codes"
    for mistake, how, hint in _RVQ_MISTAKES:  # named only when the answer follows the mistake on every case
        if all(torch.equal(got, _codes(x, books, **how)) for got, (x, books, _, _) in zip(gots, cases)):
            return no(mistake, f"{on}: {hint}.")
    if all(torch.equal(got[:, 0], want[:, 0]) for got, (_, _, want, _) in zip(gots, cases)):
        hint = "the first codebook's codes are right; each later codebook codes the residual x - (the entries "
        return no("later-codebooks", f"{on}: {hint}chosen so far), nearest by squared distance.")
    return no("other", f"{on}: for each codebook in turn, pick the entry nearest the residual (squared distance), "
              "then subtract that entry from the residual.")  # fmt: skip


# ---- CLIP's symmetric contrastive loss (by hand) ------------------------------------------------------------------

# (batch N, the logits' scale, dtype, seed): batches of 2 to 9 pairs, logits as a temperature of 0.07 and of 1
# makes them, float32 and float64
_LOSS_CASES = ((4, 1 / 0.07, torch.float64, 0), (2, 3.0, torch.float32, 1), (7, 10.0, torch.float64, 2),
               (9, 1.0, torch.float32, 3), (5, 25.0, torch.float64, 4))  # fmt: skip
_LOSS_LIBRARY = "tl.clip.clip_loss"


def _logits(n, scale, dtype, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = F.normalize(torch.randn(n, 6, generator=g), dim=-1)
    b = F.normalize(a + torch.randn(n, 6, generator=g), dim=-1)  # captions near their images, not on them
    return (scale * a @ b.T).to(dtype)  # (n, n): image i's similarity to text j


def _ce(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(logits.double(), labels, reduction=reduction)


def _symmetric(logits):
    labels = torch.arange(logits.shape[0])
    return (_ce(logits, labels) + _ce(logits.T, labels)) / 2


_LOSS_MISTAKES: tuple[tuple[str, Callable, str], ...] = (
    (
        "images-only",
        lambda z: _ce(z, torch.arange(len(z))),
        "you kept the images' half only (each row picks its "
        "caption): CLIP's loss is the mean of that and the captions' half, each column picking its image (logits.T)",
    ),
    (
        "texts-only",
        lambda z: _ce(z.T, torch.arange(len(z))),
        "you kept the captions' half only (each column picks "
        "its image): add the images' half, each row picking its caption, and take the mean of the two",
    ),
    ("sum", lambda z: 2 * _symmetric(z), "you added the two halves: CLIP's loss is their mean, (images + texts) / 2"),
    (
        "summed-batch",
        lambda z: len(z) * _symmetric(z),
        "you summed over the batch: average each cross-entropy over "
        "its N rows, so that the loss does not grow with the batch",
    ),
    (
        "all-entries",
        lambda z: -torch.log_softmax(z.double().flatten(), 0).view_as(z).diagonal().mean(),
        "you took one softmax over all N x N entries: each row (an image over the captions) and each column (a caption "
        "over the images) is a softmax of its own",
    ),
    (
        "sigmoid",
        lambda z: F.binary_cross_entropy_with_logits(z.double(), torch.eye(len(z), dtype=torch.double)),
        "you scored each pair on its own with a sigmoid (SigLIP's loss): CLIP's is a softmax cross-entropy over each "
        "row and each column, the matching pair being the label",
    ),
    (
        "labels-zero",
        lambda z: (_ce(z, torch.zeros(len(z), dtype=torch.long)) + _ce(z.T, torch.zeros(len(z), dtype=torch.long))) / 2,
        "every row and column was labelled 0: image i goes with caption i, so the labels are 0, 1, ..., N - 1",
    ),
)


@checker
def check_contrastive_loss(fn: Callable) -> str:
    """fn(logits (N, N), image i's similarity to caption j) -> CLIP's symmetric contrastive loss, a number: the mean
    of the images' cross-entropy over the captions and the captions' over the images, label i for row and column i;
    by hand (F.cross_entropy allowed, tl.clip.clip_loss not)."""
    cases = [
        (_logits(*case), f"a batch of {case[0]} pairs, logits up to {case[1]:g}, {case[2]}") for case in _LOSS_CASES
    ]
    wants = [float(_symmetric(z)) for z, _ in cases]
    gots = []
    for z, name in cases:
        got = run(fn, z.clone(), case=name, forbidden=(clip.clip_loss,), names=_LOSS_LIBRARY)
        value = number(got)
        if value is None:
            shape = f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""
            raise Wrong("not-a-number", f"On {name} you returned a {type(got).__name__}{shape}: return the loss, one "
                        "number (a float or a one-element tensor).")  # fmt: skip
        gots.append(value)
    if all(math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-6) for got, want in zip(gots, wants)):
        return CORRECT
    first = next(i for i, (g, w) in enumerate(zip(gots, wants)) if not math.isclose(g, w, rel_tol=1e-4, abs_tol=1e-6))
    on = f"On {cases[first][1]} expected {wants[first]:.5f}, got {gots[first]:.5g}"
    for mistake, wrong, hint in _LOSS_MISTAKES:  # named only when the answer follows the mistake on every batch
        if all(math.isclose(got, float(wrong(z)), rel_tol=1e-4, abs_tol=1e-6) for got, (z, _) in zip(gots, cases)):
            return no(mistake, f"{on}: {hint}.")
    if len({round(g, 6) for g in gots}) == 1:
        return no("constant", f"{on}: you returned {gots[0]:g} for every batch; compute it from the logits given.")
    return no("other", f"{on}: label row i and column i with i; the loss is (cross-entropy over the rows + "
              "cross-entropy over the columns) / 2, each averaged over the batch.")  # fmt: skip


# ---- how much survives the codec (experiment) ---------------------------------------------------------------------

# (codebooks n, clips, seed): the first codebook alone, two, and all four, on fresh clips from seeds the chapter
# does not use
_SHARE_CASES = ((1, 16, 5), (2, 16, 8), (4, 12, 3), (3, 10, 21))


@torch.no_grad()
def _read_back(model, n, clips, seed, *, through=True, per_key=False, count=False) -> float:
    """The reference (defaults) and its mistakes: the share of clips whose keys the Goertzel decoder reads back
    from what the first n codebooks rebuild."""
    samples, keys = codec_clips(clips, seed)  # (clips, 4000), the keys dialled
    rebuilt = model.decode(model.encode(samples, n)) if through else samples  # (clips, 4000)
    read = dtmf_decode(rebuilt, sampling_rate=CODEC_RATE, frame=100, hop=40)
    if per_key:  # the share of keys right, place by place
        right = sum(sum(a == b for a, b in zip(r, k)) for r, k in zip(read, keys))
        return right / sum(len(k) for k in keys)
    right = sum(r == k for r, k in zip(read, keys))
    return float(right) if count else right / clips


def _share_mistakes(model) -> tuple[tuple[str, Callable, str], ...]:
    k = model.quantizer.num_quantizers
    return (
        (
            "all-codebooks",
            lambda n, c, s: _read_back(model, k, c, s),
            f"you decoded all {k} codebooks whatever n was: encode with the first n only, model.encode(samples, n)",
        ),
        (
            "first-codebook",
            lambda n, c, s: _read_back(model, 1, c, s),
            "you decoded the first codebook alone whatever n was: encode with the first n, model.encode(samples, n)",
        ),
        (
            "not-through-the-codec",
            lambda n, c, s: _read_back(model, n, c, s, through=False),
            "you read back the "
            "clips themselves: read back what the codec rebuilds, model.decode(model.encode(samples, n))",
        ),
        (
            "per-key",
            lambda n, c, s: _read_back(model, n, c, s, per_key=True),
            "you counted keys right place by "
            "place: count whole clips, a clip being right when every key read back is the key dialled",
        ),
        (
            "count",
            lambda n, c, s: _read_back(model, n, c, s, count=True),
            "you returned how many clips were read back right: return their share, a number from 0 to 1",
        ),
    )


@checker
def check_read_back_share(fn: Callable) -> str:
    """fn(model, n, clips, seed) -> the share of `clips` clips (tl.recipes.codec_clips(clips, seed)) whose keys
    tl.speech.dtmf_decode (at CODEC_RATE, frame=100, hop=40) reads back exactly from model.decode(model.encode(
    samples, n)): measured on the chapter's codec, on settings the learner has not seen."""
    from ..checkpoints import load_checkpoint

    model, _ = load_checkpoint("touch_tone_codec")
    names = [f"n={n}, clips={c}, seed={s}" for n, c, s in _SHARE_CASES]
    with one_thread():
        wants = [_read_back(model, *case) for case in _SHARE_CASES]
        results = [run(fn, model, *case, case=name) for case, name in zip(_SHARE_CASES, names)]
        for result, name in zip(results, names):
            if isinstance(result, (str, bytes, bool)):
                raise Wrong("not-a-number", f"On {name} you returned {result!r:.40}: return the share as a float.")
        gots = measure("the share of clips read back", *results)
        # one clip either way: a reconstruction summed in another order can flip one borderline clip
        close = [abs(got - want) <= 1.01 / case[1] for got, want, case in zip(gots, wants, _SHARE_CASES)]
        if all(close):
            n, c, s = _SHARE_CASES[0]
            reproducible(fn, gots[0], (model, n, c, s), (model, n, c, s + 1), case=names[0],
                         what="the share of clips read back", draw="draw the clips")  # fmt: skip
            return CORRECT
        first = close.index(False)
        on = f"On {names[first]} expected {wants[first]:.3f}, got {gots[first]:.4g}"
        if len(set(gots)) == 1 and gots[0] == 1:  # what all four codebooks, or the clips themselves, give
            hint = (
                "every clip read back in every setting, as the clips themselves or all four codebooks give: rebuild "
                "through the first n codebooks only, model.decode(model.encode(samples, n))"
            )
            return no("ignores-n", f"{on}: {hint}.")
        if len(set(gots)) == 1:
            return no("constant", f"{on}: you returned {gots[0]:g} in every setting; measure it in the setting given.")
        for mistake, wrong, hint in _share_mistakes(model):  # named only when the answer follows it everywhere
            if all(abs(got - wrong(*case)) <= 1.01 / case[1] for got, case in zip(gots, _SHARE_CASES)):
                return no(mistake, f"{on}: {hint}.")
    if any(not 0 <= got <= 1 for got in gots):
        return no("not-a-share", f"{on}: a share of clips lies between 0 and 1.")
    hint = (
        "draw the clips with tl.recipes.codec_clips(clips, seed), rebuild them with model.decode(model.encode("
        "samples, n)), read them with tl.speech.dtmf_decode(rebuilt, sampling_rate=tl.recipes.CODEC_RATE, "
        "frame=100, hop=40), and return the share of clips whose keys equal the keys dialled"
    )
    return no("other", f"{on}: {hint}.")
