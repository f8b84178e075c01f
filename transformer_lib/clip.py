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

Chapter 19 trains one on the handwritten digits, with captions a program writes (`describe`, `digit_captions`):
`CAPTION_TEMPLATES` in training, `HELD_OUT_TEMPLATES` (phrasings it never saw) for zero-shot classification
(`class_embeddings`, `zero_shot_accuracy`), `retrieval_recall` both ways, and a linear probe on `image_features`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .encoder import Encoder
from .layers import LayerNorm
from .masks import causal_mask
from .tasks import pad_sequences
from .tokenization import CharTokenizer
from .vit import PatchEmbedding

__all__ = [
    "clip_config",
    "TextTower",
    "ImageTower",
    "CLIPModel",
    "clip_loss",
    "DIGIT_WORDS",
    "CAPTION_TEMPLATES",
    "HELD_OUT_TEMPLATES",
    "describe",
    "digit_captions",
    "caption_tokenizer",
    "encode_captions",
    "class_embeddings",
    "zero_shot_accuracy",
    "retrieval_recall",
    "image_features",
]


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

    def checkpoint_init(self) -> dict:
        """The constructor's arguments beyond the text config, as `save_checkpoint`'s `init` stores them (the vision
        config as a dict, which `load_checkpoint` makes a config again). The temperature is a weight: it is saved
        with them."""
        return {
            "vision_config": asdict(self.vision_config),
            "image_size": self.image.image_size,
            "patch_size": self.image.patch_size,
            "channels": self.image.patches.channels,
            "projection_dim": self.text_projection.out_features,
            "eos_id": self.text.eos_id,
        }

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


# ---- captions for the digits: chapter 19's CLIP ---------------------------------------------------------------------

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Training phrasings. The last names two properties, not the digit ("an even digit above five" fits 6 and 8; only
# "an odd digit equal to five" is one digit's): a caption can fit several images of a batch, as web captions do, and
# the loss still counts the others as wrong.
CAPTION_TEMPLATES = (
    "a handwritten {word}",
    "the digit {digit}",
    "a scan of the number {word}",
    "{word}, written by hand",
    "someone wrote {word}",
    "a small, blurry {word} in ink",
    "look: {word}",
    "digit {digit}, {parity}",
    "an {parity} digit: {digit}",
    "an {parity} digit {side} five",
)
# Phrasings never seen in training, for zero-shot classification: each names its digit once, as a word or a numeral.
HELD_OUT_TEMPLATES = ("this picture shows {word}", "this is {digit}", "the handwritten number {word}")
_CAPTION_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789 ,:"


def describe(digit: int, template: str) -> str:
    """One caption of `digit` (0 to 9) in `template`'s words: {word} is its name, {digit} its numeral, {parity}
    "even" or "odd", {side} "above", "below" or "equal to" (five)."""
    if isinstance(digit, bool) or not isinstance(digit, int) or not 0 <= digit <= 9:
        raise ValueError(f"digit must be an int from 0 to 9, got {digit!r}")
    side = "above" if digit > 5 else "below" if digit < 5 else "equal to"
    parity = "even" if digit % 2 == 0 else "odd"
    return template.format(word=DIGIT_WORDS[digit], digit=digit, parity=parity, side=side)


def digit_captions(
    labels: torch.Tensor, generator: torch.Generator, templates: tuple[str, ...] = CAPTION_TEMPLATES
) -> list[str]:
    """One caption per label (B,), each in a template drawn at random from `templates` with `generator`."""
    if labels.dim() != 1 or labels.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"labels must be integer digits (B,), got {labels.dtype} of shape {tuple(labels.shape)}")
    if not templates:
        raise ValueError("templates must name at least one phrasing")
    picks = torch.randint(len(templates), (labels.shape[0],), generator=generator).tolist()  # (B,)
    return [describe(int(label), templates[pick]) for label, pick in zip(labels.tolist(), picks)]


def caption_tokenizer() -> CharTokenizer:
    """A character tokenizer over the captions' alphabet: the four specials, a-z, 0-9, space, comma and colon."""
    return CharTokenizer(_CAPTION_CHARACTERS)


def encode_captions(tokenizer: CharTokenizer, texts: list[str], length: int | None = None) -> torch.Tensor:
    """Captions -> ids (B, T): each text's characters and an end-of-text id (where the text tower reads), padded
    on the right; T the longest (or `length`). A character outside the tokenizer's alphabet is an error."""
    rows = []
    for text in texts:
        ids = tokenizer.encode(text, eos=True)
        if tokenizer.unk_id in ids:
            unknown = sorted({c for c in text if c not in tokenizer.stoi})
            raise ValueError(f"the caption {text!r} holds characters the tokenizer does not know: {unknown}")
        rows.append(ids)
    return pad_sequences(rows, tokenizer.pad_id, length)  # (B, T)


