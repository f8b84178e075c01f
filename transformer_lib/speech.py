"""Chapter 16's sound half: a waveform becomes log-mel frames, a convolutional stem makes them tokens, and the book's
encoder-decoder writes down what it heard (Whisper's architecture, Radford et al., 2023, at toy size).

- `log_mel` is Whisper's front end written out: a periodic Hann window, a centred STFT on reflect-padded audio,
  the power spectrum with its last frame dropped, Slaney's mel filters (`mel_filters`) from 0 to 8000 Hz, log10
  clamped at 1e-10, a floor 8 below the clip's maximum, then (x + 4) / 4. It gives transformers'
  WhisperFeatureExtractor's numbers (`tests/unit/test_speech.py` states the tolerance).
- The task needs no download: touch-tone (DTMF) key sequences (`touch_tone_clips`), each key the sum of a row tone
  and a column tone, with random lengths, gaps, loudness and white noise at a random signal-to-noise ratio.
- `SpeechTranscriber` is the book's pre-LN `Encoder` and `Decoder` (cross-attention, a final norm each, exact GELU)
  with Whisper's pieces around them: `ConvStem` (two convolutions, the second halving the frames), Whisper's fixed
  sinusoids on the encoder side (`whisper_positions`), a learned table on the decoder side, and an output layer
  that shares the token table. Its key projections have no bias, as Whisper's: a key bias adds q . b to every
  score of one query alike, and the softmax ignores a shift that is the same for every key, so it never changes
  what attention computes.
- `transformer_lib.hf` moves its weights to and from transformers' WhisperForConditionalGeneration.
- The baseline that learns nothing: `dtmf_decode` reads the keys with seven Goertzel filters (`goertzel_power`, the
  recursion; `dft_power`, the same numbers as one matrix product) and thresholds set by hand, as telephone
  exchanges do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import decoding
from .attention import KVCache, MultiHeadAttention
from .config import TransformerConfig
from .decoder import Decoder
from .embedding import TokenEmbedding, check_token_batch
from .encoder import Encoder
from .masks import causal_mask
from .positional import LearnedPositionalEncoding
from .tasks import pad_sequences
from .tokenization import CharTokenizer
from .training import History, fit, label_smoothed_cross_entropy

__all__ = [
    "SAMPLING_RATE",
    "N_FFT",
    "HOP_LENGTH",
    "N_MELS",
    "hz_to_mel",
    "mel_to_hz",
    "mel_filters",
    "power_spectrogram",
    "log_mel",
    "TOUCH_TONE_KEYS",
    "ROW_TONES",
    "COLUMN_TONES",
    "touch_tone_tokenizer",
    "touch_tone_clips",
    "touch_tone_batches",
    "goertzel_power",
    "dft_power",
    "dtmf_decode",
    "presses",
    "speech_config",
    "stem_frames",
    "ConvStem",
    "whisper_positions",
    "SpeechTranscriber",
    "transcribe",
    "edit_distance",
    "character_error_rate",
    "train_touch_tones",
]

SAMPLING_RATE = 16000  # samples per second: Whisper's, and the clips'
N_FFT = 400  # samples per STFT window: 25 ms at 16 kHz
HOP_LENGTH = 160  # samples between frames: 10 ms, so a second of audio is 100 frames
N_MELS = 80  # mel filters, Whisper's first models' number
_F_MAX = 8000.0  # Whisper's filters reach 8 kHz, the Nyquist frequency of 16 kHz audio


# ---- the log-mel spectrogram, by hand ------------------------------------------------------------


def hz_to_mel(hz: torch.Tensor) -> torch.Tensor:
    """Slaney's mel scale (as librosa and Whisper): linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    hz = torch.as_tensor(hz, dtype=torch.float64)
    linear = 3.0 * hz / 200.0
    log_region = 15.0 + torch.log(hz.clamp(min=1000.0) / 1000.0) * (27.0 / math.log(6.4))
    return torch.where(hz >= 1000.0, log_region, linear)


def mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    """The inverse of `hz_to_mel`: mels -> Hz (float64)."""
    mel = torch.as_tensor(mel, dtype=torch.float64)
    linear = 200.0 * mel / 3.0
    log_region = 1000.0 * torch.exp((mel.clamp(min=15.0) - 15.0) * (math.log(6.4) / 27.0))
    return torch.where(mel >= 15.0, log_region, linear)


