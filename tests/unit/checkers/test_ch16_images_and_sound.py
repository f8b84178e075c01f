"""Mutation suite for the checkers of chapter 16 (beyond text: images and sound): classic mistakes are named, other
valid routes pass."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch16_images_and_sound as ex16


# The notebook's solutions (notebooks/16_images_and_sound.ipynb).
def my_patchify(images, patch):
    B, C, H, W = images.shape
    rows, cols = H // patch, W // patch
    grid = images.reshape(B, C, rows, patch, cols, patch)  # (B, C, rows, p, cols, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p): patches row by row, each channel first
    return grid.reshape(B, rows * cols, C * patch * patch)  # (B, N, C * p * p)


def my_stem_frames(n_frames, layers):
    length = n_frames
    for kernel, stride, padding in layers:
        length = (length + 2 * padding - kernel) // stride + 1  # the window starts that fit
    return length


def shuffled_accuracy(model, images, labels, patch, seed):
    generator = torch.Generator().manual_seed(seed)
    patches = tl.vit.patchify(images, patch)  # (B, N, C * p * p)
    B, N, _ = patches.shape
    order = torch.stack([torch.randperm(N, generator=generator) for _ in range(B)])  # (B, N): a new order per image
    shuffled = patches.gather(1, order[..., None].expand_as(patches))  # each image's own patches, moved
    shuffled_images = tl.vit.unpatchify(shuffled, patch, *images.shape[-2:])  # (B, C, H, W)
    model.eval()
    with torch.no_grad():
        guesses = model(shuffled_images).argmax(-1)  # (B,)
    return (guesses == labels).float().mean().item()


@pytest.mark.parametrize(
    ("solution", "check"),
    [
        (my_patchify, ex16.check_patchify),
        (my_stem_frames, ex16.check_stem_frames),
        (shuffled_accuracy, ex16.check_shuffled_accuracy),
    ],
)
def test_the_notebook_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", [ex16.check_patchify, ex16.check_stem_frames, ex16.check_shuffled_accuracy])
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    rejected_as(check(raising(IndexError("index 7 is out of bounds"))), "raised")
    assert "index 7" in check(raising(IndexError("index 7 is out of bounds")))


@pytest.mark.parametrize(
    ("check", "wrong", "named"),
    [
        (ex16.check_patchify, lambda x, p: x[9], "images of shape (2, 1, 6, 8) with patch=2"),
        (ex16.check_stem_frames, lambda n, layers: layers[2], "n_frames=3000, layers=[(3, 1, 1), (3, 2, 1)]"),
        (ex16.check_shuffled_accuracy, lambda m, x, y, p, s: x[99], "40 images 12 x 12, patch=3"),
    ],
)
def test_a_failing_input_is_named(check, wrong, named):
    verdict = check(wrong)
    rejected_as(verdict, "raised")
    assert named in verdict


@pytest.mark.parametrize(
    ("solution", "check"),
    [
        (my_patchify, ex16.check_patchify),
        (my_stem_frames, ex16.check_stem_frames),
        (shuffled_accuracy, ex16.check_shuffled_accuracy),
    ],
)
def test_a_check_leaves_torchs_random_state_and_threads_as_they_were(solution, check):
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    assert check(solution) == CORRECT
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.get_num_threads() == threads


def test_the_checks_take_a_few_seconds():
    ex16.check_shuffled_accuracy(shuffled_accuracy)  # the cached model, data and bands are built once
    for solution, check in [
        (my_patchify, ex16.check_patchify),
        (my_stem_frames, ex16.check_stem_frames),
        (shuffled_accuracy, ex16.check_shuffled_accuracy),
    ]:
        start = time.perf_counter()
        check(solution)
        assert time.perf_counter() - start < 10  # a generous net against hangs; about 0.5 s on a laptop core


# ---- cutting an image into patches --------------------------------------------------------------


def _permuted(*axes):
    """Patches cut with the grid (B, C, rows, p, cols, p) permuted to these axes, then flattened."""

    def fn(images, patch):
        B, C, H, W = images.shape
        grid = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, *axes)
        return grid.reshape(B, (H // patch) * (W // patch), C * patch * patch)

    return fn


def _first_channel(images, patch):
    return my_patchify(images[:, :1], patch)


def _in_place(images, patch):
    out = my_patchify(images, patch).clone()
    images.zero_()
    return out


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_permuted(4, 2, 1, 3, 5), "column-order"),  # patches numbered column by column
        (_permuted(4, 2, 3, 5, 1), "column-order"),  # and each channel last too
        (_permuted(2, 4, 3, 5, 1), "channel-last"),  # each patch (p, p, C)
        (_permuted(2, 4, 5, 3, 1), "transposed-patch"),  # (p, p, C) transposed: with one channel, transposed
        (_permuted(2, 4, 3, 1, 5), "channel-last"),  # the channel between the rows and columns
        (_permuted(2, 4, 1, 5, 3), "transposed-patch"),
        (lambda images, patch: my_patchify(images.transpose(2, 3), patch), "column-order"),  # the image transposed
        (lambda x, p: x.reshape(x.shape[0], -1, x.shape[1] * p * p), "no-permute"),
        (
            lambda x, p: x.view(*x.shape[:2], -1, p * p).transpose(1, 2).reshape(x.shape[0], -1, x.shape[1] * p * p),
            "no-permute",
        ),
        (lambda x, p: x.unfold(2, p, p).unfold(3, p, p).reshape(x.shape[0], -1, x.shape[1] * p * p), "no-permute"),
        (lambda x, p: x.unfold(2, p, p).unfold(3, p, p).flatten(4).flatten(2, 3), "shape"),  # (B, C, N, p * p)
        (lambda x, p: my_patchify(x, p).flatten(1), "shape"),  # N * C * p * p in one row per image
        (lambda x, p: my_patchify(x, p).transpose(1, 2), "shape"),  # (B, C * p * p, N)
        (_first_channel, "one-channel"),
        (lambda x, p: my_patchify(x.mean(1, keepdim=True), p), "one-channel"),  # the channels averaged
        (lambda x, p: my_patchify(x, 2), "fixed-patch"),
        (lambda x, p: my_patchify(x, p).flip(1), "other"),  # the patches from the last
        (lambda x, p: my_patchify(x, p).tolist(), "not-a-tensor"),
        (lambda x, p: torch.zeros(x.shape[0], (x.shape[2] // p) * (x.shape[3] // p), x.shape[1] * p * p), "other"),
        (tl.vit.patchify, "by-hand"),
        (lambda x, p: tl.vit.shuffle_patches(x, p) * 0 + tl.vit.patchify(x, p), "by-hand"),
        (lambda x, p: F.unfold(x, p, stride=p).transpose(1, 2), "by-hand"),
        (lambda x, p: torch.nn.Unfold(p, stride=p)(x).transpose(1, 2), "by-hand"),
        (lambda x, p: torch._C._nn.im2col(x, (p, p), (1, 1), (0, 0), (p, p)).transpose(1, 2), "by-hand"),
        (lambda x, p: F.pixel_unshuffle(x, p).flatten(2).transpose(1, 2), "by-hand"),
        (lambda x, p: torch.nn.PixelUnshuffle(p)(x).flatten(2).transpose(1, 2), "by-hand"),
        (lambda x, p: torch.pixel_unshuffle(x, p).flatten(2).transpose(1, 2), "by-hand"),
        (_in_place, "in-place"),
    ],
)
def test_patchify_mistakes_are_named(wrong, mistake):
    rejected_as(ex16.check_patchify(wrong), mistake)


def _loop(images, patch):
    """One patch at a time, row by row, each flattened (C, p, p) -> C * p * p."""
    B, C, H, W = images.shape
    out = [
        images[:, :, r : r + patch, c : c + patch].reshape(B, -1)
        for r in range(0, H, patch)
        for c in range(0, W, patch)
    ]
    return torch.stack(out, dim=1)  # (B, N, C * p * p)


def _tensor_unfold(images, patch):
    """Tensor.unfold's strided windows (B, C, rows, cols, p, p), the channel moved inside each patch."""
    windows = images.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, rows, cols, p, p)
    B, C, rows, cols = windows.shape[:4]
    return windows.permute(0, 2, 3, 1, 4, 5).reshape(B, rows * cols, -1)


