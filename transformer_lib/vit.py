"""Chapter 16's Vision Transformer: an image cut into patches, each patch a token.

The encoder is the book's own, in the pre-LN arrangement with a norm after the last layer. What is new
sits in front of it and after it:

- `patchify` cuts images (B, C, H, W) into flattened patches (B, N, C * p * p), row by row of patches;
  `PatchEmbedding` does the same cut and a linear map at once, as a convolution whose kernel and stride
  are both the patch size (the two are equal: `tests/unit/test_vit.py`).
- A learned class token is put in front of the patches (or, with ``pool="mean"``, the patches' vectors
  are averaged instead), and a learned vector per position is added.
- The head reads the class token's last vector (or the mean) after the final norm.

Around it, what the chapter measures it against and with: `DigitsCNN`, a small convolutional network (the
baseline whose inductive bias ViT lacks); `shift_images` and `random_shifts`, digits moved by whole pixels
(to test that bias, and to train with it as data); `attention_rollout`, the attention of every layer
multiplied through (Abnar and Zuidema, 2020), beside `cls_attention`'s last layer alone.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import watch_weights
from .config import TransformerConfig
from .encoder import Encoder

__all__ = [
    "vit_config",
    "patchify",
    "unpatchify",
    "shuffle_patches",
    "PatchEmbedding",
    "VisionTransformer",
    "POOLS",
    "digits_data",
    "DIGITS_TEST",
    "image_accuracy",
    "cls_attention",
    "mean_attention_distance",
    "attention_rollout",
    "random_shifts",
    "shift_images",
    "DigitsCNN",
]

POOLS = ("cls", "mean")
DIGITS_TEST = 597  # scikit-learn's 1,797 digits: 1,200 to learn from, 597 held out (a third, stratified by class)


def vit_config(**fields) -> TransformerConfig:
    """A TransformerConfig with ViT's choices (pre-LN with a final norm, exact GELU, eps 1e-12), then `fields`.

    An image has no vocabulary: vocab_size is 1 unless `fields` say otherwise (the encoder never reads it)."""
    vit = dict(
        vocab_size=1, norm_first=True, final_norm=True, activation="gelu", eps=1e-12, scale_embedding=False, dropout=0.0
    )
    return TransformerConfig(**(vit | fields))


def _check_images(images: torch.Tensor, patch: int, channels: int | None = None) -> None:
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must be a tensor of shape (B, C, H, W), got {got}")
    if not images.is_floating_point():
        raise ValueError(f"images must hold floats (pixel values), got dtype {images.dtype}")
    _, c, h, w = images.shape
    if channels is not None and c != channels:
        raise ValueError(f"images must have {channels} channel(s), got {c} (shape {tuple(images.shape)})")
    if h % patch or w % patch:
        raise ValueError(f"height and width must be multiples of the patch size {patch}, got {h} x {w}")


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """images (B, C, H, W) -> patches (B, N, C * patch * patch), N = (H / patch) * (W / patch), row by row.

    Each patch is flattened channel first, then its rows: the order of a convolution's kernel (out, C, p, p).
    """
    _check_images(images, patch)
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // patch, patch, w // patch, patch)  # (B, C, rows, p, cols, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return grid.reshape(b, (h // patch) * (w // patch), c * patch * patch)  # (B, N, C * p * p)


def unpatchify(patches: torch.Tensor, patch: int, height: int, width: int) -> torch.Tensor:
    """patches (B, N, C * patch * patch) -> images (B, C, height, width): `patchify` undone."""
    if patches.dim() != 3 or patches.shape[-1] % (patch * patch):
        raise ValueError(f"patches must be (B, N, C * {patch} * {patch}), got {tuple(patches.shape)}")
    b, n, flat = patches.shape
    rows, cols, c = height // patch, width // patch, flat // (patch * patch)
    if rows * cols != n or height % patch or width % patch:
        raise ValueError(f"{n} patches of {patch} x {patch} do not tile a {height} x {width} image")
    grid = patches.reshape(b, rows, cols, c, patch, patch).permute(0, 3, 1, 4, 2, 5)  # (B, C, rows, p, cols, p)
    return grid.reshape(b, c, height, width)


def shuffle_patches(images: torch.Tensor, patch: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """images (B, C, H, W) with each image's patches moved to new places, a different order per image."""
    patches = patchify(images, patch)  # (B, N, C * p * p)
    b, n, _ = patches.shape
    order = torch.argsort(torch.rand(b, n, generator=generator), dim=1)  # (B, N): a random permutation per row
    shuffled = patches.gather(1, order[..., None].expand_as(patches))  # (B, N, C * p * p)
    return unpatchify(shuffled, patch, *images.shape[-2:])


