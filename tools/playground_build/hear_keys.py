"""The hear-the-keys page (book/playground/hear_keys.md): chapter 19's VioLA speaks the keys the reader types, the codec
turns its codes into sound, and a Goertzel decoder that learned nothing reads the sound back.

Two files. models/hear_keys_viola_step.onnx is the touch-tone VioLA (recipes.touch_tone_viola, the checkpoint
touch_tone_viola) as a step model with a KV cache (transformer_lib.export.export_step, checked call by call along
a whole synthesis, common.check_steps). models/hear_keys_codec.onnx is the codec's way back (recipes.touch_tone_codec,
the checkpoint touch_tone_codec): one second of codes of its first two codebooks, (1, 100, 2), to 4,000 samples,
the sum of the two codebooks' entries through the decoder, as Codec.decode does with two codebooks. Its shapes are
fixed: the codec's quantizer reads how many codebooks it has from the codes' last dimension, a Python int that a
trace would freeze anyway, and the page only ever speaks one second.

The page writes as viola.synthesise does, with one difference it asks for: the numbers it samples with come from
the pages' seeded generator (mulberry32, common.mulberry32 here, playground.js's generator there), one per position,
and each position's code is the inverse of its codebook's cumulative distribution at that number (synthesise's
`uniforms`). So a seed gives the same codes in PyTorch and in the page, code for code, unless a number falls within
a rounding error of a boundary of the distribution: the build requires every recorded case to keep each number
MARGIN or more from every boundary, and greedy cases each step's two likeliest codes NEAR_TIE apart.

The sound is read back by the page's copy of speech.dtmf_decode with GOERTZEL's settings (those viola_scores judges
the chapter's synthesis with); the build requires PyTorch's waveform and onnxruntime's to read the same keys. The
page also draws the clip's spectrogram as the chapter's figure does (torch.stft, 128-sample Hann windows every 32
samples, centred), recorded here for the default case.

The VioLA's int8 file would ship only where its codes on all AGREEMENT cases are PyTorch fp32's, code for code. The
codec has no matrix product for onnxruntime's int8 quantizer to quantize (its weights are convolutions and its
codebooks a lookup), so it is not tried: its meta.json says so.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import recipes, viola
from transformer_lib.codec import Codec
from transformer_lib.export import _trace, export_step
from transformer_lib.speech import COLUMN_TONES, ROW_TONES, TOUCH_TONE_KEYS, dtmf_decode

from .common import AGREEMENT, check_session, check_steps, mulberry32, page_defaults, try_int8

PAGE = page_defaults("hear_keys")  # the form's starting values: {"hear-keys": ..., "hear-temperature": ..., ...}
DEFAULT = (PAGE["hear-keys"], float(PAGE["hear-temperature"]), int(PAGE["hear-seed"]))
# (keys, temperature, seed): the page's default, the same keys greedily (the late start the chapter shows), other
# seeds and each other temperature, a single key and six (the fewest and most keys the page takes)
CASES = list(
    dict.fromkeys(
        [
            DEFAULT,
            (DEFAULT[0], 0.0, DEFAULT[2]),
            (DEFAULT[0], 1.0, 2),
            (DEFAULT[0], 0.8, 3),
            (DEFAULT[0], 1.2, 11),
            (DEFAULT[0], 0.5, 1),
            ("5", 1.0, 9),
            ("*0#147", 1.0, 7),
        ]
    )
)
TEMPERATURES = (0.0, 0.5, 0.8, 1.0, 1.2)  # the page's choices: the chapter's (recipes.SYNTHESIS_TEMPERATURES)
MIN_KEYS, MAX_KEYS = 1, 6  # 6: the most keys a training clip held, and so the longest sequence trained (210 ids)
GOERTZEL = {"frame": 100, "hop": 40, "threshold": 10.0, "dominance": 4.0, "min_frames": 2}  # viola_scores' reader
STFT = {"n_fft": 128, "hop": 32}  # the chapter's spectrograms: 32 ms windows every 8 ms at 4 kHz
MARGIN = 1e-4  # the least distance from a sampling number to a boundary of the cumulative distribution
NEAR_TIE = 1e-3  # the least gap between the two likeliest logits of a greedy step


class CodecSpeaker(nn.Module):
    """codes (1, F, Q) of the codec's first Q codebooks -> samples (1, F x hop), Codec.decode with Q fixed."""

    def __init__(self, codec: Codec, codebooks: int):
        super().__init__()
        self.codec, self.codebooks = codec, codebooks

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        layers = self.codec.quantizer.layers[: self.codebooks]
        frames = sum(layer.codebook.lookup(codes[..., q]) for q, layer in enumerate(layers))  # (1, F, dim)
        return self.codec.decoder(frames)  # (1, F x hop)


