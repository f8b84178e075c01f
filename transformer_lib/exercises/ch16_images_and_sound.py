"""Checkers for the exercises of the chapter "Beyond text: images and sound" (a ViT on the digits, sound as frames)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .. import vit
from ..vit import VisionTransformer, vit_config
from ._common import CORRECT, Verdict, Wrong, _seeded, aten_ops, checker, measure, no, one_thread, refusing, run
from ._match import _shape, expect_tensor, same, spot

__all__ = ["check_patchify", "check_stem_frames", "check_shuffled_accuracy"]

# ---- cutting an image into patches (by hand) ------------------------------------------------------

_PATCH_LIBRARY = "tl.vit.patchify, tl.vit.unpatchify, F.unfold (nn.Unfold) or F.pixel_unshuffle (nn.PixelUnshuffle)"
# the native ops under F.unfold, nn.Unfold, F.pixel_unshuffle and nn.PixelUnshuffle, however they are called;
# Tensor.unfold (a strided view of the image, aten.unfold) is allowed: the learner still orders the patches
_CUTTERS = aten_ops("im2col", "pixel_unshuffle")
# (B, C, H, W, patch): one channel and three, never square, patch sizes 2, 3 and 4, grids of 3 x 4 to 2 x 5
_PATCH_CASES = ((2, 1, 6, 8, 2), (2, 3, 8, 12, 4), (3, 3, 9, 6, 3), (4, 3, 4, 10, 2), (2, 1, 12, 8, 4))
_OUTER = {(0, 1): "right", (1, 0): "column-order"}  # the grid's axes (rows, cols) in the order the patches run
_INNER = ((0, 1, 2), (0, 2, 1), (1, 2, 0), (2, 1, 0), (1, 0, 2), (2, 0, 1))  # (C, row in patch, col in patch)
_PATCH_HINTS = {
    "column-order": "your patches run column by column: number them row by row, the top row of patches first, "
    "left to right (the grid's axes in the order (rows, cols)).",
    "channel-last": "each patch must be flattened channel first, then its rows, then its columns, as a "
    "convolution's kernel (out, C, p, p) is: permute the grid to (B, rows, cols, C, p, p) before flattening.",
    "transposed-patch": "each patch comes out transposed: flatten it row by row (the patch's row axis before its "
    "column axis).",
    "no-permute": "a reshape alone keeps the pixels in reading order, so one 'patch' holds pieces of several "
    "patches: reshape to (B, C, rows, p, cols, p), permute to (B, rows, cols, C, p, p), then reshape.",
}


def _grid(images: torch.Tensor, patch: int) -> torch.Tensor:
    """images (B, C, H, W) -> (B, C, rows, p, cols, p)."""
    b, c, h, w = images.shape
    return images.reshape(b, c, h // patch, patch, w // patch, patch)


def _patch_mistakes(images: torch.Tensor, patch: int):
    """(result, id, hint) of each classic way to cut images wrongly: the patches in another order, their pixels
    in another order, or no permute at all."""
    b, c, h, w = images.shape
    n, d = (h // patch) * (w // patch), c * patch * patch
    grid = _grid(images, patch)  # (B, C, rows, p, cols, p): axes 2, 4 the grid, 1, 3, 5 inside a patch
    for outer, name in _OUTER.items():
        for inner in _INNER:
            if name == "right" and inner == (0, 1, 2):
                continue
            axes = [(2, 4)[i] for i in outer] + [(1, 3, 5)[i] for i in inner]
            mistake = name  # the patches in another order; else in their places, each flattened in another order
            if name == "right":
                mistake = "channel-last" if inner[0] != 0 else "transposed-patch"
            hint = _PATCH_HINTS[mistake]
            if mistake == "channel-last" and inner.index(2) < inner.index(1):  # its columns before its rows
                hint += " Each patch also comes out transposed: its rows go before its columns."
            yield grid.permute(0, *axes).reshape(b, n, d), mistake, hint
    yield images.reshape(b, n, d), "no-permute", _PATCH_HINTS["no-permute"]
    by_channel = images.reshape(b, c, n, patch * patch).transpose(1, 2)  # (B, N, C, p * p): p * p in reading order
    yield by_channel.reshape(b, n, d), "no-permute", _PATCH_HINTS["no-permute"]
    unfolded = images.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, rows, cols, p, p)
    yield unfolded.reshape(b, n, d), "no-permute", _PATCH_HINTS["no-permute"]


def _patch_shape(got: torch.Tensor, images: torch.Tensor, patch: int, case: str) -> None:
    """Raise the verdict for a tensor of the wrong shape, naming the shapes of classic mistakes."""
    b, c, h, w = images.shape
    rows, cols = h // patch, w // patch
    n, want = rows * cols, (b, rows * cols, c * patch * patch)
    shape = tuple(got.shape)
    if shape == want:
        return
    if c > 1 and shape == (b, n, patch * patch):
        hint = f"each patch holds all {c} channels: {c} * {patch} * {patch} = {c * patch * patch} numbers"
        raise Wrong("one-channel", f"On {case} your patches have {patch * patch} numbers each: {hint}.")
    if shape in {(b, c, n, patch * patch), (b, c, rows, cols, patch * patch), (b, rows, cols, c * patch * patch)}:
        hint = "the channels go inside each patch and the grid is flattened into N"
        raise Wrong("shape", f"On {case} expected shape (B, N, C * p * p) = {want}, got {shape}: {hint}.")
    for other in {2, 3, 4} - {patch}:
        if h % other == 0 and w % other == 0 and shape == (b, (h // other) * (w // other), c * other * other):
            hint = f"patches of {other} x {other}, not the patch size {patch} you were given"
            raise Wrong("fixed-patch", f"On {case} your shape {shape} is that of {hint}: read `patch`.")
    raise Wrong("shape", f"On {case} expected shape (B, N, C * p * p) = {want}, got {_shape(got)}.")


@checker
def check_patchify(fn: Callable) -> str:
    """fn(images (B, C, H, W), patch) -> patches (B, N, C * patch * patch), row by row, each channel first; by hand."""
    g = _seeded(16)
    guarded = refusing(fn, F.unfold, F.pixel_unshuffle, ops=_CUTTERS)
    forbidden = (vit.patchify, vit.unpatchify)
    for b, c, h, w, patch in _PATCH_CASES:
        images = torch.randn(b, c, h, w, generator=g)
        case = f"images of shape {(b, c, h, w)} with patch={patch}"
        want = vit.patchify(images, patch)  # (B, N, C * p * p), computed before the library is refused
        got = run(guarded, images.clone(), patch, case=case, forbidden=forbidden, names=_PATCH_LIBRARY)
        if not isinstance(got, torch.Tensor):
            expect_tensor(got, want, case)
        _patch_shape(got, images, patch, case)
        if same(got, want, atol=1e-6):
            continue
        spot(got, want, _patch_mistakes(images, patch), atol=1e-6)
        hint = "patch k is the k-th in reading order; its numbers are channel 0's rows, then channel 1's, ..."
        return no("other", f"Wrong values on {case}: {hint} Compare yours with a loop over the patches.")
    return CORRECT


# ---- the frames a convolutional stem leaves (Whisper's) -------------------------------------------

# (n_frames, layers of (kernel, stride, padding)): Whisper's stem on 30 s of audio and on an odd count, one layer,
# three layers, a stride-1 layer that lengthens the input, strides 1 to 3, paddings 0 to 2, kernels 1 to 5
_STEM_CASES = (
    (3000, ((3, 1, 1), (3, 2, 1))),
    (1001, ((3, 1, 1), (3, 2, 1))),
    (7, ((5, 3, 0),)),
    (97, ((2, 2, 0), (3, 3, 2), (5, 1, 2))),
    (16000, ((5, 3, 2), (3, 2, 0), (4, 2, 1))),
    (50, ((4, 1, 2),)),
    (10, ((3, 3, 1), (2, 1, 0), (1, 2, 0))),
    (45, ((4, 3, 2), (5, 2, 1))),
)


def _conv_frames(n_frames: int, layers) -> int:
    """The length nn.Conv1d layers leave, run on shape-only (meta) tensors: an independent reference."""
    x = torch.zeros(1, 1, n_frames, device="meta")
    for kernel, stride, padding in layers:
        x = nn.Conv1d(1, 1, kernel, stride=stride, padding=padding, device="meta")(x)
    return x.shape[-1]


def _chain(step: Callable[[float, int, int, int], float]) -> Callable:
    """A frame count applying `step`(length, kernel, stride, padding) layer after layer."""

    def frames(n_frames: int, layers) -> float:
        length = n_frames
        for kernel, stride, padding in layers:
            length = step(length, kernel, stride, padding)
        return length

    return frames


# each classic mistake, as the frame counts it gives; several ways to make one mistake share its id
_STEM_MISTAKES = (
    ("ceil", _chain(lambda n, k, s, p: math.ceil((n + 2 * p - k) / s) + 1)),
    ("round", _chain(lambda n, k, s, p: round((n + 2 * p - k) / s) + 1)),
    ("padding-once", _chain(lambda n, k, s, p: (n + p - k) // s + 1)),
    ("padding-ignored", _chain(lambda n, k, s, p: (n - k) // s + 1)),
    ("off-by-one", _chain(lambda n, k, s, p: (n + 2 * p - k) // s)),
    ("off-by-one", _chain(lambda n, k, s, p: (n + 2 * p - k) // s + 2)),
    ("stride-ignored", _chain(lambda n, k, s, p: n + 2 * p - k + 1)),
    ("divided-only", _chain(lambda n, k, s, p: n / s)),
    ("divided-only", _chain(lambda n, k, s, p: n // s)),
    ("divided-only", _chain(lambda n, k, s, p: math.ceil(n / s))),
    ("one-layer", lambda n, layers: _conv_frames(n, layers[-1:])),
    ("one-layer", lambda n, layers: _conv_frames(n, layers[:1])),
    ("fixed-layers", lambda n, layers: n // 2),
    ("fixed-layers", lambda n, layers: math.ceil(n / 2)),
    ("fixed-layers", lambda n, layers: _conv_frames(n, ((3, 1, 1), (3, 2, 1)))),
)
_STEM_HINTS = {
    "ceil": "you rounded up: a convolution only fits a window where all `kernel` frames are there, so round down, "
    "floor((L + 2 * padding - kernel) / stride) + 1 (// in Python)",
    "round": "you rounded to the nearest whole number: a convolution only fits a window where all `kernel` frames "
    "are there, so round down, floor((L + 2 * padding - kernel) / stride) + 1 (// in Python)",
    "padding-once": "you added the padding once: it is added at both ends, L + 2 * padding",
    "padding-ignored": "you left the padding out: it adds `padding` frames at both ends, L + 2 * padding",
    "off-by-one": "you are one frame off per layer: the count of window starts is floor((L + 2p - k) / s) + 1",
    "stride-ignored": "you left the stride out: each window starts `stride` frames after the last",
    "divided-only": "dividing by the stride is only a shortcut: apply floor((L + 2 * padding - kernel) / stride) + 1 "
    "layer by layer",
    "one-layer": "you applied one layer: every layer shortens (or keeps) what the one before it left, so apply them "
    "all, in order",
    "fixed-layers": "your count does not follow the layers you are given (it looks like Whisper's stem, which halves "
    "3000 frames, hard-coded): read kernel, stride and padding from each layer",
}


def _frames(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:g}"


def _count(got, case: str) -> float:
    """The learner's frame count as a float (an int, an int-valued float or a one-element tensor)."""
    if isinstance(got, (bool, str, bytes)):
        raise Wrong("not-a-number", f"On {case} you returned {got}: return the number of frames, an int.")
    return measure("the number of frames", got)[0]