class PatchEmbedding(nn.Module):
    """images (B, C, H, W) -> one vector per patch (B, N, d_model): a convolution with kernel = stride = patch."""

    def __init__(self, channels: int, d_model: int, patch: int, bias: bool = True):
        super().__init__()
        self.patch, self.channels = patch, channels
        self.projection = nn.Conv2d(channels, d_model, kernel_size=patch, stride=patch, bias=bias)  # CLIP's: no bias

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, N, d_model): one vector per patch, patches row by row."""
        _check_images(images, self.patch, self.channels)
        return self.projection(images).flatten(2).transpose(1, 2)  # (B, d, rows, cols) -> (B, N, d)


class VisionTransformer(nn.Module):
    """images (B, C, H, W) -> class scores (B, num_classes)."""

    def __init__(
        self,
        config: TransformerConfig,
        *,
        image_size: int,
        patch_size: int,
        num_classes: int,
        channels: int = 1,
        pool: str = "cls",
        positions: bool = True,
    ):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        cfg = self.config = config
        self.image_size, self.patch_size, self.pool = image_size, patch_size, pool
        self.num_patches = (image_size // patch_size) ** 2
        self.patches = PatchEmbedding(channels, cfg.d_model, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if pool == "cls" else None
        # learned positions, one vector per token; positions=False leaves them out (the patches become a bag)
        self.position = nn.Parameter(torch.zeros(1, self.num_patches + (pool == "cls"), cfg.d_model))
        nn.init.trunc_normal_(self.position, std=0.02)
        if not positions:
            self.position.requires_grad_(False).zero_()
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, num_classes)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> the encoder's last vectors, after its final norm: (B, [1 +] N, d_model)."""
        if images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be {self.image_size} x {self.image_size}, got {tuple(images.shape)}")
        x = self.patches(images)  # (B, N, d)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, 1 + N, d)
        return self.encoder(self.dropout(x + self.position))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> class scores (B, num_classes), read from the class token (or the mean)."""
        hidden = self.features(images)  # (B, [1 +] N, d)
        summary = hidden[:, 0] if self.pool == "cls" else hidden.mean(1)  # (B, d)
        return self.head(summary)  # (B, num_classes)


def digits_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's handwritten digits (shipped inside its package: nothing downloads), split once.

    Returns (train images (1200, 1, 8, 8), train labels (1200,), test images (597, 1, 8, 8), test labels (597,)):
    pixels scaled from 0..16 to 0..1, the split stratified by class and fixed (scikit-learn's train_test_split,
    random_state 0, its rows kept in checkpoints/digits_split.json). The pixels are read from scikit-learn's own
    file without importing scikit-learn (a second saved); tests/unit/test_vit.py holds both to load_digits and
    train_test_split.
    """
    import gzip
    import importlib.util
    import json
    from pathlib import Path

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits come with scikit-learn: pip install scikit-learn")
    csv = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(csv, "rt") as f:
        rows = torch.from_numpy(np.loadtxt(f, delimiter=",", dtype=np.float32))  # (1797, 65): 64 pixels, the label
    images = rows[:, :64].reshape(-1, 1, 8, 8) / 16  # (1797, 64) -> (1797, 1, 8, 8)
    labels = rows[:, 64].long()  # (1797,)
    split = json.loads((Path(__file__).parent / "checkpoints" / "digits_split.json").read_text())  # vit sits below
    # the checkpoints module (which loads ViTs), so the file's folder is named here, not imported
    train, test = torch.tensor(split["train"]), torch.tensor(split["test"])  # (1200,), (597,): rows, in order
    return images[train], labels[train], images[test], labels[test]


