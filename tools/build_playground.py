"""Build what the website's playgrounds load: the ONNX models, what the pages need to know, and PyTorch's answers.

    python tools/build_playground.py [--out _build/playground]

Writes into OUT (book/_ext/site_fixes.py copies it into the site's _static/playground/, next to
the pages' own JavaScript and their defaults.json):

    vendor/         onnxruntime-web's ES module and its wasm, copied from node_modules (`npm ci`)
    models/*.onnx   the numbers-to-words translator, the Shakespeare character model as a step model
                    that keeps a KV cache (shakespeare_char_step.onnx: the page feeds the prompt once, then
                    one character per call, carrying the keys and values), its first attention layer with
                    the mask as an input (the masks playground), the bracket classifier, the Shakespeare
                    model's logit lens with every layer's attention (shakespeare_char_lens.onnx: the page
                    "Inside the language model"), the same model with switches as inputs that zero or
                    mean-ablate heads and layers, remove the positions and skip norms
                    (shakespeare_char_ablation.onnx: that page's "Break it, and watch"), chapter 15's BERT
                    with its masked-word head
                    (plays_bert.onnx: the page "Fill in the blank"), chapter 16's Vision Transformer
                    (digits_vit.onnx: the page "Draw a digit") and chapter 17's base, SFT and GRPO models as step
                    models (assistant_*_step.onnx, int8 where it agrees: the page "Three models, one prompt"),
                    chapter 18's BART (plays_bart.onnx: the page "Mend the line"), and chapter 19's VioLA as a
                    step model and its codec's decoder (hear_keys_viola_step.onnx, hear_keys_codec.onnx: the page
                    "Hear the keys"), and chapter 21's three addition models as step models
                    (think_{scratchpad,start,direct}_step.onnx: the page "Watch it think")
    models/meta.json    vocabularies and their special tokens' ids, lengths, file sizes, the bracket
                        head that tracks partners, the patterns that split a line into BERT's words,
                        the held-out digits the ViT's page can load, and each model's int8 trial ("int8")
    expected.json   PyTorch's answers on fixed inputs, which the browser tests ask the pages for: greedy
                    words and text (also the longest the model allows: 8 prompt characters and 120 new),
                    one step's sampling distribution, P(balanced), masked weights, the logit lens's top three
                    next characters per layer and position and every head's induction score, BERT's
                    five likeliest words at a line's blank with the attention from the blank, and the
                    ViT's ten probabilities on drawn digits with its class token's attention, and the three chat
                    models' greedy answers (ids and text) to fixed user lines, with the right answer by program,
                    BART's beam-search candidates on lines with a gap, at every beam width the page offers, and
                    VioLA's codes for fixed keys, temperatures and seeds (sampled with the page's own seeded
                    numbers), the codec's waveform of them, the Goertzel decoder's reading and one spectrogram, and the
                    addition models' greedy answers to fixed problems and their samples for fixed seeds (with the
                    page's seeded numbers), the program's verdicts and the vote

Each page and its model has its module in tools/playground_build/ (numbers_to_words, language_model, masks,
brackets, inside and ablation for one page, fill_blank, draw_digit, assistant with three models, mend_line,
hear_keys with two, and watch_think with three); what
they share is playground_build/common.py: the pages' defaults, which the build reads from
book/_static/playground/defaults.json as the pages do, the check of every file against PyTorch in onnxruntime before
it is written out (a step model's call by call), the greedy decoding of the step models, and the int8 trial that
decides which file ships.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from playground_build import (
    ablation,
    assistant,
    brackets,
    draw_digit,
    fill_blank,
    hear_keys,
    inside,
    language_model,
    masks,
    mend_line,
    numbers_to_words,
    watch_think,
)
from playground_build.common import ROOT

ORT_WEB = ROOT / "node_modules" / "onnxruntime-web"
RUNTIME = ["ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"]  # wasm backend only


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "playground")
    args = parser.parse_args()
    missing = [f for f in RUNTIME if not (ORT_WEB / "dist" / f).is_file()]
    if missing:
        print(
            f"onnxruntime-web is not installed ({', '.join(missing)} missing from {ORT_WEB}/dist); run `npm ci`",
            file=sys.stderr,
        )
        return 1
    shutil.rmtree(args.out, ignore_errors=True)
    vendor, models = args.out / "vendor", args.out / "models"
    vendor.mkdir(parents=True)
    models.mkdir()
    for f in RUNTIME:
        shutil.copy(ORT_WEB / "dist" / f, vendor / f)
    package = json.loads((ORT_WEB / "package.json").read_text())
    (vendor / "README.txt").write_text(
        f"onnxruntime-web {package['version']} ({package['license']} license), "
        "copied from npm by tools/build_playground.py\n"
    )

    torch.manual_seed(0)  # nothing here samples; a fixed seed keeps it so
    meta, expected = {}, {}
    meta["numbers_to_words"], expected["numbers_to_words"] = numbers_to_words.build(models)
    meta["shakespeare_char"], expected["shakespeare_char"] = language_model.build(models)
    meta["masks"], expected["masks"] = masks.build(models)
    meta["bracket_classifier"], expected["bracket_classifier"], onnx_brackets = brackets.build(models)
    if onnx_brackets is not None:  # the int8 file's own numbers, which the page must give (the tests compare)
        expected["onnx"] = {"bracket_classifier": onnx_brackets}
    meta["inside"], expected["inside"] = inside.build(models)
    meta["inside_ablation"], expected["inside_ablation"] = ablation.build(models)
    meta["fill_blank"], expected["fill_blank"] = fill_blank.build(models)
    meta["draw_digit"], expected["draw_digit"] = draw_digit.build(models)
    assistants, expected["assistant"] = assistant.build(models)  # three models for one page, one file each
    meta["mend_line"], expected["mend_line"] = mend_line.build(models)
    meta.update(assistants)
    voices, expected["hear_keys"] = hear_keys.build(models)  # two files for one page: VioLA and the codec's decoder
    meta.update(voices)
    thinkers, expected["watch_think"] = watch_think.build(models)  # three models for one page, one file each
    meta.update(thinkers)
    keys = ["numbers_to_words", "shakespeare_char", "masks", "bracket_classifier", "inside", "inside_ablation"]
    keys += ["fill_blank", "draw_digit"]
    keys += list(assistants)
    keys += ["mend_line"]
    keys += list(voices)
    keys += list(thinkers)
    for key in keys:
        meta[key]["bytes"] = (models / meta[key]["file"]).stat().st_size
    meta["runtime_bytes"] = sum((vendor / f).stat().st_size for f in RUNTIME)
    (models / "meta.json").write_text(json.dumps(meta, ensure_ascii=False))
    (args.out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
    for key in keys:
        m, t = meta[key], meta[key]["int8"]
        if "not_tried" in t:
            print(f"{m['file']}: {m['bytes'] / 1e6:.2f} MB, at most {m['gap']:.1e} from PyTorch; int8 not tried "
                  f"({t['not_tried']})")  # fmt: skip
            continue
        print(
            f"{m['file']}: {m['bytes'] / 1e6:.2f} MB, at most {m['gap']:.1e} from PyTorch; int8 "
            f"{t['int8_bytes'] / 1e6:.2f} MB against fp32 {t['fp32_bytes'] / 1e6:.2f} MB, {t['agree']} of "
            f"{t['inputs']} answers agree ({t['rule']}): {t['shipped']} ships"
        )
    print(
        f"models: {sum(meta[k]['bytes'] for k in keys) / 1e6:.2f} MB shipped, fp32 all: "
        f"{sum(meta[k]['int8'].get('fp32_bytes', meta[k]['bytes']) for k in keys) / 1e6:.2f} MB"
    )
    b = meta["bracket_classifier"]["partner"]
    print(
        f"runtime: {meta['runtime_bytes'] / 1e6:.1f} MB; the partner head is layer {b['layer'] + 1}, "
        f"head {b['head'] + 1} (mean weight {b['mean_weight']:.2f})"
    )
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"the playground's files are in {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