def mel_filters(
    *,
    sampling_rate: int = SAMPLING_RATE,
    n_fft: int = N_FFT,
    n_mels: int = N_MELS,
    f_min: float = 0.0,
    f_max: float = _F_MAX,
) -> torch.Tensor:
    """Slaney-normalised triangular filters on Slaney's mel scale: (n_mels, n_fft // 2 + 1) float32.

    Filter m rises from centre m - 1 to centre m and falls to centre m + 1, the n_mels + 2 centres evenly
    spaced in mels from f_min to f_max; each is divided by half its width in Hz, so every filter holds about
    the same energy. `filters @ power` turns a power spectrum (n_fft // 2 + 1, frames) into (n_mels, frames).
    """
    if not (isinstance(sampling_rate, int) and sampling_rate > 0):
        raise ValueError(f"sampling_rate must be a positive int (samples per second), got {sampling_rate!r}")
    if not 0.0 <= f_min < f_max <= sampling_rate / 2:
        raise ValueError(
            f"need 0 <= f_min < f_max <= sampling_rate / 2 = {sampling_rate / 2:g} Hz (the Nyquist frequency), "
            f"got f_min={f_min!r}, f_max={f_max!r}"
        )
    for name, value in (("n_fft", n_fft), ("n_mels", n_mels)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 2):
            raise ValueError(f"{name} must be an int of at least 2, got {value!r}")
    bins = torch.linspace(0, sampling_rate // 2, n_fft // 2 + 1, dtype=torch.float64)  # (F,): each bin's Hz
    mels = torch.linspace(float(hz_to_mel(f_min)), float(hz_to_mel(f_max)), n_mels + 2, dtype=torch.float64)
    centres = mel_to_hz(mels)  # (n_mels + 2,): the filters' edges and centres, in Hz
    width = centres.diff()  # (n_mels + 1,)
    offset = centres[:, None] - bins[None, :]  # (n_mels + 2, F): centre minus bin
    rising = -offset[:-2] / width[:-1, None]  # (n_mels, F): from centre m - 1 (0) to centre m (1)
    falling = offset[2:] / width[1:, None]  # (n_mels, F): from centre m (1) to centre m + 1 (0)
    filters = torch.minimum(rising, falling).clamp(min=0.0)  # (n_mels, F)
    filters = filters * (2.0 / (centres[2:] - centres[:-2]))[:, None]  # Slaney: the same area for every filter
    empty = (filters.amax(dim=1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"mel filters {empty} cover no FFT bin: n_mels={n_mels} is too many for n_fft={n_fft} "
            f"(bins {sampling_rate / n_fft:g} Hz apart); use fewer mels or a longer window"
        )
    return filters.float()


def _check_waveform(waveform: torch.Tensor, least: int) -> None:
    if not isinstance(waveform, torch.Tensor):
        raise TypeError(f"waveform must be a torch.Tensor of samples, got {type(waveform).__name__}")
    if waveform.dim() not in (1, 2):
        raise ValueError(f"waveform must have shape (samples,) or (B, samples), got {tuple(waveform.shape)}")
    if not waveform.is_floating_point():
        raise TypeError(f"waveform must hold float samples (about -1 to 1), got dtype {waveform.dtype}")
    if waveform.shape[-1] < least:
        raise ValueError(f"waveform needs at least {least} samples for its reflect padding, got {waveform.shape[-1]}")


def power_spectrogram(waveform: torch.Tensor, *, n_fft: int = N_FFT, hop_length: int = HOP_LENGTH) -> torch.Tensor:
    """The squared magnitude of the STFT (periodic Hann window, centred): (..., N) -> (..., F, 1 + N // hop_length).

    F = n_fft // 2 + 1 frequency bins.
    Centred: the audio is reflect-padded by n_fft // 2 at each end, so frame t is centred on sample t * hop_length.
    """
    _check_waveform(waveform, n_fft // 2 + 1)
    pad = n_fft // 2
    left = waveform[..., 1 : pad + 1].flip(-1)  # (..., pad): the reflection, edge sample not repeated
    right = waveform[..., -pad - 1 : -1].flip(-1)  # (..., pad)
    padded = torch.cat([left, waveform, right], dim=-1)  # (..., N + 2 pad)
    frames = padded.unfold(-1, n_fft, hop_length)  # (..., 1 + N // hop, n_fft): overlapping windows
    n = torch.arange(n_fft, dtype=torch.float64, device=waveform.device)
    window = (0.5 - 0.5 * torch.cos(2 * math.pi * n / n_fft)).to(waveform.dtype)  # (n_fft,): periodic Hann
    spectrum = torch.fft.rfft(frames * window, dim=-1)  # (..., frames, n_fft // 2 + 1), complex
    power = spectrum.real**2 + spectrum.imag**2  # (..., frames, F)
    return power.transpose(-1, -2)  # (..., F, frames)


def log_mel(
    waveform: torch.Tensor,
    *,
    sampling_rate: int = SAMPLING_RATE,
    n_fft: int = N_FFT,
    hop_length: int = HOP_LENGTH,
    n_mels: int = N_MELS,
) -> torch.Tensor:
    """Whisper's log-mel spectrogram: waveform (N,) or (B, N) -> (n_mels, N // hop_length) or (B, n_mels, frames).

    The power spectrum loses its last frame, goes through Slaney's mel filters (0 to 8000 Hz), then log10
    clamped at 1e-10; every value below the clip's maximum - 8 is raised to it (a range of 80 dB), and
    (x + 4) / 4 brings the numbers near -1 to 1. Each clip of a batch has its own maximum.
    """
    if not (isinstance(sampling_rate, int) and sampling_rate >= 2 * _F_MAX):
        raise ValueError(
            f"log_mel's filters reach {_F_MAX:g} Hz, so it needs sampling_rate >= {2 * _F_MAX:g} (Nyquist); "
            f"got {sampling_rate!r}. Resample the audio to {SAMPLING_RATE} Hz first"
        )
    power = power_spectrogram(waveform, n_fft=n_fft, hop_length=hop_length)[..., :-1]  # (..., F, N // hop)
    filters = mel_filters(sampling_rate=sampling_rate, n_fft=n_fft, n_mels=n_mels).to(power)  # (n_mels, F)
    mel = filters @ power  # (..., n_mels, frames)
    logs = mel.clamp(min=1e-10).log10()
    floor = logs.amax(dim=(-2, -1), keepdim=True) - 8.0  # (..., 1, 1): 80 dB below the clip's loudest
    return (torch.maximum(logs, floor) + 4.0) / 4.0


# ---- touch tones: a task with sound and no download ---------------------------------------------

#: The twelve keys, row by row of the keypad: key 3 * r + c sounds ROW_TONES[r] + COLUMN_TONES[c].
TOUCH_TONE_KEYS = "123456789*0#"
ROW_TONES = (697.0, 770.0, 852.0, 941.0)  # Hz, low group
COLUMN_TONES = (1209.0, 1336.0, 1477.0)  # Hz, high group


def touch_tone_tokenizer() -> CharTokenizer:
    """A character tokenizer over the twelve keys: <pad>=0, <bos>=1, <eos>=2, <unk>=3, then '#', '*', '0'-'9'."""
    return CharTokenizer(TOUCH_TONE_KEYS)


def _range(name: str, pair: tuple[float, float], low: float) -> tuple[float, float]:
    if not (isinstance(pair, Sequence) and len(pair) == 2 and low <= pair[0] <= pair[1]):
        raise ValueError(f"{name} must be a pair (low, high) with {low:g} <= low <= high, got {pair!r}")
    return float(pair[0]), float(pair[1])


def _clips(
    n: int,
    generator: torch.Generator,
    duration: float,
    sampling_rate: int,
    keys: tuple[int, int],
    tone_ms: tuple[float, float],
    gap_ms: tuple[float, float],
    snr_db: tuple[float, float] | None,
) -> tuple[torch.Tensor, list[str]]:
    """n clips drawn from `generator`: (waveforms (n, samples) float32, texts). See `touch_tone_clips`.

    Every draw has a fixed shape and comes in a fixed order: the keys, lengths and loudness of clip i never depend
    on how many keys clip i - 1 had, and the noise comes last, so the clips drawn with snr_db=None are the noisy
    ones minus their noise. Discrete choices come from randint and the rest from uniform draws (both exact on
    every CPU); the Gaussian noise is Box-Muller on uniform draws, in float64.
    """
    samples = round(duration * sampling_rate)
    most = keys[1]
    count = torch.randint(keys[0], most + 1, (n,), generator=generator)  # (n,): keys in each clip
    pressed = torch.randint(0, len(TOUCH_TONE_KEYS), (n, most), generator=generator)  # (n, most)
    ms = torch.rand(n, most, 2, generator=generator, dtype=torch.float64)  # (n, most, tone | gap)
    tone = (tone_ms[0] + ms[..., 0] * (tone_ms[1] - tone_ms[0])) * sampling_rate / 1000  # (n, most): samples
    gap = (gap_ms[0] + ms[..., 1] * (gap_ms[1] - gap_ms[0])) * sampling_rate / 1000
    loudness = 0.1 + 0.4 * torch.rand(n, most, 2, generator=generator, dtype=torch.float64)  # (n, most, row | col)
    phase = 2 * math.pi * torch.rand(n, most, 2, generator=generator, dtype=torch.float64)  # (n, most, row | col)
    loudness, phase = loudness.tolist(), phase.tolist()  # Python floats: cheaper to read one at a time
    start = torch.rand(n, generator=generator, dtype=torch.float64)  # (n,): where in the slack the first key starts
    snr = torch.rand(n, generator=generator, dtype=torch.float64)  # (n,): where in the snr_db range
    half = (samples + 1) // 2
    u = torch.rand(2, n, half, generator=generator, dtype=torch.float64)  # (2, n, samples / 2): for the noise
    waves = torch.zeros(n, samples, dtype=torch.float64)
    texts = []
    lengths, gaps = tone.round().long().tolist(), gap.round().long().tolist()  # (n, most) each, in samples
    t = torch.arange(round(tone_ms[1] * sampling_rate / 1000) + 1, dtype=torch.float64) / sampling_rate  # seconds
    for i, k in enumerate(count.tolist()):
        slack = samples - sum(lengths[i][:k]) - sum(gaps[i][: k - 1])
        if slack < 0:
            raise ValueError(
                f"{k} keys of up to {tone_ms[1]:g} ms with gaps of up to {gap_ms[1]:g} ms do not fit in "
                f"{duration:g} s; shorten the tones or the gaps, or allow fewer keys"
            )
        at = int(start[i] * slack)
        dialled = pressed[i, :k].tolist()
        for j, (key, (a_row, a_col), (p_row, p_col)) in enumerate(zip(dialled, loudness[i], phase[i])):
            row, col = divmod(key, 3)
            span = t[: lengths[i][j]]  # (L,): the tone's own clock, in seconds
            low = a_row * torch.sin(span * (2 * math.pi * ROW_TONES[row]) + p_row)  # (L,)
            high = a_col * torch.sin(span * (2 * math.pi * COLUMN_TONES[col]) + p_col)  # (L,)
            waves[i, at : at + len(span)] = low + high
            at += len(span) + gaps[i][j]
        texts.append("".join(TOUCH_TONE_KEYS[key] for key in dialled))
    if snr_db is not None:
        radius, angle = torch.sqrt(-2 * torch.log1p(-u[0])), 2 * math.pi * u[1]  # Box-Muller: (n, samples / 2) each
        noise = torch.cat([radius * angle.cos(), radius * angle.sin()], dim=1)[:, :samples]  # (n, samples): N(0, 1)
        db = snr_db[0] + snr * (snr_db[1] - snr_db[0])  # (n,)
        want = waves.pow(2).mean(1) / 10 ** (db / 10)  # (n,): the noise power that gives that ratio
        waves = waves + noise * torch.sqrt(want / noise.pow(2).mean(1))[:, None]  # exactly that power
    return waves.float(), texts


def touch_tone_clips(
    n: int,
    *,
    seed: int | torch.Generator,
    duration: float = 1.0,
    sampling_rate: int = SAMPLING_RATE,
    keys: tuple[int, int] = (3, 6),
    tone_ms: tuple[float, float] = (50.0, 90.0),
    gap_ms: tuple[float, float] = (40.0, 70.0),
    snr_db: tuple[float, float] | None = (0.0, 20.0),
) -> tuple[torch.Tensor, list[str]]:
    """n touch-tone clips and what was dialled: (waveforms (n, duration * sampling_rate) float32, texts).

    Each clip dials `keys[0]` to `keys[1]` random keys; each key sounds its row tone plus its column tone, each at
    its own random loudness (0.1 to 0.5) and phase, for tone_ms, then a silent gap of gap_ms (both drawn
    uniformly), the first key starting at a random point. White Gaussian noise is added at a signal-to-noise ratio
    drawn uniformly from snr_db, in dB, over the whole clip: mean(signal^2) / mean(noise^2) = 10^(snr / 10)
    exactly. snr_db=None: no noise. seed: an int, or a torch.Generator to go on drawing from (a stream of
    batches). The same seed gives the same clips on every machine, up to float rounding.
    """
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"n must be a positive int (the number of clips), got {n!r}")
    if isinstance(seed, torch.Generator):
        generator = seed
    elif isinstance(seed, int) and not isinstance(seed, bool):
        generator = torch.Generator().manual_seed(seed)
    else:
        raise TypeError(f"seed must be an int or a torch.Generator, got {type(seed).__name__}")
    nyquist = 2 * max(COLUMN_TONES)
    if not (isinstance(sampling_rate, int) and sampling_rate > nyquist):
        raise ValueError(f"sampling_rate must be an int above {nyquist:g} Hz to hold the tones, got {sampling_rate!r}")
    if not (isinstance(duration, (int, float)) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}")
    lo, hi = _range("keys", keys, 1)
    if lo != int(lo) or hi != int(hi):
        raise ValueError(f"keys must be a pair of ints, got {keys!r}")
    tone, gap = _range("tone_ms", tone_ms, 1.0), _range("gap_ms", gap_ms, 0.0)
    snr = None if snr_db is None else _range("snr_db", snr_db, -math.inf)
    return _clips(n, generator, duration, sampling_rate, (int(lo), int(hi)), tone, gap, snr)


def touch_tone_batches(
    batch_size: int, *, seed: int, tokenizer: CharTokenizer | None = None, n_mels: int = N_MELS, **clips
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless fresh batches: (log-mel features (B, n_mels, frames), targets (B, T) = <bos> keys <eos>, padded).

    One generator seeded with `seed` draws every batch in turn, so the stream repeats for a seed; `clips` go to
    `touch_tone_clips` (duration, sampling_rate, keys, tone_ms, gap_ms, snr_db).
    """
    if not (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    tokenizer = tokenizer or touch_tone_tokenizer()
    generator = torch.Generator().manual_seed(seed)
    while True:
        waves, texts = touch_tone_clips(batch_size, seed=generator, **clips)
        tgt = pad_sequences([tokenizer.encode(t, bos=True, eos=True) for t in texts], tokenizer.pad_id)  # (B, T)
        rate = clips.get("sampling_rate", SAMPLING_RATE)
        yield log_mel(waves, sampling_rate=rate, n_mels=n_mels), tgt


# ---- a decoder that learns nothing: Goertzel filters, as telephone exchanges decode the keys -------------------


def _filter_frequencies(frames: torch.Tensor, frequencies: Sequence[float], sampling_rate: int) -> torch.Tensor:
    """The checks `goertzel_power` and `dft_power` share; returns the frequencies as a float64 tensor (K,)."""
    if not isinstance(frames, torch.Tensor) or not frames.is_floating_point() or frames.dim() < 1:
        raise TypeError("frames must be a float tensor (..., N) of samples")
    if not (isinstance(sampling_rate, int) and sampling_rate > 0):
        raise ValueError(f"sampling_rate must be a positive int, got {sampling_rate!r}")
    f = torch.as_tensor(frequencies, dtype=torch.float64).flatten()  # (K,)
    if f.numel() == 0 or not ((f >= 0) & (f <= sampling_rate / 2)).all():
        raise ValueError(f"frequencies must lie between 0 and sampling_rate / 2 = {sampling_rate / 2:g} Hz")
    return f


def goertzel_power(
    frames: torch.Tensor, frequencies: Sequence[float], sampling_rate: int = SAMPLING_RATE
) -> torch.Tensor:
    """The power of each frame at each frequency, by Goertzel's recursion: frames (..., N) -> (..., len(frequencies)).

    For frequency f, w = 2 pi f / sampling_rate; s[n] = x[n] + 2 cos(w) s[n-1] - s[n-2] over the frame, then
    power = s[N-1]^2 + s[N-2]^2 - 2 cos(w) s[N-1] s[N-2], which is ``|sum_n x[n] exp(-i w n)|^2``: one term of the
    discrete-time Fourier transform, at any frequency (not only the FFT's bins), for one multiplication a sample.
    Computed in the frames' float dtype.
    """
    f = _filter_frequencies(frames, frequencies, sampling_rate)  # (K,)
    coefficient = (2 * torch.cos(2 * math.pi * f / sampling_rate)).to(frames)[:, None]  # (K, 1)
    *batch, N = frames.shape
    x = frames.reshape(-1, N).T.contiguous()  # (N, M): sample n of every frame, side by side
    s1 = torch.zeros(len(f), x.shape[1], dtype=frames.dtype, device=frames.device)  # (K, M): s[n - 1]
    s2 = torch.zeros_like(s1)  # (K, M): s[n - 2]
    for n in range(N):
        s1, s2 = torch.addcmul(x[n] - s2, coefficient, s1), s1  # s[n] = x[n] + 2 cos(w) s[n - 1] - s[n - 2]
    power = s1**2 + s2**2 - coefficient * s1 * s2  # (K, M)
    return power.T.reshape(*batch, len(f))  # (..., K)


def dft_power(frames: torch.Tensor, frequencies: Sequence[float], sampling_rate: int = SAMPLING_RATE) -> torch.Tensor:
    """`goertzel_power`'s numbers as one matrix product: frames (..., N) -> ``|sum_n x[n] exp(-i w n)|^2`` (..., K).

    The same terms of the discrete-time Fourier transform (w = 2 pi f / sampling_rate), without the loop over
    samples, which makes it the faster of the two in PyTorch. Computed in the frames' float dtype.
    """
    f = _filter_frequencies(frames, frequencies, sampling_rate)  # (K,)
    angle = 2 * math.pi * torch.arange(frames.shape[-1], dtype=torch.float64)[:, None] * f / sampling_rate  # (N, K)
    basis = torch.cat([angle.cos(), angle.sin()], dim=1).to(frames)  # (N, 2K): the real and imaginary parts
    parts = frames @ basis  # (..., 2K)
    return parts[..., : len(f)] ** 2 + parts[..., len(f) :] ** 2  # (..., K)


def dtmf_decode(
    waveforms: torch.Tensor,
    *,
    sampling_rate: int = SAMPLING_RATE,
    frame: int = N_FFT,
    hop: int = HOP_LENGTH,
    threshold: float = 10.0,
    dominance: float = 4.0,
    min_frames: int = 2,
) -> list[str]:
    """The keys dialled in each clip, read by a bank of seven Goertzel filters: waveforms (B, samples) -> B strings.

    Each frame of `frame` samples (every `hop`; 25 ms every 10 ms by default) gets its power at the seven keypad
    tones. A frame holds a key when the strongest row tone and the strongest column tone each have more than
    `threshold` times the energy the two leave in the frame (white noise's power at any one frequency is about its
    energy in the frame), and each has `dominance` times the power of the runner-up of its group
    (a frame that cuts a tone short smears it over its neighbours). Consecutive frames that hold a key make one
    press, read as its most frequent key (of a tie, the one heard first); presses shorter than `min_frames` frames
    are dropped. Nothing is learned: the four numbers were set by hand and checked on clips of another seed than
    the test clips'. The powers come from `dft_power`, the matrix form of `goertzel_power` (the same numbers,
    faster in PyTorch than a loop).
    """
    for name, value in (("frame", frame), ("hop", hop), ("min_frames", min_frames)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    for name, value in (("threshold", threshold), ("dominance", dominance)):
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name} must be a positive number (a ratio of powers), got {value!r}")
    _check_waveform(waveforms, frame)
    if waveforms.dim() != 2:
        raise ValueError(f"waveforms must be a batch (B, samples), got shape {tuple(waveforms.shape)}")
    frames = waveforms.float().unfold(-1, frame, hop)  # (B, frames, frame): rectangular windows, not centred
    power = dft_power(frames, (*ROW_TONES, *COLUMN_TONES), sampling_rate)  # (B, frames, 7): Goertzel's numbers
    row, row_key = power[..., :4].topk(2, dim=-1)  # (B, frames, 2) each: the two strongest row tones
    col, col_key = power[..., 4:].topk(2, dim=-1)
    energy = frames.pow(2).sum(-1)  # (B, frames)
    # what the two strongest tones leave of the frame's energy (a pure tone of power P holds 2 P / frame of it)
    rest = (energy - 2 * (row[..., 0] + col[..., 0]) / frame).clamp(min=1e-3 * energy + 1e-20)  # (B, frames)
    holds = (row[..., 0] > threshold * rest) & (col[..., 0] > threshold * rest)  # both tones stand out of the rest
    holds &= (row[..., 0] > dominance * row[..., 1]) & (col[..., 0] > dominance * col[..., 1])  # one tone per group
    key = (row_key[..., 0] * 3 + col_key[..., 0]).masked_fill(~holds, -1).tolist()  # (B, frames): 3 r + c, or -1
    return [presses(clip, min_frames) for clip in key]


def presses(frame_keys: Sequence[int], min_frames: int = 2) -> str:
    """`dtmf_decode`'s last step: each frame's key (its index in TOUCH_TONE_KEYS, -1 where the frame holds none) ->
    the keys pressed. Consecutive frames that hold a key make one press, read as its most frequent key, of a tie the
    one heard first (so that a page's copy of the rule reads the same keys); presses shorter than `min_frames`
    frames are dropped."""
    pressed, run = [], []
    for k in [*frame_keys, -1]:  # a closing -1 ends the last press
        if k >= 0:
            run.append(k)
            continue
        if len(run) >= min_frames:
            pressed.append(TOUCH_TONE_KEYS[max(dict.fromkeys(run), key=run.count)])  # dict: in the order heard
        run = []
    return "".join(pressed)


# ---- the model -----------------------------------------------------------------------------------


def speech_config(**fields) -> TransformerConfig:
    """A TransformerConfig with Whisper's choices, then `fields`.

    Pre-LN with a final norm on each side, exact GELU, LayerNorm eps 1e-5, unscaled embeddings, learned decoder
    positions, the output layer tied to the token table, no dropout; vocab_size counts the output tokens.
    """
    whisper = dict(
        norm_first=True,
        final_norm=True,
        activation="gelu",
        eps=1e-5,
        scale_embedding=False,
        positional="learned",
        tie_embeddings=True,
        dropout=0.0,
    )
    return TransformerConfig(**(whisper | fields))


def stem_frames(n_frames: int) -> int:
    """How many vectors `ConvStem` makes of n_frames frames: (n_frames - 1) // 2 + 1, about half.

    The first convolution (kernel 3, padding 1) keeps the length; the second (kernel 3, stride 2, padding 1)
    gives floor((n + 2 - 3) / 2) + 1.
    """
    if not (isinstance(n_frames, int) and not isinstance(n_frames, bool) and n_frames >= 1):
        raise ValueError(f"n_frames must be a positive int, got {n_frames!r}")
    return (n_frames - 1) // 2 + 1


class ConvStem(nn.Module):
    """Whisper's stem: features (B, n_mels, T) -> (B, stem_frames(T), d_model).

    Conv1d(n_mels -> d_model, kernel 3, padding 1), GELU, Conv1d(d_model -> d_model, kernel 3, stride 2,
    padding 1), GELU: each vector sees 5 frames (frames 2j - 2 to 2j + 2) and there is one every 20 ms.
    """

    def __init__(self, n_mels: int, d_model: int):
        super().__init__()
        self.n_mels = n_mels
        self.conv1 = nn.Conv1d(n_mels, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2, padding=1)
        for conv in (self.conv1, self.conv2):
            # He's start (for ReLU, which GELU resembles): the sound reaches the encoder about as loud as the
            # positions. PyTorch's default start leaves it about 13 times quieter, and a small model trained on
            # touch tones then waits a few hundred steps before it listens.
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features (B, n_mels, T) -> (B, stem_frames(T), d_model)."""
        x = F.gelu(self.conv1(features))  # (B, d_model, T)
        x = F.gelu(self.conv2(x))  # (B, d_model, stem_frames(T))
        return x.transpose(1, 2)  # (B, T', d_model): one token per position, as the encoder reads them


def whisper_positions(length: int, d_model: int) -> torch.Tensor:
    """Whisper's fixed sinusoids: (length, d_model) float32, the sines of every frequency first, then the cosines.

    Frequency i (of d_model / 2) is 10000^(-i / (d_model / 2 - 1)), from 1 down to 1/10000 exactly. The 2017
    paper's table (`positional.sinusoidal_encoding`) interleaves sine and cosine and stops short of 1/10000;
    the two hold the same kind of numbers in another order. Computed in float32, in Whisper's order of operations.
    """
    if d_model % 2 or d_model < 4:
        raise ValueError(f"Whisper's sinusoids need an even d_model of at least 4, got {d_model}")
    step = math.log(10000.0) / (d_model // 2 - 1)
    inv_timescales = torch.exp(-step * torch.arange(d_model // 2))  # (d_model / 2,)
    angles = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)  # (length, d_model / 2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # (length, d_model)


def _without_key_bias(attention: MultiHeadAttention) -> None:
    """Give `attention` a key projection with no bias, as Whisper's (the module docstring says why nothing is lost)."""
    old = attention.k_proj
    attention.k_proj = nn.Linear(old.in_features, old.out_features, bias=False)


class SpeechTranscriber(nn.Module):
    """Whisper's architecture: log-mel features (B, n_mels, n_frames) and tokens (B, T) -> logits (B, T, V).

    `encode` runs the stem and the encoder once per clip; `decode` is the decoder with cross-attention, with the
    same KV caches as `models.Transformer`, so `greedy_decode` is `decoding.greedy_decode`. The decoder's mask is
    causal only, as Whisper's: padding after <eos> is never read by a position the loss counts.
    """

    def __init__(self, config: TransformerConfig, *, n_mels: int = N_MELS, n_frames: int = 100):
        super().__init__()
        cfg = self.config = config
        if cfg.positional != "learned":
            raise ValueError(
                "the decoder's positions are a learned table (the encoder's are Whisper's sinusoids); "
                f"got positional={cfg.positional!r}. Start from speech_config()"
            )
        if not (isinstance(n_mels, int) and n_mels >= 1):
            raise ValueError(f"n_mels must be a positive int, got {n_mels!r}")
        self.n_mels, self.n_frames = n_mels, n_frames
        self.pad_id = cfg.pad_id
        self.stem = ConvStem(n_mels, cfg.d_model)
        # Not a parameter and not saved: the sinusoids are recomputed from the formula.
        self.register_buffer("src_positions", whisper_positions(stem_frames(n_frames), cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg)
        self.tgt_embed = TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, scale=cfg.scale_embedding, pad_id=cfg.pad_id)
        self.tgt_pos = LearnedPositionalEncoding(cfg.d_model, cfg.max_len, cfg.dropout)
        self.decoder = Decoder(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)  # d_model -> logits over the tokens
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                _without_key_bias(module)
        _init_weights(self)
        if cfg.tie_embeddings:
            self.head.weight = self.tgt_embed.table.weight

    def _check_features(self, features: torch.Tensor) -> None:
        if not isinstance(features, torch.Tensor) or features.dim() != 3:
            got = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
            raise ValueError(f"features must be a tensor of shape (B, n_mels, n_frames), got {got}")
        if not features.is_floating_point():
            raise TypeError(f"features must hold floats (a log-mel spectrogram), got dtype {features.dtype}")
        if tuple(features.shape[1:]) != (self.n_mels, self.n_frames):
            raise ValueError(
                f"features must be (B, n_mels={self.n_mels}, n_frames={self.n_frames}), got {tuple(features.shape)}; "
                f"{self.n_frames} frames are {self.n_frames * HOP_LENGTH} samples of {SAMPLING_RATE} Hz audio"
            )

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """features (B, n_mels, n_frames) -> memory (B, S, d_model), S = stem_frames(n_frames); no mask, as Whisper."""
        self._check_features(features)
        x = self.stem(features)  # (B, S, d_model)
        x = self.dropout(x + self.src_positions.to(x.dtype))  # (S, d_model) broadcast over B
        return self.encoder(x)

    def make_src_mask(self, features: torch.Tensor) -> torch.Tensor:
        """features (B, ...) -> (B, 1, 1, S) all True: every clip has the same length, so no key is hidden."""
        B = features.shape[0]
        return torch.ones(B, 1, 1, self.src_positions.shape[0], dtype=torch.bool, device=features.device)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        cross_caches: list[KVCache] | None = None,
        *,
        checked: bool = False,
    ) -> torch.Tensor:
        """tgt (B, T) ids, memory (B, S, d_model) -> logits (B, T, V), as `models.Transformer.decode`.

        Without tgt_mask the mask is causal (continuing after the cached positions); one new token with a cache
        needs none. src_mask: bool, True = may attend, broadcastable to (B, h, T, S), or None.
        """
        check_token_batch(tgt, "tgt")
        past = 0 if caches is None else caches[0].length
        T = tgt.shape[1]
        if tgt_mask is None and T > 1:
            tgt_mask = causal_mask(past + T, tgt.device)[past:]  # (T, past + T)
        x = self.tgt_pos(self.tgt_embed(tgt, checked=checked), offset=past)  # (B, T, d_model)
        x = self.decoder(x, memory, tgt_mask, src_mask, caches, cross_caches)  # (B, T, d_model)
        return self.head(x)  # (B, T, V)

    def forward(self, features: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: features (B, n_mels, n_frames), tgt (B, T) starting with <bos> -> logits (B, T, V)."""
        return self.decode(tgt, self.encode(features))

    def new_cache(self, capacity: int | None = None) -> list[KVCache]:
        """One empty KVCache per decoder layer, for the decoder's self-attention."""
        return [KVCache(capacity) for _ in self.decoder.layers]

    def new_cross_cache(self) -> list[KVCache]:
        """One empty static KVCache per decoder layer: the memory's keys and values, projected once per clip."""
        return [KVCache(static=True) for _ in self.decoder.layers]

    def greedy_decode(
        self, features: torch.Tensor, bos_id: int, eos_id: int, max_new_tokens: int, use_cache: bool = True
    ) -> torch.Tensor:
        """features (B, n_mels, n_frames) -> (B, 1 + n) ids starting with <bos>, padding after <eos>.

        `decoding.greedy_decode`, the book's one greedy loop: it takes a (B, S) source, so the frames travel
        flattened, (B, n_mels * n_frames), and are folded back before the stem.
        """
        self._check_features(features)
        flat = features.flatten(1)  # (B, n_mels * n_frames)
        return decoding.greedy_decode(_FlatFrames(self), flat, bos_id, eos_id, max_new_tokens, use_cache)


class _FlatFrames:
    """A SpeechTranscriber as `decoding.greedy_decode` reads an encoder-decoder, its source flattened to (B, S)."""

    def __init__(self, model: SpeechTranscriber):
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)  # config, pad_id, decode, new_cache, new_cross_cache

    def make_src_mask(self, flat: torch.Tensor) -> torch.Tensor:
        return self.model.make_src_mask(flat)

    def encode(self, flat: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        B = flat.shape[0]  # src_mask is make_src_mask's, all True: every clip has the same length
        return self.model.encode(flat.view(B, self.model.n_mels, self.model.n_frames))  # (B, n_mels, n_frames)


def _init_weights(model: nn.Module) -> None:
    """Xavier-uniform for every linear layer and the token table (its padding row zero), as the book's models."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, TokenEmbedding):
            nn.init.xavier_uniform_(module.table.weight)
            if module.table.padding_idx is not None:
                with torch.no_grad():
                    module.table.weight[module.table.padding_idx].zero_()


# ---- transcribing and scoring ---------------------------------------------------------------------


@torch.inference_mode()
def transcribe(
    model: SpeechTranscriber,
    waveforms: torch.Tensor,
    tokenizer: CharTokenizer,
    *,
    sampling_rate: int,
    max_new_tokens: int | None = None,
    batch_size: int = 256,
) -> list[str]:
    """waveforms (B, samples) of `sampling_rate` Hz audio -> what the model hears in each, greedily.

    The audio must be at the rate the model's features assume (16 kHz: 10 ms frames) and last n_frames frames.
    max_new_tokens: None = as many as the decoder's positions hold after <bos> (config.max_len - 1).
    """
    if sampling_rate != SAMPLING_RATE:
        raise ValueError(
            f"the model's frames are 10 ms of {SAMPLING_RATE} Hz audio; got sampling_rate={sampling_rate!r}. "
            f"Resample to {SAMPLING_RATE} Hz first"
        )
    _check_waveform(waveforms, N_FFT // 2 + 1)
    if waveforms.dim() != 2:
        raise ValueError(f"waveforms must be a batch (B, samples), got shape {tuple(waveforms.shape)}")
    if waveforms.shape[1] // HOP_LENGTH != model.n_frames:
        raise ValueError(
            f"the model takes {model.n_frames} frames, {model.n_frames * HOP_LENGTH} samples; "
            f"got {waveforms.shape[1]} samples ({waveforms.shape[1] // HOP_LENGTH} frames)"
        )
    model.eval()
    device = next(model.parameters()).device
    max_new_tokens = model.config.max_len - 1 if max_new_tokens is None else max_new_tokens
    texts = []
    for start in range(0, waveforms.shape[0], batch_size):
        features = log_mel(waveforms[start : start + batch_size].to(device), n_mels=model.n_mels)  # (b, n_mels, T)
        ids = model.greedy_decode(features, tokenizer.bos_id, tokenizer.eos_id, max_new_tokens)  # (b, 1 + n)
        texts += [tokenizer.decode(row[1:]) for row in ids.cpu()]
    return texts


def edit_distance(hypothesis: Sequence, reference: Sequence) -> int:
    """The fewest insertions, deletions and substitutions that turn hypothesis into reference (Levenshtein)."""
    previous = list(range(len(reference) + 1))  # distances from the empty prefix of hypothesis
    for i, h in enumerate(hypothesis, 1):
        current = [i]
        for j, r in enumerate(reference, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r)))
        previous = current
    return previous[-1]


def character_error_rate(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Edit distances summed over all pairs, divided by the references' summed length.

    0 is perfect; an empty hypothesis scores 1; insertions can take it above 1.
    """
    for name, given in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(given, str) or not all(isinstance(s, str) for s in given):
            raise TypeError(f"{name} must be a list of strings, one per clip, got {type(given).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(f"need one hypothesis per reference, got {len(hypotheses)} and {len(references)}")
    total = sum(len(r) for r in references)
    if total == 0:
        raise ValueError("the references hold no characters, so the error rate is undefined")
    return sum(edit_distance(h, r) for h, r in zip(hypotheses, references)) / total


# ---- training --------------------------------------------------------------------------------------


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Teacher forcing: features and tgt (B, T) -> cross-entropy of predicting tgt[:, 1:], padding skipped."""
    features, tgt = batch
    return label_smoothed_cross_entropy(model(features, tgt[:, :-1]), tgt[:, 1:], model.pad_id)


def train_touch_tones(
    model: SpeechTranscriber,
    *,
    steps: int,
    seed: int,
    batch_size: int = 32,
    lr: float = 2e-3,
    warmup: int = 100,
    progress: bool = True,
    **clips,
) -> History:
    """Train `model` on fresh touch-tone batches (`touch_tone_batches(batch_size, seed=seed, **clips)`) for `steps`.

    `training.fit` with AdamW, warm-up and a cosine decay; returns its History. The number of steps never depends
    on the clock. Score it on held-out clips of another seed with `transcribe` and `character_error_rate`.
    """
    tokenizer = touch_tone_tokenizer()
    if model.config.tgt_vocab_size != tokenizer.vocab_size:
        raise ValueError(
            f"the touch-tone tokenizer has {tokenizer.vocab_size} tokens, the model "
            f"{model.config.tgt_vocab_size}; build it with speech_config(vocab_size={tokenizer.vocab_size})"
        )
    batches = touch_tone_batches(batch_size, seed=seed, tokenizer=tokenizer, n_mels=model.n_mels, **clips)
    return fit(model, _loss, batches, steps, lr=lr, warmup=warmup, progress=progress, desc="touch tones")