def uniforms(seed: int, n: int) -> torch.Tensor:
    """The page's first n sampling numbers for `seed`: (1, n), float64, from mulberry32."""
    draw = mulberry32(seed)
    return torch.tensor([[next(draw) for _ in range(n)]], dtype=torch.float64)


def _prompt(vocab: viola.SoundVocabulary, keys: str) -> list[int]:
    """<bos> <synthesise> keys <sep>: what the page feeds first."""
    return [vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids(keys), vocab.sep_id]


def _margin(model, vocab: viola.SoundVocabulary, keys: str, ids: list[int], temperature: float, u) -> float:
    """How near rounding could change the codes: along the written `ids` (the codes' ids, interleaved), the least
    distance from each step's number to its distribution's boundaries (sampling) or the least gap between the two
    likeliest codes (greedy)."""
    prompt = _prompt(vocab, keys)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids[:-1]]))[0, len(prompt) - 1 :]  # (F Q, V): each code's logits
    least = float("inf")
    for position, row in enumerate(logits):
        span = vocab.code_range(position % vocab.codebooks)
        scores = row[span.start : span.stop].double()  # (codes,)
        if temperature == 0:
            top2 = scores.topk(2).values
            least = min(least, float(top2[0] - top2[1]))
        else:
            cdf = (scores / temperature).softmax(-1).cumsum(-1)
            least = min(least, float((cdf[:-1] - u[0, position]).abs().min()))
    return least


def page_codes(session: ort.InferenceSession, model, vocab, keys: str, frames: int, temperature: float, seed: int):
    """The page's loop in onnxruntime: the prompt once, then each code, from its position's codebook alone, greedy at
    temperature 0, else by the inverse distribution at mulberry32(seed)'s next number. -> the ids written (F Q)."""
    draw = mulberry32(seed)
    keys_past = values_past = tl.export.empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k)
    feed, written = np.array([_prompt(vocab, keys)]), []
    for position in range(frames * vocab.codebooks):
        logits, keys_past, values_past = session.run(
            None, {"tokens": feed, "past_keys": keys_past, "past_values": values_past}
        )
        span = vocab.code_range(position % vocab.codebooks)
        scores = logits[0, -1, span.start : span.stop].astype(np.float64)  # (codes,)
        if temperature == 0:
            code = int(scores.argmax())
        else:
            scaled = np.exp((scores - scores.max()) / temperature)
            probs, u, total, code = scaled / scaled.sum(), next(draw), 0.0, None
            for i, p in enumerate(probs):  # playground.js's order of sums, first to last
                total += p
                if u < total:
                    code = i
                    break
            code = int(np.flatnonzero(probs > 0)[-1]) if code is None else code
        written.append(span.start + code)
        feed = np.array([[written[-1]]])  # (1, 1)
    return written


def _spectrogram(wave: torch.Tensor) -> torch.Tensor:
    """The page's spectrogram of one clip (T,): |STFT|, (n_fft / 2 + 1, 1 + T / hop), as the chapter draws it."""
    window = torch.hann_window(STFT["n_fft"], dtype=wave.dtype)
    return torch.stft(wave, STFT["n_fft"], STFT["hop"], window=window, return_complex=True).abs()