@torch.no_grad()
def class_embeddings(
    model: CLIPModel, tokenizer: CharTokenizer, templates: tuple[str, ...] = HELD_OUT_TEMPLATES
) -> torch.Tensor:
    """One unit vector per digit (10, projection_dim): the mean of the text tower's vectors for the digit in every
    template, scaled to length 1 again (CLIP's prompt ensemble). The zero-shot classifier's weights."""
    was_training = model.training
    model.eval()
    device = model.logit_scale.device
    texts = [describe(digit, template) for digit in range(10) for template in templates]  # (10 x P,)
    vectors = model.encode_text(encode_captions(tokenizer, texts).to(device))  # (10 x P, D)
    model.train(was_training)
    return F.normalize(vectors.view(10, len(templates), -1).mean(1), dim=-1)  # (10, P, D) -> (10, D)


@torch.no_grad()
def zero_shot_accuracy(model: CLIPModel, images: torch.Tensor, labels: torch.Tensor, classes: torch.Tensor) -> float:
    """The share of images (B, C, H, W) whose nearest class embedding (`class_embeddings`, (10, D)) is their
    label (B,): classification by text alone, with no classifier trained."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    was_training = model.training
    model.eval()
    guesses = (model.encode_image(images.to(classes.device)) @ classes.T).argmax(-1).cpu()  # (B, 10) -> (B,)
    model.train(was_training)
    return float((guesses == labels).float().mean())


def retrieval_recall(
    image_vectors: torch.Tensor,
    text_vectors: torch.Tensor,
    k: int = 1,
    image_labels: torch.Tensor | None = None,
    text_labels: torch.Tensor | None = None,
) -> dict[str, float]:
    """Recall at k both ways, vectors (N_i, D) and (N_t, D): the share of images with a matching text among the k
    texts most similar to it, and the share of texts with a matching image among its k. Without labels, image i
    matches text i only (N pairs); with labels, any image and text of one label match (when captions name only
    the class, which image a caption came from cannot be told apart from the other images of its class)."""
    if image_vectors.dim() != 2 or text_vectors.dim() != 2 or image_vectors.shape[1] != text_vectors.shape[1]:
        raise ValueError(f"image and text vectors must be (N, D) each, D the same, got "
                         f"{tuple(image_vectors.shape)} and {tuple(text_vectors.shape)}")  # fmt: skip
    if (image_labels is None) != (text_labels is None):
        raise ValueError("give labels for both the images and the texts, or for neither")
    if image_labels is None:
        if image_vectors.shape[0] != text_vectors.shape[0]:
            raise ValueError(f"without labels, image i goes with text i: the same number of each, got "
                             f"{image_vectors.shape[0]} and {text_vectors.shape[0]}")  # fmt: skip
        image_labels = text_labels = torch.arange(image_vectors.shape[0])
    if image_labels.shape != image_vectors.shape[:1] or text_labels.shape != text_vectors.shape[:1]:
        raise ValueError("one label per image and one per text")
    fewest = min(image_vectors.shape[0], text_vectors.shape[0])
    if not (isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= fewest):
        raise ValueError(f"k must be an int from 1 to the number of images or texts ({fewest}), got {k!r}")
    similarity = image_vectors @ text_vectors.T  # (N_i, N_t)
    match = image_labels.to(similarity.device)[:, None] == text_labels.to(similarity.device)[None, :]  # (N_i, N_t)
    # a row counts when fewer than k non-matching texts score strictly above its best match (ties in its favour)
    best_text = similarity.masked_fill(~match, -math.inf).amax(1)  # (N_i,)
    image_to_text = (((similarity > best_text[:, None]) & ~match).sum(1) < k).float().mean()
    best_image = similarity.masked_fill(~match, -math.inf).amax(0)  # (N_t,)
    text_to_image = (((similarity > best_image[None, :]) & ~match).sum(0) < k).float().mean()
    return {"image to text": float(image_to_text), "text to image": float(text_to_image)}


@torch.no_grad()
def image_features(model: CLIPModel, images: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """The image tower's vector for each image (B, C, H, W) -> (B, d_model), before the projection: what a linear
    probe reads (as the CLIP paper's probes read the tower's output)."""
    was_training = model.training
    model.eval()
    device = model.logit_scale.device
    out = torch.cat(
        [model.image(images[i : i + batch_size].to(device)).cpu() for i in range(0, len(images), batch_size)]
    )
    model.train(was_training)
    return out