def logistic_regression(images: torch.Tensor, labels: torch.Tensor, c: float = 1.0) -> nn.Module:
    """Multinomial logistic regression on the pixels, fitted to its optimum: scikit-learn's LogisticRegression(C=c)
    (an L2 penalty of 1 / (2c) on the weights, not the intercept, added to the summed cross-entropy; here both
    divided by B, the same minimum), solved with L-BFGS in float64. images (B, C, H, W), labels (B,) ->
    nn.Sequential(Flatten, Linear) in eval mode, float32. The objective is convex with one minimum in the weights (the
    intercepts only up to a constant added to all of them, which the softmax ignores), so any exact solver lands on
    the same weights; tests/unit/test_vit.py holds this one to scikit-learn's."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    if not c > 0:
        raise ValueError(f"c (the inverse of the penalty) must be positive, got {c}")
    x = images.flatten(1).double()  # (B, C * H * W)
    classes = int(labels.max()) + 1
    weight = torch.zeros(classes, x.shape[1], dtype=torch.float64, requires_grad=True)  # (K, D)
    bias = torch.zeros(classes, dtype=torch.float64, requires_grad=True)  # (K,)
    solver = torch.optim.LBFGS(
        [weight, bias], max_iter=1000, tolerance_grad=1e-9, tolerance_change=1e-12, history_size=20,
        line_search_fn="strong_wolfe",
    )  # fmt: skip

    def objective() -> torch.Tensor:
        solver.zero_grad()
        penalty = (weight**2).sum() / (2 * c * len(labels))  # (1 / 2c) |W|^2, over B as the mean cross-entropy is
        loss = nn.functional.cross_entropy(x @ weight.T + bias, labels) + penalty
        loss.backward()
        return loss

    solver.step(objective)
    linear = nn.Linear(x.shape[1], classes)
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return nn.Sequential(nn.Flatten(), linear).eval()


def image_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512) -> float:
    """The share of `images` (B, C, H, W) whose highest score is their label (B,), in eval mode, no gradients."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.inference_mode():
        right = sum(
            int((model(images[i : i + batch_size].to(device)).argmax(-1).cpu() == labels[i : i + batch_size]).sum())
            for i in range(0, len(labels), batch_size)
        )
    model.train(was_training)
    return right / len(labels)