def _case(model, vocab, speaker, codec_session, keys: str, temperature: float, seed: int, frames: int) -> dict:
    """PyTorch's answer for one case, checked for margins and against onnxruntime's waveform and reading."""
    Q = vocab.codebooks
    u = uniforms(seed, frames * Q)
    codes = viola.synthesise(model, vocab, [keys], frames, temperature=temperature, uniforms=u)  # (1, F, Q)
    ids = vocab.code_ids(codes)[0].tolist()  # (F Q,): interleaved
    margin = _margin(model, vocab, keys, ids, temperature, u)
    if margin < (NEAR_TIE if temperature == 0 else MARGIN):
        raise SystemExit(f"hear_keys: {keys!r} at {temperature} with seed {seed} passes a near tie ({margin:.1e})")
    with torch.no_grad():
        wave = speaker(codes)  # (1, F x hop)
    check_session(f"hear_keys_codec on {keys!r}", codec_session, (codes,), (wave,))
    onnx_wave = torch.from_numpy(codec_session.run(None, {"codes": codes.numpy()})[0])
    read = dtmf_decode(wave, sampling_rate=recipes.CODEC_RATE, **GOERTZEL)[0]
    if dtmf_decode(onnx_wave, sampling_rate=recipes.CODEC_RATE, **GOERTZEL)[0] != read:  # the page's numbers
        raise SystemExit(f"hear_keys: {keys!r} at {temperature} with seed {seed} reads otherwise from onnxruntime's")
    return {
        "keys": keys,
        "temperature": temperature,
        "seed": seed,
        "ids": ids,
        "codes": codes[0].tolist(),
        "margin": margin,
        "waveform": [round(float(x), 7) for x in wave[0]],
        "read": read,
    }


def _speaker_file(codec, vocab, frames: int, models: Path) -> tuple[Path, ort.InferenceSession, CodecSpeaker]:
    """Write the codec's way back, checked on random codes against Codec.decode and onnxruntime."""
    speaker = CodecSpeaker(codec, vocab.codebooks).eval()
    g = torch.Generator().manual_seed(0)
    example = torch.randint(0, vocab.codes, (1, frames, vocab.codebooks), generator=g)  # (1, F, Q)
    path = _trace(speaker, (example,), models / "hear_keys_codec.onnx", ["codes"], ["samples"], {})
    session = ort.InferenceSession(str(path))
    with torch.no_grad():
        for trial in range(3):
            codes = torch.randint(0, vocab.codes, (1, frames, vocab.codebooks), generator=g)
            wave = speaker(codes)
            if not torch.equal(wave, codec.decode(codes)):
                raise SystemExit("hear_keys: the speaker is not Codec.decode with two codebooks")
            check_session(f"hear_keys_codec, random codes {trial}", session, (codes,), (wave,))
    return path, session, speaker


def _speaker_gap(session: ort.InferenceSession, speaker: CodecSpeaker, cases: list[dict]) -> float:
    """The largest difference between onnxruntime's samples and PyTorch's over the recorded cases."""
    gap = 0.0
    for case in cases:
        codes = torch.tensor([case["codes"]])  # (1, F, Q)
        with torch.no_grad():
            wave = speaker(codes).numpy()
        gap = max(gap, float(np.abs(session.run(None, {"codes": codes.numpy()})[0] - wave).max()))
    return gap


def _trial_cases(n: int) -> list[tuple[str, float, int]]:
    """Seeded cases for the int8 trial beyond CASES: 3 to 6 keys (as trained), temperature 1, seeds from 100."""
    rng = random.Random(0)
    return [("".join(rng.choices(TOUCH_TONE_KEYS, k=rng.randint(3, 6))), 1.0, 100 + i) for i in range(n)]


