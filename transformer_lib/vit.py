"""Chapter 16's Vision Transformer: an image cut into patches, each patch a token.

The encoder is the book's own, in the pre-LN arrangement with a norm after the last layer. What is new
sits in front of it and after it:

- `patchify` cuts images (B, C, H, W) into flattened patches (B, N, C * p * p), row by row of patches;
  `PatchEmbedding` does the same cut and a linear map at once, as a convolution whose kernel and stride
  are both the patch size (the two are equal: `tests/unit/test_vit.py`).
- A learned class token is put in front of the patches (or, with ``pool="mean"``, the patches' vectors
  are averaged instead), and a learned vector per position is added.
- The head reads the class token's last vector (or the mean) after the final norm.
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

    def __init__(self, channels: int, d_model: int, patch: int):
        super().__init__()
        self.patch, self.channels = patch, channels
        self.projection = nn.Conv2d(channels, d_model, kernel_size=patch, stride=patch)

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
    """scikit-learn's handwritten digits (shipped inside the package: nothing downloads), split once.

    Returns (train images (1200, 1, 8, 8), train labels (1200,), test images (597, 1, 8, 8), test labels (597,)):
    pixels scaled from 0..16 to 0..1, the split stratified by class and fixed (scikit-learn's, random_state 0).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16  # (1797, 8, 8) -> (1797, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (1797,)
    train, test = train_test_split(
        torch.arange(len(labels)).numpy(), test_size=DIGITS_TEST, stratify=labels.numpy(), random_state=0
    )
    return images[train], labels[train], images[test], labels[test]


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