def cls_attention(model: VisionTransformer, images: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """How much the class token attends to each patch in one layer, averaged over heads: (B, rows, cols).

    Only for a model with a class token; the weights come through `watch_weights`, the package's one way to look.
    """
    if model.cls_token is None:
        raise ValueError("cls_attention needs a model with a class token (pool='cls'), got pool='mean'")
    seen: list[torch.Tensor] = []
    handles = watch_weights(model.encoder.layers[layer].self_attn, seen.append)
    try:
        with torch.inference_mode():
            model.features(images)
    finally:
        for handle in handles:
            handle.remove()
    side = model.image_size // model.patch_size
    return seen[0][:, :, 0, 1:].mean(1).reshape(-1, side, side)  # class token's row, patches only: (B, rows, cols)


def mean_attention_distance(
    weights: torch.Tensor, grid: int | tuple[int, int], patch_size: int, *, per_image: bool = False
) -> torch.Tensor:
    """ViT's mean attention distance: how far, in pixels, each head looks from its query patch (Figure 7 of the paper).

    weights (B, h, T, T), one layer's attention as `capture_attention` records it, over a grid of rows x cols
    patches of patch_size pixels: T = rows * cols, or 1 + rows * cols with a class token in front. The class
    token is left out as query and as key, and each patch's row is renormalised over the patches (so a head
    that sends all its attention to the class token has no defined distance: that row counts as 0). For each
    query patch, the attention-weighted mean of the straight-line distance between patch centres, in pixels;
    averaged over the query patches -> (B, h) if per_image, else averaged over the images too -> (h,).
    """
    rows, cols = (grid, grid) if isinstance(grid, int) else tuple(grid)
    if rows < 1 or cols < 1 or patch_size < 1:
        raise ValueError(f"grid and patch_size must be positive, got grid {grid!r} and patch_size {patch_size}")
    n = rows * cols
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be self-attention of shape (B, h, T, T), got {got}")
    if weights.shape[-1] not in (n, n + 1):
        raise ValueError(
            f"a {rows} x {cols} grid has {n} patches, so T must be {n} or {n + 1} (with a class token), "
            f"got weights of shape {tuple(weights.shape)}"
        )
    patches = weights[..., -n:, -n:].float()  # (B, h, N, N): the class token, if any, is position 0
    total = patches.sum(-1, keepdim=True)  # (B, h, N, 1): the share each query gives the patches
    patches = torch.where(total > 0, patches / total.clamp_min(1e-12), torch.zeros_like(patches))
    row, col = torch.arange(n, device=weights.device) // cols, torch.arange(n, device=weights.device) % cols
    centres = torch.stack([row, col], -1).float() * patch_size  # (N, 2): pixels, up to one offset shared by all
    distance = (centres[:, None] - centres[None]).pow(2).sum(-1).sqrt()  # (N, N): pixels from query to key patch
    per_query = (patches * distance).sum(-1)  # (B, h, N)
    per_head = per_query.mean(-1)  # (B, h)
    return per_head if per_image else per_head.mean(0)  # (B, h) or (h,)


def attention_rollout(weights: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): how much each output position draws on each input token.

    weights: one (B, h, T, T) per layer, first layer first, as `capture_attention` records them. Each layer's
    heads are averaged, the residual path is counted as half of what a position reads (0.5 * A + 0.5 * I, rows
    renormalised to sum to 1), and the layers are multiplied through: R = A_L ... A_2 A_1. Row i of R (B, T, T)
    is a share over the input tokens that sums to 1. It assumes that attention mixes the tokens linearly and
    that the residual and the attention count equally, which no trained layer promises: it is a reading aid,
    not a measurement of what the model uses.
    """
    if not isinstance(weights, (list, tuple)) or not weights:
        raise ValueError(f"weights must be a non-empty list of (B, h, T, T) tensors, one per layer, got {weights!r}")
    first = weights[0]
    for i, layer in enumerate(weights):
        if not isinstance(layer, torch.Tensor) or layer.dim() != 4 or layer.shape[-1] != layer.shape[-2]:
            got = tuple(layer.shape) if isinstance(layer, torch.Tensor) else type(layer).__name__
            raise ValueError(f"layer {i}'s weights must be self-attention of shape (B, h, T, T), got {got}")
        if layer.shape[0] != first.shape[0] or layer.shape[-1] != first.shape[-1]:
            raise ValueError(
                f"every layer must have the same images and tokens: layer 0 is {tuple(first.shape)}, "
                f"layer {i} is {tuple(layer.shape)}"
            )
    eye = torch.eye(first.shape[-1], dtype=torch.float64, device=first.device)  # (T, T)
    rollout = eye.expand(first.shape[0], -1, -1)  # (B, T, T): before any layer, each token is itself
    for layer in weights:
        mixed = 0.5 * layer.double().mean(1) + 0.5 * eye  # (B, T, T): heads averaged, the residual added
        mixed = mixed / mixed.sum(-1, keepdim=True)
        rollout = mixed @ rollout  # (B, T, T): this layer reads what the layers below have mixed
    return rollout.to(first.dtype)


def random_shifts(
    count: int, largest: int = 1, generator: torch.Generator | None = None, *, still: bool = False
) -> torch.Tensor:
    """count moves (count, 2) of (rows down, columns right), each a whole number from -largest to largest, drawn
    uniformly over the (2 * largest + 1)^2 moves; (0, 0) is left out unless still=True, so that every image moves."""
    if count < 0 or largest < 1:
        raise ValueError(f"count must be at least 0 and largest at least 1, got count {count} and largest {largest}")
    side = 2 * largest + 1
    if still:
        draws = torch.randint(side * side, (count,), generator=generator)  # (count,)
    else:  # every move but (0, 0), which is the middle of the side x side square of moves
        draws = torch.randint(side * side - 1, (count,), generator=generator)  # (count,)
        draws = draws + (draws >= side * side // 2).long()  # skip the middle
    return torch.stack([draws // side - largest, draws % side - largest], dim=-1)  # (count, 2)


def shift_images(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """images (B, C, H, W) moved by shifts (B, 2) whole pixels (rows down, columns right), zeros moved in.

    Ink moved past an edge is lost, as it would be off the page. (0, 0) returns the image unchanged."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must have shape (B, C, H, W), got {got}")
    if (
        not isinstance(shifts, torch.Tensor)
        or shifts.shape != (images.shape[0], 2)
        or shifts.is_floating_point()
        or shifts.is_complex()
    ):
        got = f"{tuple(shifts.shape)} {shifts.dtype}" if isinstance(shifts, torch.Tensor) else type(shifts).__name__
        raise ValueError(f"shifts must be whole numbers of shape ({images.shape[0]}, 2), got {got}")
    H, W = images.shape[-2:]
    rows = torch.arange(H, device=images.device)[None, :] - shifts[:, :1].to(images.device)  # (B, H): source row
    cols = torch.arange(W, device=images.device)[None, :] - shifts[:, 1:].to(images.device)  # (B, W): source column
    inside = ((rows >= 0) & (rows < H))[:, :, None] & ((cols >= 0) & (cols < W))[:, None, :]  # (B, H, W)
    batch = torch.arange(images.shape[0], device=images.device)[:, None, None]  # (B, 1, 1)
    picked = images.permute(0, 2, 3, 1)[batch, rows.clamp(0, H - 1)[:, :, None], cols.clamp(0, W - 1)[:, None, :]]
    # picked (B, H, W, C): the source pixel of every target pixel; outside the image, zero
    return (picked * inside[..., None]).permute(0, 3, 1, 2)  # (B, H, W, C) -> (B, C, H, W)