def build(models: Path) -> tuple[dict[str, dict], dict]:
    """Write both files into `models`; -> ({key: its meta}, PyTorch's answers on CASES)."""
    model, _ = tl.load_checkpoint("touch_tone_viola")
    codec, _ = tl.load_checkpoint("touch_tone_codec")
    model, codec = model.eval(), codec.eval()
    vocab = recipes.viola_vocabulary()
    frames = recipes.CODEC_RATE // codec.hop  # one second: 100 frames
    if (model.config.vocab_size, vocab.codebooks) != (vocab.size, recipes.VIOLA_CODEBOOKS):
        raise SystemExit(f"touch_tone_viola has {model.config.vocab_size} ids, expected {vocab.size}")
    codec_path, codec_session, speaker = _speaker_file(codec, vocab, frames, models)

    path = export_step(model, models / "hear_keys_viola_step.onnx")
    longest = DEFAULT[0] if len(DEFAULT[0]) == MAX_KEYS else "*0#147"
    sequence = torch.tensor([_prompt(vocab, longest) + [vocab.first_code] * (frames * vocab.codebooks)])
    written = viola.synthesise(model, vocab, [longest], frames, temperature=0.0)
    sequence[0, len(_prompt(vocab, longest)) :] = vocab.code_ids(written)[0]  # (1, 3 + 6 + 200): the longest
    gap = check_steps(path, model, sequence, len(_prompt(vocab, longest)))

    cases = [_case(model, vocab, speaker, codec_session, *case, frames) for case in CASES]
    session = ort.InferenceSession(str(path))
    for case in cases:  # the page's loop, in Python: the same codes
        if page_codes(session, model, vocab, case["keys"], frames, case["temperature"], case["seed"]) != case["ids"]:
            raise SystemExit(f"hear_keys: onnxruntime writes other codes for {case['keys']!r}, seed {case['seed']}")
    trial = CASES + _trial_cases(AGREEMENT - len(CASES))
    reference = [
        vocab.code_ids(viola.synthesise(model, vocab, [k], frames, temperature=t, uniforms=uniforms(s, frames * 2)))[
            0
        ].tolist()
        for k, t, s in trial
    ]
    path, int8 = try_int8(
        path,
        "the codes identical, all 200, with the page's sampling numbers",
        trial,
        reference,
        lambda session, case: page_codes(session, model, vocab, case[0], frames, case[1], case[2]),
    )
    if int8["shipped"] == "int8":  # the int8 file's own distance from PyTorch, measured the same way, not held
        gap = check_steps(path, model, sequence, len(_prompt(vocab, longest)), tolerance=None)
    attn = model.decoder.layers[0].self_attn
    viola_meta = {
        "keys": vocab.keys,
        "first_key": vocab.first_key,
        "first_code": vocab.first_code,
        "codes": vocab.codes,
        "codebooks": vocab.codebooks,
        "bos": vocab.bos_id,
        "sep": vocab.sep_id,
        "synthesise": vocab.task_id("synthesise"),
        "frames": frames,
        "min_keys": MIN_KEYS,
        "max_keys": MAX_KEYS,
        "temperatures": list(TEMPERATURES),
        "max_len": model.config.max_len,
        "layers": model.config.num_layers,
        "heads": model.config.num_heads,
        "kv_heads": attn.num_kv_heads,  # the past's shape, (layers, 1, kv_heads, T_past, head_width)
        "head_width": attn.d_k,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    codec_meta = {
        "sampling_rate": recipes.CODEC_RATE,
        "hop": codec.hop,
        "frames": frames,
        "codebooks": vocab.codebooks,
        "size": vocab.codes,
        "row_tones": list(ROW_TONES),
        "column_tones": list(COLUMN_TONES),
        "keypad": TOUCH_TONE_KEYS,
        "goertzel": GOERTZEL,
        "stft": STFT,
        "gap": _speaker_gap(codec_session, speaker, cases),
        "file": codec_path.name,
        "int8": {"shipped": "fp32", "not_tried": "no matrix product to quantize: convolutions and a lookup"},
    }
    default = torch.tensor(cases[0]["waveform"])  # (T,)
    expected = {
        "cases": cases,
        "spectrogram": [[round(float(x), 6) for x in row] for row in _spectrogram(default)],  # (65, 126)
    }
    return {"hear_keys_viola": viola_meta, "hear_keys_codec": codec_meta}, expected