@checker
def check_stem_frames(fn: Callable) -> str:
    """fn(n_frames, layers of (kernel, stride, padding)) -> the length after these 1-D convolutions, in order."""
    wants = [_conv_frames(n, layers) for n, layers in _STEM_CASES]
    cases = [f"n_frames={n}, layers={[tuple(layer) for layer in layers]}" for n, layers in _STEM_CASES]
    gots = [
        _count(run(fn, n, [tuple(x) for x in layers], case=case), case) for (n, layers), case in zip(_STEM_CASES, cases)
    ]
    if all(math.isclose(got, want) for got, want in zip(gots, wants)):
        return CORRECT
    if len(set(gots)) == 1:
        hint = "compute it from n_frames and the layers you are given"
        return no("constant", f"Your function returns {_frames(gots[0])} for every input: {hint}.")
    first = next(i for i, (got, want) in enumerate(zip(gots, wants)) if not math.isclose(got, want))
    on = f"On {cases[first]} expected {wants[first]}, got {_frames(gots[first])}"
    for mistake, frames in _STEM_MISTAKES:  # named only when the answer follows the mistake on every input
        theirs = [frames(n, layers) for n, layers in _STEM_CASES]
        if all(math.isclose(got, t) for got, t in zip(gots, theirs)):
            return no(mistake, f"{on}: {_STEM_HINTS[mistake]}.")
    if math.isfinite(gots[first]) and gots[first] != int(gots[first]):
        hint = "a number of frames is a whole number: round down with // (or math.floor)"
        return no("not-an-int", f"{on}: {hint}.")
    hint = "each layer leaves floor((L + 2 * padding - kernel) / stride) + 1 frames of the L it is given"
    return no("other", f"{on}: {hint}.")