class DigitsCNN(nn.Module):
    """A small convolutional network for the digits, the baseline with the bias ViT lacks: images (B, C, H, W) ->
    class scores (B, num_classes).

    Three 3 x 3 convolutions (zero padding 1, GELU), a 2 x 2 max-pool after the second, then the mean over the
    remaining places and one linear layer. Each convolution applies the same small filter at every place, so a
    stroke moved by a pixel gives the same features a pixel away (up to the edges and the pool): that is the
    bias a ViT must learn from data. About 56,000 weights at width 32, against the chapter's ViT's 69,000.
    """

    def __init__(self, channels: int = 1, num_classes: int = 10, width: int = 32):
        super().__init__()
        if channels < 1 or num_classes < 2 or width < 1:
            raise ValueError(f"channels, num_classes and width must be positive (num_classes >= 2), got "
                             f"{channels}, {num_classes} and {width}")  # fmt: skip
        self.channels = channels
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),  # (B, C, H, W) -> (B, w, H, W)
            nn.GELU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),  # -> (B, 2w, H, W)
            nn.GELU(),
            nn.MaxPool2d(2),  # -> (B, 2w, H/2, W/2)
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),  # -> (B, 2w, H/2, W/2)
            nn.GELU(),
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> class scores (B, num_classes)."""
        if images.dim() != 4 or images.shape[1] != self.channels or min(images.shape[-2:]) < 2:
            raise ValueError(f"images must have shape (B, {self.channels}, H, W) with H, W >= 2, "
                             f"got {tuple(images.shape)}")  # fmt: skip
        return self.head(self.features(images).mean((-2, -1)))  # (B, 2w, h, w) -> (B, 2w) -> (B, num_classes)
