"""CLIP (Radford et al., 2021): an image encoder and a text encoder trained to agree on which caption fits which image.

Each side ends in one vector per input, projected to a shared width and scaled to length 1. For a batch of N images
and their N captions, the N x N cosine similarities, multiplied by a learned temperature's inverse exp(s), are logits
twice over: each image's row should pick its own caption, and each caption's column its own image. The loss is the
mean of the two cross-entropies (the symmetric InfoNCE loss). After training, a class is a caption: "a photo of a
dog" against "a photo of a cat" classifies an image with no classifier trained at all (zero-shot).

What the two towers change against the book's other encoders:

- the text tower is a causal pre-LN encoder (each token sees the tokens before it) with learned positions and a final
  LayerNorm, read at the end-of-text token (`TextTower`: the first `eos_id`; with eos_id=None, the largest id, which is
  the end-of-text token in OpenAI's vocabulary and what Hugging Face's older CLIP configs read);
- the image tower is the ViT of chapter 16 with three differences: its patches are cut by a convolution without bias,
  a LayerNorm comes before the first layer, and the class token's last vector is LayerNormed on its own (no final norm
  over the sequence);
- both use QuickGELU, x * sigmoid(1.702 x), an approximation of GELU, and LayerNorm's eps 1e-5.

`CLIPModel` loads into `transformers`' CLIPModel and back (`tl.hf`); `tests/unit/test_clip.py` checks the logits, the
embeddings and the loss on random configurations both ways.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .encoder import Encoder
from .layers import LayerNorm
from .masks import causal_mask
from .vit import PatchEmbedding

__all__ = ["clip_config", "TextTower", "ImageTower", "CLIPModel", "clip_loss"]


def clip_config(**fields) -> TransformerConfig:
    """A TransformerConfig with CLIP's layer choices (pre-LN, QuickGELU, eps 1e-5, learned positions), then `fields`."""
    base = dict(
        norm_first=True, activation="quick_gelu", eps=1e-5, scale_embedding=False, dropout=0.0, positional="learned"
    )
    return TransformerConfig(**(base | fields))


class TextTower(nn.Module):
    """tokens (B, T) -> one vector per text (B, d_model): token and position embeddings, a causal pre-LN encoder with a
    final LayerNorm, read at the first `eos_id` of each row (eos_id=None: at the row's largest id)."""

    def __init__(self, config: TransformerConfig, eos_id: int | None):
        super().__init__()
        cfg = self.config = replace(config, final_norm=True)
        if eos_id is not None and not 0 <= eos_id < cfg.vocab_size:
            raise ValueError(f"eos_id must be an id of the {cfg.vocab_size}-token vocabulary or None, got {eos_id}")
        self.eos_id = eos_id
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.max_len, cfg.d_model)
        self.encoder = Encoder(cfg)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> (B, d_model): each text's vector at its end-of-text position."""
        if tokens.dim() != 2 or tokens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"tokens must be integer ids (B, T), got {tokens.dtype} of shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        if T > self.config.max_len:
            raise ValueError(f"the text tower reads at most {self.config.max_len} tokens, got {T}")
        if self.eos_id is None:
            end = tokens.argmax(-1)  # (B,): the largest id
        else:
            has = tokens == self.eos_id  # (B, T)
            if not bool(has.any(-1).all()):
                raise ValueError(f"every text must hold the end-of-text id {self.eos_id}: it is where the text is read")
            end = has.int().argmax(-1)  # (B,): the first end-of-text
        x = self.embed(tokens) + self.position(torch.arange(T, device=tokens.device))  # (B, T, d)
        hidden = self.encoder(x, causal_mask(T, device=tokens.device))  # (B, T, d): each token sees those before
        return hidden[torch.arange(B, device=tokens.device), end]  # (B, d)


class ImageTower(nn.Module):
    """images (B, C, H, W) -> one vector per image (B, d_model): patches (a convolution without bias), a class token,
    learned positions, a LayerNorm, a pre-LN encoder without a final norm, and a LayerNorm of the class token's
    vector."""

    def __init__(self, config: TransformerConfig, *, image_size: int, patch_size: int, channels: int = 3):
        super().__init__()
        cfg = self.config = replace(config, final_norm=False)
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        self.image_size, self.patch_size = image_size, patch_size
        self.patches = PatchEmbedding(channels, cfg.d_model, patch_size, bias=False)
        self.cls_token = nn.Parameter(torch.randn(cfg.d_model) * cfg.d_model**-0.5)
        self.position = nn.Embedding((image_size // patch_size) ** 2 + 1, cfg.d_model)
        self.pre_norm = LayerNorm(cfg.d_model, cfg.eps)
        self.encoder = Encoder(cfg)
        self.post_norm = LayerNorm(cfg.d_model, cfg.eps)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, d_model): the class token's last vector, LayerNormed."""
        if images.dim() != 4 or images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be (B, C, {self.image_size}, {self.image_size}), got {tuple(images.shape)}")
        x = self.patches(images)  # (B, N, d)
        x = torch.cat([self.cls_token.expand(x.shape[0], 1, -1), x], dim=1)  # (B, 1 + N, d)
        x = self.pre_norm(x + self.position.weight)  # (B, 1 + N, d)
        return self.post_norm(self.encoder(x)[:, 0])  # (B, d): the class token's last vector


class CLIPModel(nn.Module):
    """(images (B_i, C, H, W), tokens (B_t, T)) -> logits_per_image (B_i, B_t): exp(logit_scale) times the cosine
    similarity of each image's and each text's projected vectors. encode_image and encode_text give those vectors
    (unit length, projection_dim numbers each)."""

    def __init__(
        self,
        text_config: TransformerConfig,
        vision_config: TransformerConfig,
        *,
        image_size: int,
        patch_size: int,
        channels: int = 3,
        projection_dim: int = 512,
        eos_id: int | None = None,
        logit_scale: float = math.log(1 / 0.07),
    ):
        super().__init__()
        self.text = TextTower(text_config, eos_id)
        self.image = ImageTower(vision_config, image_size=image_size, patch_size=patch_size, channels=channels)
        self.config, self.vision_config = self.text.config, self.image.config
        self.text_projection = nn.Linear(text_config.d_model, projection_dim, bias=False)
        self.image_projection = nn.Linear(vision_config.d_model, projection_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale)))  # the inverse temperature's log: learned

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> (B, projection_dim), each of length 1."""
        return F.normalize(self.text_projection(self.text(tokens)), dim=-1)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, projection_dim), each of length 1."""
        return F.normalize(self.image_projection(self.image(images)), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """images (B_i, C, H, W), tokens (B_t, T) -> logits_per_image (B_i, B_t); its transpose is per text."""
        return self.logit_scale.exp() * self.encode_image(images) @ self.encode_text(tokens).T  # (B_i, B_t)


def clip_loss(logits_per_image: torch.Tensor) -> torch.Tensor:
    """The symmetric contrastive loss of a square batch (N, N) whose i-th image goes with the i-th text: the mean of
    the images' cross-entropy over the texts and the texts' over the images."""
    if logits_per_image.dim() != 2 or logits_per_image.shape[0] != logits_per_image.shape[1]:
        raise ValueError(f"the loss pairs image i with text i: logits must be square (N, N), got "
                         f"{tuple(logits_per_image.shape)}")  # fmt: skip
    labels = torch.arange(logits_per_image.shape[0], device=logits_per_image.device)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)) / 2
