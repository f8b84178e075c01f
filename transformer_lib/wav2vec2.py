"""wav2vec 2.0 (Baevski et al., 2020): learning speech from unlabelled audio by telling the true piece from distractors.

A convolutional feature encoder turns the raw samples into one vector per 20 ms frame. About half of
the frames are hidden (spans of 10 frames, each frame starting one with probability 0.065), and a
Transformer reads the result. For each hidden frame the model must pick, among the frame's own
quantized vector and K distractors quantized from other hidden frames of the same clip, the true one:
a contrastive loss over cosine similarities at temperature 0.1. The quantizer maps each frame to one
entry in each of G codebooks of V entries (a product quantizer), chosen by a straight-through
Gumbel-softmax so that the choice can learn; a diversity loss keeps every entry in use.

This module holds those parts, each a function or a small module over plain tensors:

- `conv_geometry` and `conv_frames`: the feature encoder's receptive field, hop and output length;
- `normalize_samples`: each clip at zero mean and unit variance, as the models were trained;
- `span_mask`: the frames to hide; `sample_negatives`: the distractors;
- `GumbelQuantizer`: the product quantizer, with its perplexity; `diversity_loss`;
- `contrastive_logits` and `contrastive_loss`: the objective;
- `FeatureEncoder`, `ConvPositions`, `Wav2Vec2Model` and `Wav2Vec2ForCTC`: the network, the book's own
  `Encoder` in the middle. What it changes against the 2017 encoder: samples in, through seven
  convolutions (GELU; a GroupNorm after the first, or a LayerNorm after each); a LayerNorm and a
  linear layer to the model width; positions from a grouped convolution over the frames (kernel 128,
  16 groups, weight-normalised), added once; a LayerNorm before the layers (post-LN, the base model)
  or after them (pre-LN, the "stable" variant of the LV-60 and XLSR large models); exact GELU.
  `Wav2Vec2ForPreTraining` adds the quantizer and the two projections the loss compares. Weights move to
  and from `transformers`' Wav2Vec2ForCTC and Wav2Vec2ForPreTraining in `transformer_lib.hf`.

`tests/unit/test_wav2vec2.py` checks them against `transformers`' Wav2Vec2ForPreTraining (its quantizer,
and its loss on the same hidden frames and distractors) and by their statistics.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig, resolve_config
from .encoder import Encoder
from .layers import LayerNorm

__all__ = [
    "BASE_KERNELS",
    "BASE_STRIDES",
    "conv_geometry",
    "conv_frames",
    "normalize_samples",
    "span_mask",
    "sample_negatives",
    "GumbelQuantizer",
    "diversity_loss",
    "contrastive_logits",
    "contrastive_loss",
    "wav2vec2_config",
    "FeatureEncoder",
    "ConvPositions",
    "Wav2Vec2Model",
    "Wav2Vec2ForCTC",
    "Wav2Vec2ForPreTraining",
]

# the paper's feature encoder: seven convolutions with 512 channels over 16 kHz samples
BASE_KERNELS = (10, 3, 3, 3, 3, 2, 2)
BASE_STRIDES = (5, 2, 2, 2, 2, 2, 2)
IGNORE = -100  # the label of a frame the contrastive loss skips (cross_entropy's ignore_index)


def _check_convs(kernels, strides) -> None:
    if len(kernels) != len(strides) or not kernels:
        raise ValueError(f"need one stride per kernel, at least one of each; got {len(kernels)} and {len(strides)}")
    for name, values in (("kernels", kernels), ("strides", strides)):
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ValueError(f"{name} must be positive ints, got {tuple(values)}")


def conv_geometry(kernels=BASE_KERNELS, strides=BASE_STRIDES) -> tuple[int, int]:
    """(receptive field, hop) in samples of a stack of unpadded 1-D convolutions.

    The hop is the product of the strides; each layer widens the field by (kernel - 1) times the hop
    of the layers before it. The paper's stack: 400 samples (25 ms at 16 kHz) every 320 (20 ms).
    """
    _check_convs(kernels, strides)
    field, hop = 1, 1
    for k, s in zip(kernels, strides):
        field += (k - 1) * hop
        hop *= s
    return field, hop


def conv_frames(samples: int, kernels=BASE_KERNELS, strides=BASE_STRIDES) -> int:
    """Frames the stack makes of `samples` samples: floor((L - k) / s) + 1 at each layer, 0 if too short."""
    _check_convs(kernels, strides)
    length = samples
    for k, s in zip(kernels, strides):
        length = (length - k) // s + 1 if length >= k else 0
    return length


def span_mask(
    batch: int,
    frames: int,
    start_prob: float = 0.065,
    span: int = 10,
    min_spans: int = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The frames to hide, bool (batch, frames): every frame starts a span of `span` frames with probability start_prob.

    Spans may overlap (then they merge) and are cut at the clip's end; with the paper's 0.065 and 10,
    about 1 - (1 - 0.065)^10 = 49% of the frames away from the edges are hidden. (The paper and
    fairseq draw a share p of the frames as starts without replacement, and fairseq and Hugging Face
    keep starts at least `span` frames from the end; the share hidden is close to this one's.) A clip with fewer
    than min_spans starts gets that many drawn uniformly (wav2vec 2.0 needs at least two hidden frames
    per clip, so that each has a distractor).
    """
    for name, value in (("batch", batch), ("frames", frames), ("span", span)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not 0.0 <= start_prob <= 1.0:
        raise ValueError(f"start_prob must be a probability in [0, 1], got {start_prob!r}")
    if isinstance(min_spans, bool) or not isinstance(min_spans, int) or not 0 <= min_spans <= frames:
        raise ValueError(f"min_spans must be an int from 0 to frames = {frames}, got {min_spans!r}")
    starts = torch.rand(batch, frames, generator=generator) < start_prob  # (B, T)
    for row in range(batch):
        missing = min_spans - int(starts[row].sum())
        if missing > 0:
            free = (~starts[row]).nonzero().flatten()  # (n,)
            starts[row, free[torch.randperm(free.numel(), generator=generator)[:missing]]] = True
    # a frame is hidden when a span started at it or at one of the span - 1 frames before it
    padded = F.pad(starts.float()[:, None, :], (span - 1, 0))  # (B, 1, span - 1 + T)
    covered = F.max_pool1d(padded, kernel_size=span, stride=1)  # (B, 1, T)
    return covered[:, 0].bool()  # (B, T)


def sample_negatives(
    mask: torch.Tensor, num_negatives: int = 100, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Distractors for each hidden frame: (B, T) bool -> (B, T, K) frame indices within the same clip.

    For a hidden frame, K indices drawn uniformly, with replacement, from the clip's other hidden
    frames (never the frame itself). Rows of frames that are not hidden hold the frame's own index
    and are not read. Every clip needs two hidden frames or more.
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool of shape (B, T), got {mask.dtype} {tuple(mask.shape)}")
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
        raise ValueError(f"num_negatives must be a positive int, got {num_negatives!r}")
    B, T = mask.shape
    out = torch.arange(T).expand(B, T).unsqueeze(-1).repeat(1, 1, num_negatives)  # (B, T, K): each frame itself
    for row in range(B):
        hidden = mask[row].nonzero().flatten()  # (n,) the hidden frames, in order
        n = hidden.numel()
        if n < 2:
            raise ValueError(f"clip {row} has {n} hidden frame(s); each needs at least 2 so that a distractor exists")
        draw = torch.randint(n - 1, (n, num_negatives), generator=generator)  # (n, K) among the n - 1 others
        draw += (draw >= torch.arange(n)[:, None]).long()  # skip the frame's own place, uniform over the others
        out[row, hidden] = hidden[draw]
    return out


class GumbelQuantizer(nn.Module):
    """A product quantizer: x (B, T, d_in) -> (codes (B, T, code_dim), perplexity, chosen entries (B, T, G)).

    A linear layer scores the V entries of each of G codebooks; each codebook gives one entry of
    width code_dim / G, and the code is their concatenation, so G codebooks of V entries name V^G codes.
    In training the entry is drawn by a Gumbel-softmax with hard=True: the forward pass uses the
    one-hot choice, the backward pass the gradient of the noisy softmax at temperature tau
    (straight-through). In eval mode it is the highest score. The perplexity is exp of the entropy
    of each codebook's average choice (in training the plain softmax of the scores, without noise
    and at temperature 1; in eval the one-hot choices),
    summed over the codebooks: G * V when every entry is used alike, G when one is.
    """

    def __init__(self, d_in: int, groups: int = 2, entries: int = 320, code_dim: int = 256):
        super().__init__()
        for name, value in (("d_in", d_in), ("groups", groups), ("entries", entries), ("code_dim", code_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if code_dim % groups:
            raise ValueError(f"code_dim must be divisible by groups, got code_dim={code_dim} and groups={groups}")
        self.groups, self.entries = groups, entries
        self.scores = nn.Linear(d_in, groups * entries)  # (d_in) -> one score per entry of every codebook
        self.codebooks = nn.Parameter(torch.randn(groups, entries, code_dim // groups))  # (G, V, code_dim / G)
        self.tau = 2.0  # the Gumbel-softmax temperature; the paper anneals it from 2 to 0.5

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, d_in); mask (B, T) bool: the frames the perplexity averages over (None: every frame)."""
        B, T, _ = x.shape
        scores = self.scores(x).view(B, T, self.groups, self.entries)  # (B, T, G, V)
        if self.training:
            one_hot = F.gumbel_softmax(scores.float(), tau=self.tau, hard=True).to(x.dtype)  # (B, T, G, V)
            probs = scores.float().softmax(dim=-1)  # (B, T, G, V): the perplexity reads the soft choice
        else:
            one_hot = F.one_hot(scores.argmax(dim=-1), self.entries).to(x.dtype)  # (B, T, G, V)
            probs = one_hot.float()
        keep = torch.ones(B, T, dtype=torch.bool, device=x.device) if mask is None else mask
        average = probs[keep].mean(dim=0)  # (G, V): each codebook's average choice over the frames kept
        entropy = -torch.special.xlogy(average, average).sum(dim=-1)  # (G,)
        perplexity = entropy.exp().sum()
        codes = torch.einsum("btgv,gvc->btgc", one_hot, self.codebooks).reshape(B, T, -1)  # (B, T, code_dim)
        return codes, perplexity, one_hot.argmax(dim=-1)  # chosen: (B, T, G)


def diversity_loss(perplexity: torch.Tensor, groups: int, entries: int) -> torch.Tensor:
    """(G V - perplexity) / (G V): 0 when every entry of every codebook is used alike, near 1 when one is."""
    total = groups * entries
    return (total - perplexity) / total


def contrastive_logits(
    context: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """Cosine similarities over the temperature: context, targets (B, T, D), negatives (B, T, K) -> (B, T, 1 + K).

    Column 0 compares each frame's context vector with its own target, columns 1..K with the targets
    of the frames named in negatives (same clip). A distractor equal to the true target (the same
    code) would be a right answer marked wrong, so its logit is -inf.
    """
    if context.shape != targets.shape or context.dim() != 3:
        raise ValueError(
            f"context and targets must share a shape (B, T, D), got {tuple(context.shape)}, {tuple(targets.shape)}"
        )
    if negatives.shape[:2] != context.shape[:2]:
        raise ValueError(
            f"negatives must be (B, T, K) with B, T = {tuple(context.shape[:2])}, got {tuple(negatives.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    B, T, K = negatives.shape
    rows = torch.arange(B, device=targets.device)[:, None, None]  # (B, 1, 1)
    distractors = targets[rows, negatives]  # (B, T, K, D)
    candidates = torch.cat([targets[:, :, None], distractors], dim=2)  # (B, T, 1 + K, D)
    logits = F.cosine_similarity(context[:, :, None].float(), candidates.float(), dim=-1) / temperature
    same = (distractors == targets[:, :, None]).all(dim=-1)  # (B, T, K)
    logits[:, :, 1:] = logits[:, :, 1:].masked_fill(same, float("-inf"))
    return logits.to(context.dtype)  # (B, T, 1 + K)


def contrastive_loss(logits: torch.Tensor, mask: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Cross-entropy with the true target (column 0) as the answer, over the hidden frames only.

    logits (B, T, 1 + K), mask (B, T) bool. "sum" (fairseq's and Hugging Face's, beside a diversity
    term scaled by the number of hidden frames) or "mean" over the hidden frames.
    """
    if mask.shape != logits.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool of shape {tuple(logits.shape[:2])}, got {mask.dtype} {tuple(mask.shape)}")
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    labels = torch.where(mask, 0, IGNORE)  # (B, T)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction=reduction)


def normalize_samples(samples: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Each clip scaled to zero mean and unit variance: (B, L) -> (B, L), (x - mean) / sqrt(var + eps).

    What Hugging Face's Wav2Vec2FeatureExtractor does (do_normalize=True) for the models trained on clips so
    scaled, the variance without Bessel's correction: a quiet clip and a loud one reach the first convolution alike.
    """
    if samples.dim() != 2 or not samples.is_floating_point():
        raise ValueError(f"samples must be floats of shape (B, L), got {samples.dtype} {tuple(samples.shape)}")
    mean = samples.mean(dim=1, keepdim=True)  # (B, 1)
    var = samples.var(dim=1, unbiased=False, keepdim=True)  # (B, 1)
    return (samples - mean) / torch.sqrt(var + eps)


# ---- the network ---------------------------------------------------------------------------------


def wav2vec2_config(**fields) -> TransformerConfig:
    """The Transformer of wav2vec 2.0 base in our config (768 wide, 12 layers of 12 heads, exact GELU, post-LN).

    vocab_size is the CTC head's size (the characters and the blank); norm_first=True is the "stable layer
    norm" variant of the LV-60 and XLSR large models. Positions come from `ConvPositions`, so config.positional and
    max_len are not read.
    """
    base = dict(d_model=768, num_heads=12, num_layers=12, d_ff=3072, activation="gelu", dropout=0.1, pad_id=None)
    # positional="learned" only so that odd widths pass the config's rule for sinusoids: no table is built or read
    base |= dict(scale_embedding=False, norm_first=False, final_norm=None, vocab_size=32, positional="learned")
    return TransformerConfig(**(base | fields))


class FeatureEncoder(nn.Module):
    """Samples (B, L) -> features (B, conv_dims[-1], T): 1-D convolutions without padding, each followed by GELU.

    norm="group": a GroupNorm with one group per channel after the first convolution only (wav2vec 2.0
    base); "layer": a LayerNorm over the channels after every one (the LV-60 and XLSR large models). T is
    `conv_frames(L, kernels, strides)`.
    """

    def __init__(self, conv_dims, kernels=BASE_KERNELS, strides=BASE_STRIDES, norm: str = "group", bias: bool = False):
        super().__init__()
        _check_convs(kernels, strides)
        if len(conv_dims) != len(kernels) or any(
            isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in conv_dims
        ):
            raise ValueError(f"conv_dims must be one positive int per kernel ({len(kernels)}), got {tuple(conv_dims)}")
        if norm not in ("group", "layer"):
            raise ValueError(f"norm must be 'group' or 'layer', got {norm!r}")
        self.norm_kind = norm
        self.layers = nn.ModuleList()
        for i, (c, k, s) in enumerate(zip(conv_dims, kernels, strides)):
            layer = nn.Module()
            layer.conv = nn.Conv1d(conv_dims[i - 1] if i else 1, c, k, stride=s, bias=bias)
            if norm == "layer":
                layer.norm = nn.LayerNorm(c)
            elif i == 0:
                layer.norm = nn.GroupNorm(c, c)  # each channel normalised over time on its own
            self.layers.append(layer)

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        """samples (B, L) -> (B, C, T)."""
        if samples.dim() != 2 or not samples.is_floating_point():
            raise ValueError(f"samples must be floats of shape (B, L), got {samples.dtype} {tuple(samples.shape)}")
        x = samples[:, None]  # (B, 1, L)
        for layer in self.layers:
            x = layer.conv(x)  # (B, C, T_i)
            if self.norm_kind == "layer":
                x = layer.norm(x.transpose(1, 2)).transpose(1, 2)  # normalised over the channels of each frame
            elif hasattr(layer, "norm"):
                x = layer.norm(x)
            x = F.gelu(x)
        return x


class ConvPositions(nn.Module):
    """Relative positions from the frames themselves: x (B, T, d) -> (B, T, d), GELU(grouped conv(x)).

    A convolution over time, `kernel` frames wide, in `groups` groups of channels, its weight
    normalised (a direction and a length per tap, `torch.nn.utils.parametrizations.weight_norm` over
    dimension 2). Padded by kernel // 2 on each side; an even kernel makes one frame too many, and
    the last is dropped, so the output has T frames.
    """

    def __init__(self, d_model: int, kernel: int = 128, groups: int = 16):
        super().__init__()
        if d_model % groups:
            raise ValueError(f"d_model must be divisible by the groups, got d_model={d_model} and groups={groups}")
        conv = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2, groups=groups)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d)."""
        y = self.conv(x.transpose(1, 2))  # (B, d, T + 1 - kernel % 2)
        if self.kernel % 2 == 0:
            y = y[:, :, :-1]  # (B, d, T)
        return F.gelu(y).transpose(1, 2)  # (B, T, d)


class Wav2Vec2Model(nn.Module):
    """Samples (B, L) -> (hidden (B, T, d_model), features (B, T, conv_dims[-1])).

    features: the convolutions' output after its LayerNorm, what the quantizer reads in pre-training.
    mask (B, T) bool: frames replaced by the learned mask vector before the Transformer (pre-training).
    Every clip of a batch is read whole: this model takes no padding.
    """

    def __init__(
        self,
        config: TransformerConfig | None = None,
        conv_dims=(512,) * 7,
        kernels=BASE_KERNELS,
        strides=BASE_STRIDES,
        conv_norm: str = "group",
        conv_bias: bool = False,
        pos_kernel: int = 128,
        pos_groups: int = 16,
        **overrides,
    ):
        super().__init__()
        cfg = self.config = resolve_config(config if config is not None else wav2vec2_config(), overrides)
        if cfg.final_norm != cfg.norm_first:
            raise ValueError("wav2vec 2.0 has one norm around its layers: final_norm must equal norm_first")
        self.conv_dims, self.kernels, self.strides = tuple(conv_dims), tuple(kernels), tuple(strides)
        self.conv_norm, self.conv_bias, self.pos_kernel, self.pos_groups = conv_norm, conv_bias, pos_kernel, pos_groups
        self.features = FeatureEncoder(conv_dims, kernels, strides, conv_norm, conv_bias)
        self.feature_norm = LayerNorm(conv_dims[-1], cfg.eps)
        self.projection = nn.Linear(conv_dims[-1], cfg.d_model)
        self.mask_embedding = nn.Parameter(torch.rand(cfg.d_model))  # what a hidden frame reads as
        self.positions = ConvPositions(cfg.d_model, pos_kernel, pos_groups)
        self.input_norm = None if cfg.norm_first else LayerNorm(cfg.d_model, cfg.eps)  # post-LN: before the layers
        self.encoder = Encoder(cfg)  # pre-LN: its final norm is the one norm after the layers
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, samples: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """samples (B, L), mask (B, T) bool or None -> (hidden (B, T, d_model), features (B, T, C))."""
        features = self.feature_norm(self.features(samples).transpose(1, 2))  # (B, C, T) -> (B, T, C)
        x = self.dropout(self.projection(features))  # (B, T, d_model)
        if mask is not None:
            if mask.shape != x.shape[:2] or mask.dtype != torch.bool:
                raise ValueError(
                    f"mask must be bool of shape {tuple(x.shape[:2])}, got {mask.dtype} {tuple(mask.shape)}"
                )
            x = torch.where(mask[..., None], self.mask_embedding.to(x.dtype), x)
        x = x + self.positions(x)
        if self.input_norm is not None:
            x = self.input_norm(x)
        return self.encoder(self.dropout(x)), features


class Wav2Vec2ForCTC(nn.Module):
    """wav2vec 2.0 with a linear CTC head: samples (B, L) -> logits (B, T, vocab_size), the blank among them."""

    def __init__(self, config: TransformerConfig | None = None, **model_kwargs):
        super().__init__()
        self.wav2vec2 = Wav2Vec2Model(config, **model_kwargs)
        self.config = self.wav2vec2.config
        self.dropout = nn.Dropout(self.config.dropout)
        self.head = nn.Linear(self.config.d_model, self.config.vocab_size)

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        """samples (B, L) -> logits (B, T, vocab_size)."""
        hidden, _ = self.wav2vec2(samples)
        return self.head(self.dropout(hidden))  # (B, T, vocab_size)


class Wav2Vec2ForPreTraining(nn.Module):
    """wav2vec 2.0 with what pre-training needs: samples (B, L), mask (B, T) -> (context, targets, perplexity).

    context and targets are (B, T, proj_dim).

    context: the Transformer's output at each frame, projected; targets: each frame's quantized
    features (read before the mask), projected to the same width. `loss` compares them.
    """

    def __init__(
        self,
        config: TransformerConfig | None = None,
        groups: int = 2,
        entries: int = 320,
        code_dim: int = 256,
        proj_dim: int = 256,
        temperature: float = 0.1,
        diversity_weight: float = 0.1,
        **model_kwargs,
    ):
        super().__init__()
        self.wav2vec2 = Wav2Vec2Model(config, **model_kwargs)
        self.config = self.wav2vec2.config
        self.quantizer = GumbelQuantizer(self.wav2vec2.conv_dims[-1], groups, entries, code_dim)
        self.project_context = nn.Linear(self.config.d_model, proj_dim)
        self.project_codes = nn.Linear(code_dim, proj_dim)
        self.temperature, self.diversity_weight = temperature, diversity_weight

    def forward(
        self, samples: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """samples (B, L), mask (B, T) bool or None -> (context, targets (B, T, proj_dim), perplexity)."""
        hidden, features = self.wav2vec2(samples, mask)  # (B, T, d_model), (B, T, C)
        codes, perplexity, _ = self.quantizer(features, mask)  # (B, T, code_dim)
        return self.project_context(hidden), self.project_codes(codes), perplexity

    def loss(
        self, samples: torch.Tensor, mask: torch.Tensor, negatives: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, contrastive, diversity): the contrastive loss summed over the hidden frames, plus
        diversity_weight times the diversity loss times the number of hidden frames (so that the two
        keep their balance whatever the batch), as fairseq and Hugging Face add them. (The paper writes
        L_m + alpha L_d with L_d the codebooks' negative entropy over G V: the same minimum, another scale.)"""
        context, targets, perplexity = self(samples, mask)
        contrastive = contrastive_loss(contrastive_logits(context, targets, negatives, self.temperature), mask)
        diversity = diversity_loss(perplexity, self.quantizer.groups, self.quantizer.entries) * mask.sum()
        return contrastive + self.diversity_weight * diversity, contrastive, diversity