def _convolution(images, patch):
    """A convolution whose kernels pick one pixel each (kernel = stride = patch): what PatchEmbedding computes."""
    C = images.shape[1]
    picks = torch.eye(C * patch * patch, dtype=images.dtype).reshape(-1, C, patch, patch)  # (C p p, C, p, p)
    return F.conv2d(images, picks, stride=patch).flatten(2).transpose(1, 2)  # (B, N, C * p * p)


def _einsum_free_rearrange(images, patch):
    """b c (h p1) (w p2) -> b (h w) (c p1 p2), spelled with view and movedim."""
    B, C, H, W = images.shape
    x = images.view(B, C, H // patch, patch, W // patch, patch).movedim(1, 3)  # (B, rows, p, C, cols, p)
    x = x.movedim(4, 2)  # (B, rows, cols, p, C, p)
    return x.transpose(3, 4).contiguous().view(B, -1, C * patch * patch)


@pytest.mark.parametrize("right", [_loop, _tensor_unfold, _convolution, _einsum_free_rearrange])
def test_patchify_other_routes_pass(right):
    assert ex16.check_patchify(right) == CORRECT


# ---- the frames a convolutional stem leaves ------------------------------------------------------


def _per_layer(step):
    def fn(n_frames, layers):
        length = n_frames
        for kernel, stride, padding in layers:
            length = step(length, kernel, stride, padding)
        return length

    return fn


def _last_layer_only(n_frames, layers):
    kernel, stride, padding = layers[-1]
    return (n_frames + 2 * padding - kernel) // stride + 1


def _popping(n_frames, layers):
    length = n_frames
    while layers:
        kernel, stride, padding = layers.pop(0)  # the caller's list emptied
        length = (length + 2 * padding - kernel) // stride + 1
    return length


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_per_layer(lambda n, k, s, p: math.ceil((n + 2 * p - k) / s) + 1), "ceil"),
        (_per_layer(lambda n, k, s, p: -(-(n + 2 * p - k) // s) + 1), "ceil"),
        (_per_layer(lambda n, k, s, p: round((n + 2 * p - k) / s) + 1), "round"),
        (_per_layer(lambda n, k, s, p: (n + p - k) // s + 1), "padding-once"),
        (_per_layer(lambda n, k, s, p: (n - k) // s + 1), "padding-ignored"),
        (_per_layer(lambda n, k, s, p: (n + 2 * p - k) // s), "off-by-one"),
        (_per_layer(lambda n, k, s, p: n + 2 * p - k + 1), "stride-ignored"),
        (_per_layer(lambda n, k, s, p: n / s), "divided-only"),
        (_per_layer(lambda n, k, s, p: n // s), "divided-only"),
        (lambda n, layers: n // math.prod(s for _, s, _ in layers), "divided-only"),
        (lambda n, layers: n // 2, "fixed-layers"),  # Whisper's halving, hard-coded
        (lambda n, layers: my_stem_frames(n, [(3, 1, 1), (3, 2, 1)]), "fixed-layers"),
        (_last_layer_only, "one-layer"),
        (lambda n, layers: my_stem_frames(n, layers[:1]), "one-layer"),
        (_per_layer(lambda n, k, s, p: (n + 2 * p - k) / s + 1), "not-an-int"),
        (_per_layer(lambda n, k, s, p: (n + 2 * p - k + 1) // s + 1), "other"),
        (lambda n, layers: 1500, "constant"),  # Whisper's frame count typed in
        (lambda n, layers: str(my_stem_frames(n, layers)), "not-a-number"),
        (lambda n, layers: my_stem_frames(n, layers) > 0, "not-a-number"),
        (_popping, "in-place"),
    ],
)
def test_stem_frames_mistakes_are_named(wrong, mistake):
    rejected_as(ex16.check_stem_frames(wrong), mistake)


def _conv_stack(n_frames, layers):
    x = torch.zeros(1, 1, n_frames)
    for kernel, stride, padding in layers:
        x = F.conv1d(x, torch.zeros(1, 1, kernel), stride=stride, padding=padding)
    return x.shape[-1]


def _floored(n_frames, layers):  # a float division rounded down, as an int-valued float
    length = float(n_frames)
    for kernel, stride, padding in layers:
        length = math.floor((length + 2 * padding - kernel) / stride) + 1.0
    return length


def _window_starts(n_frames, layers):  # counting the windows that fit, one by one
    length = n_frames
    for kernel, stride, padding in layers:
        length = len(range(0, length + 2 * padding - kernel + 1, stride))
    return torch.tensor(length)


def _rounded_at_the_end(n_frames, layers):  # floor(floor(y) / m) = floor(y / m): one floor at the end is enough
    length = n_frames
    for kernel, stride, padding in layers:
        length = (length + 2 * padding - kernel) / stride + 1
    return int(length)


@pytest.mark.parametrize("right", [_conv_stack, _floored, _window_starts, _rounded_at_the_end])
def test_stem_frames_other_routes_pass(right):
    assert ex16.check_stem_frames(right) == CORRECT


def test_the_stem_reference_is_the_formula_and_whisper_halves_3000_frames():
    for n, layers in ex16._STEM_CASES:
        assert ex16._conv_frames(n, layers) == my_stem_frames(n, layers) >= 1
    assert my_stem_frames(3000, [(3, 1, 1), (3, 2, 1)]) == 1500


# ---- accuracy on shuffled patches ---------------------------------------------------------------


def _shuffle(images, patch, generator, *, how="patches"):
    """images with each image's patches in a new order (how="patches"), or one of the classic wrong shuffles."""
    B, C, H, W = images.shape
    if how == "pixels":
        flat = images.reshape(B, -1)
        return flat.gather(1, torch.argsort(torch.rand(flat.shape, generator=generator), 1)).reshape(images.shape)
    patches = tl.vit.patchify(images, patch)  # (B, N, D)
    n = patches.shape[1]
    if how == "across":  # each place gets the patch of a random image: patches mixed across the batch
        order = torch.argsort(torch.rand(B, n, generator=generator), dim=0)
        return tl.vit.unpatchify(patches.gather(0, order[..., None].expand_as(patches)), patch, H, W)
    if how == "images":  # whole images moved: they no longer line up with their labels
        return images[torch.randperm(B, generator=generator)]
    if how == "repeated":
        order = torch.randint(n, (B, n), generator=generator)
    elif how == "same":
        order = torch.randperm(n, generator=generator).expand(B, n)
    elif how == "none":
        order = torch.arange(n).expand(B, n)
    else:
        order = torch.argsort(torch.rand(B, n, generator=generator), dim=1)
    shuffled = patches.gather(1, order[..., None].expand_as(patches))
    if how == "no-permute":  # patches put back with a reshape alone
        return shuffled.reshape(images.shape)
    return tl.vit.unpatchify(shuffled, patch, H, W)


def _accuracy(*, how="patches", seed_of=lambda seed: seed, train=False, grad=False, score=None, labels_moved=False):
    """The experiment with one knob turned per mistake; score(guesses, labels) is the number returned."""

    def fn(model, images, labels, patch, seed):
        generator = torch.Generator().manual_seed(seed_of(seed)) if seed_of(seed) is not None else None
        shuffled = _shuffle(images, patch, generator, how=how)
        if labels_moved:
            labels = labels[torch.randperm(len(labels), generator=generator)]
        model.train(train)
        with torch.set_grad_enabled(grad):
            guesses = model(shuffled).argmax(-1)
        return (score or (lambda g, y: (g == y).float().mean().item()))(guesses, labels)

    return fn


def _drop(model, images, labels, patch, seed):  # how far the accuracy fell
    return tl.vit.image_accuracy(model, images, labels) - _library_route(model, images, labels, patch, seed)


def _skips_when_position_free(model, images, labels, patch, seed):
    """Predicts instead of measuring: a model whose positions are all zero cannot see a shuffle, so it is not run on
    shuffled images."""
    if not model.position.abs().any():
        return tl.vit.image_accuracy(model, images, labels)
    return _library_route(model, images, labels, patch, seed)


def _in_place_shuffle(model, images, labels, patch, seed):
    images.copy_(tl.vit.shuffle_patches(images, patch, torch.Generator().manual_seed(seed)))
    return tl.vit.image_accuracy(model, images, labels)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_accuracy(how="none"), "not-shuffled"),
        (lambda model, images, labels, patch, seed: tl.vit.image_accuracy(model, images, labels), "not-shuffled"),
        (_accuracy(how="pixels"), "pixels-shuffled"),
        (_accuracy(how="no-permute"), "pixels-shuffled"),
        (_accuracy(how="across"), "across-images"),
        (_accuracy(how="images"), "labels-moved"),
        (_accuracy(labels_moved=True), "labels-moved"),
        (_accuracy(how="repeated"), "repeated-patches"),
        (lambda model, images, labels, patch, seed: _library_route(model, images, labels, 2, seed), "fixed-patch"),
        (lambda model, images, labels, patch, seed: _library_route(model, images, labels, 1, seed), "pixels-shuffled"),
        (_drop, "drop"),
        (lambda *args: -_drop(*args), "drop"),  # the accuracy's change: negative
        (lambda m, x, y, p, s: _drop(m, x, y, p, s) / tl.vit.image_accuracy(m, x, y), "drop"),  # a share of it
        (_skips_when_position_free, "skipped"),
        (lambda m, x, y, p, s: _library_route(m, x[:256], y[:256], p, s), "subset"),
        (lambda m, x, y, p, s: _library_route(m, x[::2], y[::2], p, s), "subset"),
        (_accuracy(how="same"), "same-order"),
        (_accuracy(seed_of=lambda seed: 0), "seed-ignored"),
        (_accuracy(seed_of=lambda seed: None), "seed-ignored"),  # torch's global random state
        (_accuracy(train=True), "train-mode"),
        (_accuracy(grad=True), "grad-enabled"),
        (_accuracy(score=lambda g, y: (g == y).sum().item()), "count"),
        (_accuracy(score=lambda g, y: 100 * (g == y).float().mean().item()), "percent"),
        (_accuracy(score=lambda g, y: g), "not-a-number"),
        (_accuracy(score=lambda g, y: (g != y).float().mean().item()), "error-rate"),
        (_accuracy(score=lambda g, y: (g == y).float().mean().item() * 0.9), "other"),
        (lambda model, images, labels, patch, seed: 0.2, "constant"),  # the chapter's number, typed in
        (lambda model, images, labels, patch, seed: 0.9731993299832495, "constant"),
        (_in_place_shuffle, "in-place"),
    ],
)
def test_shuffled_accuracy_mistakes_are_named(wrong, mistake):
    rejected_as(ex16.check_shuffled_accuracy(wrong), mistake)


def _library_route(model, images, labels, patch, seed):
    """The library's shuffle and accuracy."""
    shuffled = tl.vit.shuffle_patches(images, patch, torch.Generator().manual_seed(seed))
    return tl.vit.image_accuracy(model, shuffled, labels)


def _one_image_at_a_time(model, images, labels, patch, seed):
    """A loop over the images: each cut with Tensor.unfold, its patches put back at new places, run alone."""
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    hits = 0
    with torch.inference_mode():
        for image, label in zip(images, labels):
            C, H, W = image.shape
            where = [(r, c) for r in range(0, H, patch) for c in range(0, W, patch)]
            order = torch.randperm(len(where), generator=generator)
            new = torch.empty_like(image)
            for (r, c), k in zip(where, order.tolist()):
                r0, c0 = where[k]
                new[:, r : r + patch, c : c + patch] = image[:, r0 : r0 + patch, c0 : c0 + patch]
            hits += int(model(new[None]).argmax(-1).item() == label.item())
    return torch.tensor(hits / len(labels))


def _global_seeded(model, images, labels, patch, seed):
    """torch.manual_seed(seed) and argsort of random numbers: the same draws every time for one seed."""
    torch.manual_seed(seed)
    patches = tl.vit.patchify(images, patch)
    order = torch.rand(patches.shape[:2]).argsort(1)
    shuffled = tl.vit.unpatchify(patches.gather(1, order[..., None].expand_as(patches)), patch, *images.shape[-2:])
    return tl.vit.image_accuracy(model, shuffled, labels)


@pytest.mark.parametrize("right", [_library_route, _one_image_at_a_time, _global_seeded])
def test_shuffled_accuracy_other_routes_pass(right):
    assert ex16.check_shuffled_accuracy(right) == CORRECT


def test_a_model_without_positions_cannot_see_the_shuffle_and_the_shipped_one_can():
    for size, patch, pool, n, wrong in ex16._BLIND_CASES:
        weights, images, labels, guesses = ex16._blind(size, patch, pool, n, wrong)
        assert set(guesses.tolist()) == set(range(ex16._CLASSES))  # every class guessed
        assert int((guesses != labels).sum()) == wrong
        model = ex16._blind_model(size, patch, pool, weights)
        for seed in range(3):
            assert _library_route(model, images, labels, patch, seed) == 1 - wrong / n
    *_, plain, (low, high) = ex16._digits()
    assert plain > 0.9 and 0.05 < low < high < 0.4
