"""Chapter 19's CLIP on the digits over seeds: zero-shot accuracy, retrieval and a linear probe, image by image.

    python tools/clip_runs.py            # seeds 0, 1 and 2
    python tools/clip_runs.py --force    # run again what the file already holds

Each run is transformer_lib.recipes.train_digits_clip(digits_clip(seed), CLIP_STEPS, seed); seed 0 is the shipped
checkpoint's run. The file, transformer_lib/checkpoints/clip_runs.json, records per seed: the zero-shot accuracy on
the 597 held-out images with the held-out phrasings together (CLIP's prompt ensemble), with each phrasing alone and
with the training phrasings that name the digit; which images the held-out ensemble got right ("zero_shot_right",
one 0 or 1 per image, so that runs pair image by image with chapter 16's, which vit_runs.json records the same
way); retrieval recall at 1 and 5 both ways between the held-out images and the 30 distinct held-out captions (three
phrasings of each digit), an image and a caption matching when they are of one digit (the captions name only the
digit, so which image a caption came from cannot be told); a linear probe (vit.logistic_regression, C = 1, the
baseline's setting) on the image tower's features of the training images, its accuracy and "probe_right"; and
the wall time with the machine and its load. A run already in the file is skipped unless --force. The shipped file
was made with one thread (OMP_NUM_THREADS=1) on a two-core machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import clip, recipes, vit


def right_string(right: torch.Tensor) -> str:
    """(B,) booleans -> one "1" or "0" per image, in order."""
    return "".join("1" if r else "0" for r in right.tolist())


def run(seed: int) -> dict:
    """One seed's training and every measurement the chapter reads."""
    train_x, train_y, test_x, test_y = vit.digits_data()
    tokenizer = clip.caption_tokenizer()
    model = recipes.digits_clip(seed)
    history = recipes.train_digits_clip(model, recipes.CLIP_STEPS, seed)
    model.eval()
    classes = clip.class_embeddings(model, tokenizer, clip.HELD_OUT_TEMPLATES)  # (10, D)
    with torch.no_grad():
        image_vectors = model.encode_image(test_x)  # (597, D)
        guesses = (image_vectors @ classes.T).argmax(-1)  # (597,)
        # the 30 distinct held-out captions (three phrasings of each digit), labelled by their digit
        captions = [clip.describe(d, t) for d in range(10) for t in clip.HELD_OUT_TEMPLATES]
        caption_labels = torch.arange(10).repeat_interleave(len(clip.HELD_OUT_TEMPLATES))  # (30,)
        text_vectors = model.encode_text(clip.encode_captions(tokenizer, captions))  # (30, D)
    by_phrasing = {
        t: clip.zero_shot_accuracy(model, test_x, test_y, clip.class_embeddings(model, tokenizer, (t,)))
        for t in clip.HELD_OUT_TEMPLATES + clip.CAPTION_TEMPLATES
    }
    probe = vit.logistic_regression(clip.image_features(model, train_x), train_y, c=1.0)
    with torch.no_grad():
        probe_right = probe(clip.image_features(model, test_x)).argmax(-1) == test_y  # (597,)
    return {
        "seed": seed,
        "zero_shot": history.evals[-1]["zero-shot, held-out phrasings"],
        "zero_shot_training_phrasings": history.evals[-1]["zero-shot, training phrasings"],
        "zero_shot_by_phrasing": by_phrasing,
        "zero_shot_right": right_string(guesses == test_y),
        "recall_at_1": clip.retrieval_recall(image_vectors, text_vectors, 1, test_y, caption_labels),
        "recall_at_5": clip.retrieval_recall(image_vectors, text_vectors, 5, test_y, caption_labels),
        "probe_accuracy": float(probe_right.float().mean()),
        "probe_right": right_string(probe_right),
        "temperature": 1 / math.exp(model.logit_scale.item()),
        "final_loss": sum(history.losses[-50:]) / 50,
        "seconds": round(history.seconds, 1),
        "load": round(os.getloadavg()[0], 2),  # others' work slows a run down
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.clip_runs_path())
    args = parser.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": []}
    data["written_by"] = "tools/clip_runs.py"
    data["steps"] = recipes.CLIP_STEPS
    for seed in range(args.seeds):
        if any(r["seed"] == seed for r in data["runs"]) and not args.force:
            continue
        record = run(seed)
        data["runs"] = sorted([r for r in data["runs"] if r["seed"] != seed] + [record], key=lambda r: r["seed"])
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"seed {seed}: zero-shot {record['zero_shot']:.3f}, probe {record['probe_accuracy']:.3f}, "
              f"recall@1 {record['recall_at_1']} in {record['seconds']:.0f} s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
