"""Residual vector quantization (RVQ): how a neural audio codec turns vectors into a few integers per frame.

SoundStream (Zeghidour et al., 2021) and EnCodec (Défossez et al., 2022) code each frame of an encoder's output with
a stack of codebooks. The first codebook picks the entry nearest to the vector; the second codes what the first left
over (the residual), the third what the first two left, and so on. Decoding adds the chosen entries back up. With Q
codebooks of K entries a frame costs Q log2 K bits, and using only the first n codebooks gives a coarser code at a
lower bit rate from the same model: SoundStream trains with "quantizer dropout" (a random n per batch) so that every
prefix of the stack decodes well. VioLA and VALL-E write the first codebook's codes with an autoregressive
Transformer and the rest otherwise.

The codebooks learn as EnCodec's do, by exponential moving averages (k-means online, van den Oord et al., 2017,
appendix): each entry moves toward the mean of the vectors assigned to it, `decay` of the old average kept at each
step, with Laplace smoothing of the counts; an entry whose count falls below `dead` is restarted on a random
vector of the batch. EnCodec starts each codebook from k-means on the first batch it sees (`kmeans`,
`ResidualVectorQuantizer.kmeans_init`) rather than from random vectors, most of which no vector would choose.
Gradients pass the quantizer straight through (the output is x + (q - x).detach()), and a commitment loss pulls the
encoder's vectors toward their codes.

Around the quantizer sits a small convolutional encoder and decoder after SEANet, EnCodec's: `CodecEncoder` turns
samples into frames (one per `hop` samples, hop the product of its strides), `CodecDecoder` turns frames back into
samples, and `Codec` joins the three.

`ResidualVectorQuantizer` keeps its codebooks under the names Hugging Face's `EncodecResidualVectorQuantizer` uses
(`layers.{i}.codebook.embed`, `embed_avg`, `cluster_size`), so that `to_encodec` and `from_encodec` move them by
name; `tests/unit/test_codec.py` checks that both give the same codes and the same decoded vectors.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Codebook",
    "ResidualVectorQuantizer",
    "kmeans",
    "bits_per_second",
    "to_encodec",
    "from_encodec",
    "ResidualUnit",
    "CodecEncoder",
    "CodecDecoder",
    "Codec",
    "spectral_loss",
    "codec_loss",
]


def _check_vectors(x: torch.Tensor, dim: int) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"the quantizer reads float vectors (..., {dim}), got {type(x).__name__}")
    if x.dim() < 2 or x.shape[-1] != dim:
        raise ValueError(f"the quantizer reads vectors of size {dim} along the last axis, got shape {tuple(x.shape)}")


def kmeans(
    x: torch.Tensor, k: int, iterations: int = 10, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means on x (N, dim): start from k distinct rows of x drawn at random (with `generator`), then
    `iterations` times assign every row to its nearest centre and move each centre to the mean of its rows (a centre
    no row chose stays where it is, as EnCodec's does). Returns (centres (k, dim), the assignment (N,))."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        what = f"shape {tuple(x.shape)} of {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"kmeans reads float rows (N, dim), got {what}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= x.shape[0]:
        raise ValueError(f"k must be a number of centres from 1 to the {x.shape[0]} rows, got {k!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be a whole number of at least 0, got {iterations!r}")
    centres = x[torch.randperm(x.shape[0], generator=generator, device=x.device)[:k]].clone()  # (k, dim)
    for _ in range(iterations + 1):
        distance = x.pow(2).sum(-1, keepdim=True) - 2 * x @ centres.T + centres.pow(2).sum(-1)  # (N, k)
        assignment = distance.argmin(-1)  # (N,)
        if _ == iterations:
            break
        onehot = F.one_hot(assignment, k).type(x.dtype)  # (N, k)
        counts = onehot.sum(0)  # (k,)
        means = onehot.T @ x / counts.clamp(min=1)[:, None]  # (k, dim)
        centres = torch.where(counts[:, None] > 0, means, centres)
    return centres, assignment


class Codebook(nn.Module):
    """One codebook of `size` entries of `dim` numbers, learned by moving averages (EnCodec's EuclideanCodebook).

    Buffers: `embed` (size, dim), the entries; `embed_avg` (size, dim), the running sums of the vectors assigned to
    each entry; `cluster_size` (size,), the running counts. Nothing here is a parameter: no optimizer moves it.
    """

    def __init__(self, size: int, dim: int, decay: float = 0.99, eps: float = 1e-5, dead: float = 2.0):
        super().__init__()
        if size < 2 or dim < 1:
            raise ValueError(f"a codebook needs at least 2 entries of at least 1 number, got size={size}, dim={dim}")
        if not 0 < decay < 1:
            raise ValueError(f"decay must be between 0 and 1, got {decay}")
        self.size, self.dim, self.decay, self.eps, self.dead = size, dim, decay, eps, dead
        embed = torch.randn(size, dim) / math.sqrt(dim)
        self.register_buffer("embed", embed)
        self.register_buffer("embed_avg", embed.clone())
        self.register_buffer("cluster_size", torch.ones(size))

    @torch.no_grad()
    def kmeans_init(self, x: torch.Tensor, iterations: int = 10, generator: torch.Generator | None = None) -> None:
        """Set the entries to `kmeans` of the vectors x (N, dim), N at least `size`, and the running averages to
        match (each entry's count set to the vectors that chose it, at least `dead`, so that no entry starts dead)."""
        _check_vectors(x, self.dim)
        centres, assignment = kmeans(x.reshape(-1, self.dim), self.size, iterations, generator)
        counts = torch.bincount(assignment, minlength=self.size).to(x.dtype).clamp(min=self.dead)  # (size,)
        self.embed.copy_(centres)
        self.cluster_size.copy_(counts)
        self.embed_avg.copy_(centres * counts[:, None])

    def nearest(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, dim) -> (N,): the index of the nearest entry (squared Euclidean distance; the first on a tie)."""
        distance = x.pow(2).sum(-1, keepdim=True) - 2 * x @ self.embed.T + self.embed.pow(2).sum(-1)  # (N, size)
        return distance.argmin(-1)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (...) -> the entries (..., dim)."""
        return F.embedding(codes, self.embed)

    @torch.no_grad()
    def update(self, x: torch.Tensor, codes: torch.Tensor, generator: torch.Generator | None = None) -> None:
        """One moving-average step toward the vectors x (N, dim) assigned to `codes` (N,); then restart the entries
        whose smoothed count is below `dead` on vectors of x drawn at random (with `generator`)."""
        onehot = F.one_hot(codes, self.size).type(x.dtype)  # (N, size)
        self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)  # (size,)
        self.embed_avg.mul_(self.decay).add_(onehot.T @ x, alpha=1 - self.decay)  # (size, dim)
        total = self.cluster_size.sum()
        smoothed = (self.cluster_size + self.eps) / (total + self.size * self.eps) * total  # Laplace smoothing
        self.embed.copy_(self.embed_avg / smoothed[:, None])
        dead = self.cluster_size < self.dead  # (size,)
        if dead.any():
            picks = torch.randint(x.shape[0], (int(dead.sum()),), generator=generator, device=x.device)
            self.embed[dead] = x[picks]
            self.embed_avg[dead] = x[picks] * self.dead  # as if `dead` vectors had chosen it
            self.cluster_size[dead] = self.dead


class ResidualVectorQuantizer(nn.Module):
    """`num_quantizers` codebooks of `size` entries, each coding what the ones before it left.

    forward(x (..., dim), n=None) -> (quantized (..., dim) with straight-through gradients, codes (..., n),
    commitment loss): n codebooks (all when None; in training, `dropout=True` draws n from 1..num_quantizers per
    call, SoundStream's quantizer dropout). In training mode the codebooks also take one moving-average step.
    encode(x, n) -> codes (..., n); decode(codes) -> (..., dim), for any number of codebooks up to num_quantizers.
    """

    def __init__(
        self,
        num_quantizers: int,
        size: int,
        dim: int,
        *,
        decay: float = 0.99,
        dead: float = 2.0,
        dropout: bool = False,
    ):
        super().__init__()
        if num_quantizers < 1:
            raise ValueError(f"num_quantizers must be at least 1, got {num_quantizers}")
        self.num_quantizers, self.size, self.dim, self.dropout = num_quantizers, size, dim, dropout
        self.layers = nn.ModuleList(nn.Module() for _ in range(num_quantizers))
        for layer in self.layers:  # layers.{i}.codebook: the names EncodecResidualVectorQuantizer uses
            layer.codebook = Codebook(size, dim, decay, dead=dead)

    def _count(self, n: int | None) -> int:
        n = self.num_quantizers if n is None else n
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.num_quantizers:
            raise ValueError(f"n must be a number of codebooks from 1 to {self.num_quantizers}, got {n!r}")
        return n

    @torch.no_grad()
    def kmeans_init(self, x: torch.Tensor, iterations: int = 10, generator: torch.Generator | None = None) -> None:
        """Start every codebook from `kmeans` on the vectors x (..., dim): the first on x, each later one on what
        the codebooks before it leave of x (its residuals), as encoding will hand it."""
        _check_vectors(x, self.dim)
        residual = x.reshape(-1, self.dim)  # (N, dim)
        for layer in self.layers:
            layer.codebook.kmeans_init(residual, iterations, generator)
            residual = residual - layer.codebook.lookup(layer.codebook.nearest(residual))

    def encode(self, x: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """x (..., dim) -> codes (..., n): each codebook's nearest entry to what the ones before it left."""
        _check_vectors(x, self.dim)
        n = self._count(n)
        residual = x.reshape(-1, self.dim)  # (N, dim)
        codes = []
        for layer in self.layers[:n]:
            chosen = layer.codebook.nearest(residual)  # (N,)
            residual = residual - layer.codebook.lookup(chosen)
            codes.append(chosen)
        return torch.stack(codes, -1).reshape(*x.shape[:-1], n)  # (N, n) -> (..., n)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (..., n) -> (..., dim): the sum of the chosen entries of the first n codebooks."""
        if codes.dtype not in (torch.int32, torch.int64) or codes.dim() < 1:
            raise ValueError(f"codes must be integer ids (..., n), got {codes.dtype} of shape {tuple(codes.shape)}")
        n = self._count(codes.shape[-1])
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.size):
            raise ValueError(f"codes must be in [0, {self.size - 1}], got {int(codes.min())} to {int(codes.max())}")
        return sum(layer.codebook.lookup(codes[..., i]) for i, layer in enumerate(self.layers[:n]))

    def forward(
        self, x: torch.Tensor, n: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (..., dim) -> (quantized (..., dim), codes (..., n), commitment loss): see the class docstring.
        `generator` draws quantizer dropout's n and the restarted entries."""
        _check_vectors(x, self.dim)
        if n is None and self.training and self.dropout:
            n = int(torch.randint(1, self.num_quantizers + 1, (), generator=generator))
        n = self._count(n)
        flat = x.reshape(-1, self.dim)  # (N, dim)
        residual, total, codes, commitment = flat, torch.zeros_like(flat), [], flat.new_zeros(())
        for layer in self.layers[:n]:
            chosen = layer.codebook.nearest(residual.detach())  # (N,)
            entry = layer.codebook.lookup(chosen)  # (N, dim)
            commitment = commitment + F.mse_loss(residual, entry.detach())
            if self.training:
                layer.codebook.update(residual.detach(), chosen, generator)
            residual = residual - entry.detach()
            total = total + entry
            codes.append(chosen)
        quantized = flat + (total - flat).detach()  # straight through: the value of the codes, the gradient of x
        return quantized.reshape(x.shape), torch.stack(codes, -1).reshape(*x.shape[:-1], n), commitment / n


def bits_per_second(num_quantizers: int, size: int, frames_per_second: float) -> float:
    """The bit rate of n codebooks of `size` entries at `frames_per_second`: n log2(size) bits a frame."""
    return num_quantizers * math.log2(size) * frames_per_second


def to_encodec(ours: ResidualVectorQuantizer):
    """Our quantizer as Hugging Face's `EncodecResidualVectorQuantizer`, its buffers copied by name."""
    from transformers import EncodecConfig
    from transformers.models.encodec.modeling_encodec import EncodecResidualVectorQuantizer

    config = EncodecConfig(codebook_size=ours.size, codebook_dim=ours.dim, hidden_size=ours.dim)
    # transformers derives the number of codebooks from the largest bandwidth: 1000 * bandwidth // (frames a second *
    # bits a code); half a bit a second more than ours need keeps the floor division off a rounding edge
    per_codebook = config.frame_rate * config.codebook_nbits  # bits a second
    config.target_bandwidths = [(ours.num_quantizers * per_codebook + 0.5) / 1000]
    if config.num_quantizers != ours.num_quantizers:
        raise ValueError(f"EncodecConfig gives {config.num_quantizers} codebooks for our {ours.num_quantizers}")
    theirs = EncodecResidualVectorQuantizer(config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    unloaded = [name for name in missing if not name.endswith(".inited")]
    if unloaded or unexpected:
        raise ValueError(f"EncodecResidualVectorQuantizer did not take our codebooks: {unloaded or unexpected}")
    return theirs


def from_encodec(theirs) -> ResidualVectorQuantizer:
    """Hugging Face's `EncodecResidualVectorQuantizer` (or an `EncodecModel`'s `.quantizer`) as ours."""
    first = theirs.layers[0].codebook.embed
    ours = ResidualVectorQuantizer(len(theirs.layers), first.shape[0], first.shape[1])
    state = {k: v for k, v in theirs.state_dict().items() if not k.endswith(".inited")}
    ours.load_state_dict(state)
    return ours


# ---- the encoder and decoder around the quantizer (SEANet, as EnCodec's, smaller) -------------------------------


def _same(x: torch.Tensor, kernel: int, dilation: int = 1) -> torch.Tensor:
    """Zero-pad (B, C, T) so that a stride-1 convolution keeps T: (kernel - 1) x dilation samples, split."""
    total = (kernel - 1) * dilation
    return F.pad(x, (total - total // 2, total // 2))


class ResidualUnit(nn.Module):
    """x + Conv(k=1)(ELU(Conv(k=3, dilation)(ELU(x)))), (B, C, T) -> same: SEANet's block, which widens what one
    output sees without changing the length."""

    def __init__(self, channels: int, dilation: int = 1):
        super().__init__()
        self.dilation = dilation
        self.conv = nn.Conv1d(channels, channels, 3, dilation=dilation)
        self.mix = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, T) -> (B, C, T): the input plus what the two convolutions make of it."""
        return x + self.mix(F.elu(self.conv(_same(F.elu(x), 3, self.dilation))))


def _check_strides(strides: tuple[int, ...]) -> tuple[int, ...]:
    strides = tuple(strides)
    if not strides or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in strides):
        raise ValueError(f"strides must be positive ints, at least one, got {strides!r}")
    return strides


class CodecEncoder(nn.Module):
    """samples (B, T) -> frames (B, T / hop, dim), T a multiple of hop = the product of `strides`.

    A convolution of kernel 7 to `channels`; then for each stride s a residual unit and a convolution of
    kernel 2s and stride s that doubles the channels; then ELU and a convolution of kernel 3 to `dim`.
    """

    def __init__(self, channels: int = 16, strides: tuple[int, ...] = (2, 4, 5), dim: int = 32):
        super().__init__()
        self.strides = _check_strides(strides)
        self.hop = math.prod(self.strides)
        self.stem = nn.Conv1d(1, channels, 7)
        widths = [channels * 2**i for i in range(len(self.strides) + 1)]
        self.units = nn.ModuleList(ResidualUnit(w) for w in widths[:-1])
        self.downs = nn.ModuleList(
            nn.Conv1d(a, b, 2 * s, stride=s) for a, b, s in zip(widths, widths[1:], self.strides)
        )
        self.out = nn.Conv1d(widths[-1], dim, 3)

    def receptive_field(self) -> int:
        """How many samples one frame reads: each layer of kernel k (dilation d) adds (k - 1) x d times the
        samples between its inputs (the product of the strides before it)."""
        field, jump = 1 + 6, 1  # the stem, kernel 7
        for s in self.strides:
            field += 2 * jump  # the residual unit's kernel 3 (its kernel-1 mix adds nothing)
            field += (2 * s - 1) * jump  # the strided convolution, kernel 2s
            jump *= s
        return field + 2 * jump  # the last convolution, kernel 3

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        """samples (B, T) -> frames (B, T / hop, dim)."""
        if samples.dim() != 2 or samples.shape[-1] % self.hop or not samples.is_floating_point():
            raise ValueError(
                f"the encoder reads float samples (B, T) with T a multiple of its hop {self.hop}, "
                f"got {samples.dtype} of shape {tuple(samples.shape)}"
            )
        x = self.stem(_same(samples[:, None], 7))  # (B, channels, T)
        for unit, down, s in zip(self.units, self.downs, self.strides):
            x = down(F.pad(F.elu(unit(x)), ((s + 1) // 2, s // 2)))  # (B, 2C, T / s): padded by s in all
        return self.out(_same(F.elu(x), 3)).transpose(1, 2)  # (B, dim, T / hop) -> (B, T / hop, dim)


class CodecDecoder(nn.Module):
    """frames (B, F, dim) -> samples (B, F x hop): the encoder in reverse, transposed convolutions of kernel 2s and
    stride s halving the channels, each followed by a residual unit, then ELU and a convolution of kernel 7 to one
    channel."""

    def __init__(self, channels: int = 16, strides: tuple[int, ...] = (2, 4, 5), dim: int = 32):
        super().__init__()
        self.strides = _check_strides(strides)[::-1]  # the encoder's, last first
        self.hop = math.prod(self.strides)
        widths = [channels * 2**i for i in range(len(self.strides) + 1)][::-1]
        self.inp = nn.Conv1d(dim, widths[0], 7)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(a, b, 2 * s, stride=s) for a, b, s in zip(widths, widths[1:], self.strides)
        )
        self.units = nn.ModuleList(ResidualUnit(w) for w in widths[1:])
        self.out = nn.Conv1d(widths[-1], 1, 7)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """frames (B, F, dim) -> samples (B, F x hop)."""
        if frames.dim() != 3 or frames.shape[-1] != self.inp.in_channels:
            raise ValueError(f"the decoder reads frames (B, F, {self.inp.in_channels}), got {tuple(frames.shape)}")
        x = self.inp(_same(frames.transpose(1, 2), 7))  # (B, C, F)
        for up, unit, s in zip(self.ups, self.units, self.strides):
            x = up(F.elu(x))  # (B, C / 2, F s + s): s samples more than wanted
            x = unit(x[..., (s + 1) // 2 : x.shape[-1] - s // 2])  # (B, C / 2, F s)
        return self.out(_same(F.elu(x), 7))[:, 0]  # (B, 1, T) -> (B, T)


class Codec(nn.Module):
    """samples (B, T) -> codes (B, T / hop, n) -> samples: `CodecEncoder`, `ResidualVectorQuantizer`, `CodecDecoder`.

    forward(samples, n=None) -> (reconstruction (B, T), codes (B, F, n), commitment loss): the quantizer's
    forward (straight-through, with quantizer dropout in training when `dropout=True`).
    """

    def __init__(
        self,
        channels: int = 16,
        strides: tuple[int, ...] = (2, 4, 5),
        dim: int = 32,
        num_quantizers: int = 4,
        size: int = 64,
        *,
        dropout: bool = True,
    ):
        super().__init__()
        self.encoder = CodecEncoder(channels, strides, dim)
        self.quantizer = ResidualVectorQuantizer(num_quantizers, size, dim, dropout=dropout)
        self.decoder = CodecDecoder(channels, strides, dim)
        self.hop = self.encoder.hop

    def checkpoint_init(self) -> dict:
        """The constructor's arguments, as `save_checkpoint`'s `init` stores them (a codec has no TransformerConfig);
        the codebooks are buffers, saved with the weights."""
        quantizer = self.quantizer
        return {
            "channels": self.encoder.stem.out_channels,
            "strides": list(self.encoder.strides),
            "dim": quantizer.dim,
            "num_quantizers": quantizer.num_quantizers,
            "size": quantizer.size,
            "dropout": quantizer.dropout,
        }

    def encode(self, samples: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """samples (B, T) -> codes (B, T / hop, n)."""
        return self.quantizer.encode(self.encoder(samples), n)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, F, n) -> samples (B, F x hop)."""
        return self.decoder(self.quantizer.decode(codes))

    def forward(
        self, samples: torch.Tensor, n: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """samples (B, T) -> (reconstruction (B, T), codes (B, T / hop, n), commitment loss)."""
        quantized, codes, commitment = self.quantizer(self.encoder(samples), n, generator)
        return self.decoder(quantized), codes, commitment


# ---- what a codec learns from ----------------------------------------------------------------------------------


def spectral_loss(
    reconstruction: torch.Tensor, target: torch.Tensor, windows: tuple[int, ...] = (64, 256), floor: float = 1.0
) -> torch.Tensor:
    """How far two batches of waveforms (B, T) are apart as spectrograms, at several window lengths.

    For each window n, a Hann-windowed STFT hopping n / 4 samples; the magnitudes' log distance, the mean of
    ``abs(log(abs(X) + floor) - log(abs(Y) + floor))`` (the log weighs quiet parts as much as loud ones, down to
    the floor), plus a tenth of their plain distance, the mean of ``abs(abs(X) - abs(Y))``. The floor is 1 (a
    keypad tone of amplitude 1 peaks near 16 in a window of 64): with 0.1 the log weighed the noise between keys
    as much as the keys, and the touch-tone codec learned the tones in one seed of three in 1,000 steps, against
    all three with 1. Magnitudes only: a tone at another phase costs little (what leaks past the window's edges
    moves with the phase: for a tone of 941 Hz at phase 1.3, a fourteenth of what a tone of another key costs, at
    most about a ninth over all phases), where a waveform distance punishes the phase about as much as the wrong
    tone. SoundStream (Zeghidour et al., 2021) and EnCodec (Défossez et al., 2022) train with multi-scale spectral
    losses too, on mel bands (EnCodec: L1 and L2 on mel magnitudes; SoundStream: L1 on mel, L2 on log-mel), with
    adversarial losses beside them."""
    if reconstruction.shape != target.shape or target.dim() != 2:
        raise ValueError(f"reconstruction and target must be waveforms (B, T) of one shape, got "
                         f"{tuple(reconstruction.shape)} and {tuple(target.shape)}")  # fmt: skip
    total = reconstruction.new_zeros(())
    for n in windows:
        if not 4 <= n <= target.shape[-1]:
            raise ValueError(f"each window must be from 4 samples to the clip's {target.shape[-1]}, got {n}")
        window = torch.hann_window(n, device=target.device, dtype=target.dtype)
        a, b = (torch.stft(w, n, n // 4, window=window, return_complex=True).abs() for w in (reconstruction, target))
        total = total + (torch.log(a + floor) - torch.log(b + floor)).abs().mean() + (a - b).abs().mean() / 10
    return total


def codec_loss(model: Codec, samples: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """What `Codec` trains on for a batch of waveforms (B, T): the waveform's mean absolute error, the spectral
    loss, and the quantizer's commitment loss (weight 1, EnCodec's)."""
    reconstruction, _, commitment = model(samples, generator=generator)
    return F.l1_loss(reconstruction, samples) + spectral_loss(reconstruction, samples) + commitment
