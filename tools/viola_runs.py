"""Chapter 19's VioLA measured: recognition beside chapters 16 and 18 on two lines, and synthesis by temperature.

    python tools/viola_runs.py

Reads the shipped touch_tone_viola and touch_tone_codec checkpoints and chapter 16's touch_tones; trains chapter
18's CTC model from scratch on chapter 16's stream again (recipes.ctc_stream(0), about 80 s, the run ctc_runs.json
files as "stream scratch" seed 0), because ctc_runs.json holds its transcripts of the noisy line only.

Every measure is on chapter 16's 300 held-out clips (recipes.viola_test), on two lines: "noisy" (0 to 20 dB, what
chapters 16 and 18 trained on) and "quiet" (30 to 40 dB, what the codec and VioLA trained on), the same keys,
timings and noise at another level. The file, transformer_lib/checkpoints/viola_runs.json, records one 0 or 1 per
clip, 1 where the keys came out exactly:

- "recognition": per line, chapter 16's encoder-decoder (16 kHz), chapter 18's CTC model (8 kHz), VioLA (the clip
  at 4 kHz coded by the codec's first two codebooks), the Goertzel decoder on the 4 kHz clip (it learned nothing),
  and the Goertzel decoder on what the codec's two codebooks rebuild (what VioLA's codes still say);
- "synthesis": per temperature of recipes.SYNTHESIS_TEMPERATURES, for sampling seeds 0, 1 and 2 (one run at
  temperature 0, which draws nothing), VioLA's synthesis for each clip's keys, decoded by the codec and read back by
  the Goertzel decoder;
- "codec": the quiet clips' true codes decoded from 1 to 4 codebooks and read back (what synthesis is set beside);
- "onsets" and "keys read": for the true first two codebooks, greedy synthesis ("0") and sampling seed 0 at
  temperature 1 ("1"), where each clip's sound starts (ms) and how many keys the Goertzel decoder reads in it;

and the wall time with the machine. The shipped file was made with one thread (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from seed_runs import write_run_file  # tools/seed_runs.py, beside this file
from transformer_lib import recipes, speech, viola
from transformer_lib.checkpoints import load_checkpoint
from transformer_lib.wav2vec2 import normalize_samples

SAMPLING_SEEDS = (0, 1, 2)


def right_string(heard: list[str], texts: list[str]) -> str:
    """One "1" per clip read exactly, "0" otherwise."""
    return "".join("1" if h == t else "0" for h, t in zip(heard, texts))


def onsets_ms(waves: torch.Tensor) -> list[int]:
    """Where each clip's sound starts, in ms: the first 10 ms frame whose mean power reaches a tenth of the clip's
    loudest frame's. waves (B, 4000) at the codec's rate."""
    power = waves.unfold(-1, recipes.CODEC_RATE // 100, recipes.CODEC_RATE // 100).pow(2).mean(-1)  # (B, 100)
    return ((power >= 0.1 * power.amax(-1, keepdim=True)).float().argmax(-1) * 10).tolist()


def goertzel(waves: torch.Tensor) -> list[str]:
    """The Goertzel decoder at the codec's rate, with the settings every chapter 19 measure uses."""
    return speech.dtmf_decode(waves, sampling_rate=recipes.CODEC_RATE, frame=100, hop=40)


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=recipes.viola_runs_path())
    args = parser.parse_args(argv)
    start = time.perf_counter()
    codec, _ = load_checkpoint("touch_tone_codec")
    model, _ = load_checkpoint("touch_tone_viola")
    heard_16, _ = load_checkpoint("touch_tones")
    vocab = recipes.viola_vocabulary()
    with torch.enable_grad():
        ctc, ctc_scores = recipes.ctc_stream(0)
    ctc.eval()
    data = {"written_by": "tools/viola_runs.py", "clips": recipes._SPEECH_TEST[0], "lines": recipes.VIOLA_LINES}
    data["recognition"] = {}
    for line in recipes.VIOLA_LINES:
        waves, texts = recipes.viola_test(line)  # (300, 16000)
        at_8k = normalize_samples(recipes.viola_test(line, recipes.W2V_RATE)[0])  # (300, 8000), as chapter 18 hears
        at_4k = recipes.viola_test(line, recipes.CODEC_RATE)[0]  # (300, 4000)
        codes = codec.encode(at_4k, recipes.VIOLA_CODEBOOKS)  # (300, 100, 2)
        tokenizer = speech.touch_tone_tokenizer()
        readers = {
            "chapter 16": speech.transcribe(heard_16, waves, tokenizer, sampling_rate=speech.SAMPLING_RATE,
                                            max_new_tokens=8),
            "chapter 18": recipes.ctc_transcribe(ctc, at_8k),
            "VioLA": viola.recognise(model, vocab, codes),
            "Goertzel": goertzel(at_4k),
            "codec, 2 codebooks": goertzel(codec.decode(codes)),
        }  # fmt: skip
        data["recognition"][line] = {name: right_string(heard, texts) for name, heard in readers.items()}
        shares = {name: f"{s.count('1') / len(s):.3f}" for name, s in data["recognition"][line].items()}
        print(line, shares, flush=True)
    data["ctc_stream_exact_share"] = ctc_scores["exact share"]  # ctc_runs.json's "stream scratch" seed 0, again
    waves, texts = recipes.viola_test("quiet", recipes.CODEC_RATE)
    codes = codec.encode(waves)  # (300, 100, 4)
    rebuilt = {k: codec.decode(codes[..., :k]) for k in range(1, codes.shape[-1] + 1)}  # (300, 4000) each
    data["codec"] = {f"{k} codebooks": right_string(goertzel(wave), texts) for k, wave in rebuilt.items()}
    data["onsets"] = {"true codes": onsets_ms(rebuilt[recipes.VIOLA_CODEBOOKS])}  # where each clip's sound starts
    data["keys read"] = {"true codes": [len(r) for r in goertzel(rebuilt[recipes.VIOLA_CODEBOOKS])]}
    data["synthesis"] = {}
    frames = codes.shape[1]
    for temperature in recipes.SYNTHESIS_TEMPERATURES:
        runs = []
        for seed in SAMPLING_SEEDS[: 1 if temperature == 0 else None]:
            generator = torch.Generator().manual_seed(seed)
            written = viola.synthesise(model, vocab, texts, frames, temperature=temperature, generator=generator)
            spoken = codec.decode(written)  # written (300, 100, 2) -> (300, 4000)
            runs.append(right_string(goertzel(spoken), texts))
            if seed == 0 and temperature in (0.0, 1.0):  # greedy, and sampled at 1: where they start, how many keys
                data["onsets"][f"{temperature:g}"] = onsets_ms(spoken)
                data["keys read"][f"{temperature:g}"] = [len(r) for r in goertzel(spoken)]
        data["synthesis"][f"{temperature:g}"] = runs
        print(f"temperature {temperature:g}: read back {[r.count('1') for r in runs]} of {len(texts)}", flush=True)
    write_run_file(data, args.out, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