# ---- accuracy on images whose patches were shuffled (experiment) ------------------------------------


class _Watched(VisionTransformer):
    """A VisionTransformer that notes each call: the images it saw, and (training, gradients enabled)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[torch.Tensor] = []
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.training, torch.is_grad_enabled()))
        self.seen.append(images.detach().cpu().clone())
        return super().forward(images)

    def forget(self) -> _Watched:
        self.seen, self.calls = [], []
        return self


# position-free probes (size, patch, pool, images, wrong labels): a model without positions cannot see where a
# patch is, so its accuracy on shuffled patches is its accuracy on the images as they are (0.75 and 0.8 here)
_BLIND_CASES = ((12, 3, "cls", 40, 10), (8, 4, "mean", 40, 8))
_CLASSES = 5


@functools.cache
def _blind(
    size: int, patch: int, pool: str, n: int, wrong: int
) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random ViT without positions (its weights), n random images (n, 1, size, size), their labels and the
    model's top guesses (n,): every class guessed, each guess ahead of the runner-up by a margin rounding cannot
    cross; the labels are the guesses but for `wrong` of them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(size * 100 + patch)
        model = _blind_model(size, patch, pool, {}).eval()
    pool_images = torch.randn(400, 1, size, size, generator=_seeded(size + patch))
    with torch.no_grad():
        model.head.bias -= model(pool_images).mean(0)  # each class's mean score 0: every class gets guessed
        scores = model(pool_images)  # (400, classes)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    top = scores.topk(2).values  # (400, 2)
    clear, guess = top[:, 0] - top[:, 1] > 0.02, scores.argmax(-1)
    chosen: list[int] = []
    for rank in range(400):  # round-robin over the classes: as many of each as the pool allows
        for cls in range(_CLASSES):
            rows = (clear & (guess == cls)).nonzero()[:, 0]
            if rank < len(rows) and len(chosen) < n:
                chosen.append(int(rows[rank]))
    order = torch.tensor(chosen)[torch.randperm(n, generator=_seeded(n))]
    guesses = guess[order]
    off = torch.randint(1, _CLASSES, (n,), generator=_seeded(wrong)) * (torch.arange(n) < wrong)  # (n,)
    return weights, pool_images[order], (guesses + off) % _CLASSES, guesses


def _blind_model(size: int, patch: int, pool: str, weights: dict) -> _Watched:
    """A ViT without positions, with dropout (so training mode shows), holding these weights (if any)."""
    cfg = vit_config(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.2)
    with torch.random.fork_rng(devices=[]):  # its initial weights, overwritten: torch's random state stays as it was
        model = _Watched(cfg, image_size=size, patch_size=patch, num_classes=_CLASSES, pool=pool, positions=False)
    if weights:
        model.load_state_dict(weights)
    return model


@functools.cache
def _digits() -> tuple[dict, dict, torch.Tensor, torch.Tensor, float, tuple[float, float]]:
    """The shipped digits ViT (its weights and constructor arguments), 300 held-out images and labels, its
    accuracy on them as they are, and the band its accuracy on shuffled patches falls in (16 shuffles of ours)."""
    from ..checkpoints import load_checkpoint

    with torch.random.fork_rng(devices=[]):  # building the model draws its initial weights
        model, _ = load_checkpoint("digits_vit")
    init = dict(config=model.config, image_size=model.image_size, patch_size=model.patch_size, pool=model.pool)
    init["num_classes"] = model.head.out_features
    _, _, test_x, test_y = vit.digits_data()
    rows = torch.randperm(len(test_y), generator=_seeded(597))[:300]
    images, labels = test_x[rows], test_y[rows]
    with torch.inference_mode():
        plain = (model(images).argmax(-1) == labels).double().mean().item()
        shuffled = torch.tensor(
            [
                (model(vit.shuffle_patches(images, model.patch_size, _seeded(1000 + s))).argmax(-1) == labels)
                .double()
                .mean()
                .item()
                for s in range(16)
            ]
        )
    mean, spread = shuffled.mean().item(), max(0.06, 5 * shuffled.std().item())
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    return weights, init, images, labels, plain, (mean - spread, mean + spread)


def _digits_model() -> tuple[_Watched, torch.Tensor, torch.Tensor, float, tuple[float, float]]:
    weights, init, images, labels, plain, band = _digits()
    init = dict(init)
    with torch.random.fork_rng(devices=[]):  # its initial weights, overwritten: torch's random state stays as it was
        model = _Watched(init.pop("config"), **init)
    model.load_state_dict(weights)
    return model, images, labels, plain, band


def _sources(original: torch.Tensor, seen: torch.Tensor, patch: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Where each patch of `seen` (N, C, H, W) came from in `original`: (image, place), each (N, n); None when
    some patch is none of the originals' patches."""
    ps, po = vit.patchify(seen.to(original.dtype), patch), vit.patchify(original, patch)  # (N, n, D) each
    N, n, d = po.shape
    distance, where = torch.cdist(ps.reshape(-1, d).double(), po.reshape(-1, d).double()).min(1)  # (N * n,)
    if (distance > 1e-4).any():
        return None
    return (where // n).view(N, n), (where % n).view(N, n)


def _moved(original: torch.Tensor, seen: torch.Tensor, patch: int) -> bool | Verdict | None:
    """What happened to each image between `original` (N, C, H, W) and what the model saw, `seen` (N, C, H, W):
    True (each image's own patches, in new orders, not one order for all), False (nothing moved), the verdict of
    the mistake seen, or None (the model saw something else)."""
    own = torch.arange(len(original))[:, None]
    found = _sources(original, seen, patch)
    if found is None:  # a patch the originals do not hold: blocks of another size moved, or pixels
        height, width = original.shape[-2:]
        for size in range(2, min(height, width)):
            if size != patch and height % size == 0 and width % size == 0:
                other = _sources(original, seen, size)
                if other is not None and (other[0] == own).all():
                    return _shuffle_verdict("fixed-patch")
        flat_seen, flat = seen.flatten(1).to(original.dtype), original.flatten(1)  # (N, C * H * W) each
        same_pixels = torch.allclose(flat_seen.sort(1).values, flat.sort(1).values)
        return _shuffle_verdict("pixels-shuffled") if same_pixels else None
    image, place = found
    n = place.shape[1]
    if not (image == own).all():
        return _shuffle_verdict("labels-moved" if (image == image[:, :1]).all() else "across-images")
    if any(len(set(row.tolist())) < n for row in place):
        return _shuffle_verdict("repeated-patches")
    if (place == place[:1]).all():  # one order for every image
        return False if (place == torch.arange(n)).all() else _shuffle_verdict("same-order")
    return True


def _what_it_saw(model: _Watched, original: torch.Tensor, patch: int) -> bool | Verdict | None:
    """_moved over the batches of len(original) images the model saw (the last first): True if one is shuffled
    right, else the first mistake's verdict, else False (it saw them unshuffled) or None (it saw no such batch)."""
    n, rows = len(original), _seen(model)
    if rows is None or rows.dim() != 4 or rows.shape[1:] != original.shape[1:]:
        return None
    found = [_moved(original, rows[end - n : end], patch) for end in range(len(rows), n - 1, -n)]
    if any(f is True for f in found):
        return True
    verdicts = [f for f in found if isinstance(f, Verdict)]
    return verdicts[0] if verdicts else (False if any(f is False for f in found) else None)


def _shuffle_verdict(mistake: str) -> Verdict:
    return no(mistake, _SHUFFLE_HINTS[mistake])


_SHUFFLE_HINTS = {
    "pixels-shuffled": "the model saw images whose pixels moved, but not as whole patches (or patches cut and put back "
    "in the wrong layout): move whole patches, e.g. patchify, permute the patch axis, unpatchify.",
    "across-images": "the model saw images made of other images' patches: permute the patches within each image "
    "(the patch axis, dim 1 of (B, N, C * p * p)), never across the batch.",
    "labels-moved": "the images no longer line up with their labels: shuffle the patches inside each image and keep "
    "images and labels in their order.",
    "repeated-patches": "some patches appear twice and others not at all: draw a permutation of the N places "
    "(torch.randperm or argsort of random numbers), not N independent places (torch.randint).",
    "fixed-patch": "the model saw blocks of another size moved: cut patches of the size you are given, `patch`.",
    "same-order": "every image got the same order of patches: draw a new permutation for each image.",
}


def _by_chance(got: float, guesses: torch.Tensor, labels: torch.Tensor) -> bool:
    """got is a share of the images (hits / N) within three standard deviations of what comparing these guesses
    with the labels in a random order gives."""
    n = len(labels)
    counts = (torch.bincount(guesses, minlength=_CLASSES) * torch.bincount(labels, minlength=_CLASSES)).double()
    expected = counts.sum().item() / n  # hits expected: sum over classes of (guesses c) (labels c) / N
    spread = 3 * math.sqrt(expected * (1 - expected / n))
    return abs(got * n - round(got * n)) < 1e-6 and abs(got * n - expected) <= spread


def _scaled(got: float, n: int, fits: Callable[[float], bool], case: str) -> None:
    """Raise the verdict for a number above 1: a count or a percentage of what fits, or out of range."""
    if 0 <= got <= 1:
        return
    if got > 1 and abs(got - round(got)) < 1e-9 and fits(got / n):
        raise Wrong("count", f"On {case} you returned {got:g}, a count of images: divide it by their number, {n}.")
    if got > 1 and fits(got / 100):
        raise Wrong("percent", f"On {case} you returned {got:g}, a percentage: return the fraction, between 0 and 1.")
    raise Wrong("other", f"On {case} you returned {got:g}: an accuracy is a fraction between 0 and 1.")


def _shuffled(fn, model: _Watched, images, labels, patch: int, seed: int, given: str) -> float:
    """fn's accuracy on this model (handed over in training mode, as after training), images, labels and seed."""
    got = run(fn, model.forget().train(), images.clone(), labels.clone(), patch, seed, case=f"{given}, seed={seed}")
    if any(training for training, _ in model.calls):
        raise Wrong("train-mode", "The model ran in training mode, so dropout was on: call model.eval() first.")
    return measure("the accuracy", got)[0]


def _seen(model: _Watched) -> torch.Tensor | None:
    return torch.cat(model.seen) if model.seen else None


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return a is None and b is None or a is not None and b is not None and a.shape == b.shape and torch.equal(a, b)


@checker
def check_shuffled_accuracy(fn: Callable) -> str:
    """Experiment: fn(model, images (N, 1, H, W), labels (N,), patch, seed) -> accuracy with each image's patches
    shuffled, a new order per image, drawn from torch.Generator().manual_seed(seed)."""
    with one_thread():
        return _check_shuffled(fn)


def _check_shuffled(fn: Callable) -> str:
    blind, grads = [], False  # per position-free probe: (model, images, labels, guesses, patch, given, answer)
    for size, patch, pool, n, wrong in _BLIND_CASES:
        weights, images, labels, guesses = _blind(size, patch, pool, n, wrong)
        model = _blind_model(size, patch, pool, weights)
        given = f"{n} images {size} x {size}, patch={patch}, a model without positions (pool={pool!r})"
        got = _shuffled(fn, model, images, labels, patch, 7, given)
        blind.append((model, images, labels, guesses, patch, given, got))
        grads = grads or any(grad for _, grad in model.calls)
    digits, digit_images, digit_labels, plain, band = _digits_model()
    on_digits = f"{len(digit_labels)} held-out digits and the shipped digits ViT (learned positions, patch=2)"
    trained = _shuffled(fn, digits, digit_images, digit_labels, 2, 16, on_digits)
    grads = grads or any(grad for _, grad in digits.calls)
    if len({probe[-1] for probe in blind} | {trained}) == 1:
        hint = "measure it: shuffle, run the model, compare its guesses with the labels"
        return no("constant", f"Your function gives {trained:g} for every model, image and seed: {hint}.")
    digits_saw = _covered(digit_images, _seen(digits))
    for model, images, _, _, _, given, _ in blind:
        _judge_subset(_covered(images, _seen(model)), len(images), f"{given}, seed=7")
    _judge_subset(digits_saw, len(digit_labels), f"{on_digits}, seed=16")
    fell = any(band[0] <= shuffled <= band[1] for shuffled in _if_a_drop(trained, plain))
    _judge_blind(blind, fell=fell, trained=trained, shuffles_digits=digits_saw is not None and digits_saw[1])
    case = f"{on_digits}, seed=16"
    _scaled(trained, len(digit_labels), lambda share: band[0] <= share <= band[1], case)
    if abs(trained - plain) < 0.5 / len(digit_labels):
        hint = f"that is the accuracy on the images as they are ({plain:.3f}): shuffle each image's patches first"
        return no("not-shuffled", f"On {case} you returned {trained:.3f}: {hint}.")
    if not band[0] <= trained <= band[1]:
        hint = "shuffle each image's patches (a new order per image), run the model in eval mode, count the hits"
        return no("other", f"On {case} expected {band[0]:.2f} to {band[1]:.2f}, got {trained:.3f}: {hint}.")
    # the seed: the same seed gives the same shuffles, another seed other shuffles
    model, images, labels, _, patch, given, first = blind[0]
    seen = _seen(model)
    again = _shuffled(fn, model, images, labels, patch, 7, given)
    if again != first or not _same(_seen(model), seen):
        hint = "draw every random number from torch.Generator().manual_seed(seed) (generator=...)"
        return no("seed-ignored", f"The same seed gave two different shuffles: {hint}.")
    _shuffled(fn, model, images, labels, patch, 8, given)
    if _same(_seen(model), seen):  # the same shuffles, or none the model could see: ask the numbers
        others = set()
        for seed in (17, 18):
            digits = _digits_model()[0]
            others.add(_shuffled(fn, digits, digit_images, digit_labels, 2, seed, f"{on_digits}, seed={seed}"))
        if others == {trained}:
            hint = "make the generator from the seed you are given, torch.Generator().manual_seed(seed)"
            return no("seed-ignored", f"Two seeds gave the same shuffles: {hint}.")
    if grads:
        return no("grad-enabled", "Right number, but the model ran with gradients on: use torch.no_grad().")
    return CORRECT


def _covered(original: torch.Tensor, seen: torch.Tensor | None) -> tuple[int, bool, int] | None:
    """What the model saw of `original` (N, C, H, W), told by each image's pixels as a multiset (moving patches keeps
    it): (how many of the images it saw, whether one of them had its pixels moved, how many there are to tell
    apart); None when it saw something else too (images made of other images' patches, other sizes) or nothing."""
    if seen is None or seen.dim() != 4 or seen.shape[1:] != original.shape[1:]:
        return None
    seen = seen.to(original.dtype)
    keys = {row.sort().values.numpy().tobytes(): i for i, row in enumerate(original.flatten(1))}
    found, moved = set(), False
    for row, flat in zip(seen.flatten(1).sort(1).values, seen.flatten(1)):  # (C * H * W,) each
        index = keys.get(row.numpy().tobytes())
        if index is None:
            return None
        found.add(index)
        moved = moved or not torch.equal(flat, original[index].flatten())
    return len(found), moved, len(set(keys.values()))


def _judge_subset(saw: tuple[int, bool, int] | None, n: int, case: str) -> None:
    """Raise "subset" when the model saw only some of the n images it was given."""
    if saw is not None and saw[0] < saw[2]:
        hint = f"the model saw {saw[0]} of the {n} images you were given"
        raise Wrong("subset", f"On {case}: {hint}. Measure the accuracy on all of them, shuffled.")


def _if_a_drop(got: float, plain: float) -> tuple[float, ...]:
    """The accuracies on shuffled digits that `got` would give if it were how far the accuracy fell: by so much, or
    by that share of `plain`, with either sign."""
    drop = abs(got)
    return plain - drop, plain * (1 - drop)


def _judge_blind(blind: list, *, fell: bool, trained: float, shuffles_digits: bool) -> None:
    """Raise the verdict for the answers on the position-free probes: what the model saw, then the numbers, which
    must be the accuracy on the images as they are. `fell`: the digits' answer is how much the accuracy fell;
    `shuffles_digits`: the answer shuffled the digits' patches (so skipping the shuffle here was a choice)."""
    probes = []  # (case, answer, right accuracy, tolerance, shuffled right as far as the model saw, guesses, labels)
    for model, images, labels, guesses, patch, given, got in blind:
        case, n = f"{given}, seed=7", len(labels)
        moved = _what_it_saw(model, images, patch)
        if isinstance(moved, Verdict):
            raise Wrong(moved.mistake, f"On {case}: {moved}")
        right, near = (guesses == labels).double().mean().item(), 1.5 / n  # one image either way: an argmax tie
        _scaled(got, n, functools.partial(math.isclose, right, abs_tol=near), case)
        if moved is False and shuffles_digits and math.isclose(got, right, abs_tol=near):
            hint = "the model without positions saw the images as they are: you returned what theory predicts"
            raise Wrong(
                "skipped",
                f"On {case}: {hint}. Shuffle and measure for every model; the measurement is "
                "the test of the prediction.",
            )
        probes.append((case, got, right, near, moved is True, guesses, labels))
    wrong = [probe for probe in probes if not math.isclose(probe[1], probe[2], abs_tol=probe[3])]
    if not wrong:
        return
    case, got, right, *_ = wrong[0]  # a mistake is named only when every probe shows it
    why = "a model without positions cannot tell where a patch is, so its accuracy on shuffled patches is its "
    why += f"accuracy on the images as they are, here {right:g}"
    if all(math.isclose(answer, 1 - share, abs_tol=near) for _, answer, share, near, *_ in probes):
        hint = "that is the error rate, the share it gets wrong: return the share it gets right"
        raise Wrong("error-rate", f"On {case} you returned {got:g}: {hint} ({why}).")
    if fell and all(math.isclose(answer, 0, abs_tol=near) for _, answer, _, near, *_ in probes):  # nothing fell here
        hint = "how much the accuracy fell: return the accuracy on the shuffled images"
        raise Wrong("drop", f"On {case} you returned {got:g}, and {trained:.3f} on the digits: {hint}.")
    if all(saw and _by_chance(answer, guesses, labels) for _, answer, _, _, saw, guesses, labels in probes):
        hint = "the model saw the right images, but its guesses were compared with labels in another order"
        raise Wrong("labels-moved", f"On {case} you returned {got:g}: {hint} ({why}).")
    raise Wrong("other", f"On {case} you returned {got:g}: {why}.")
