"""Chapter 16's comparisons: the digits ViT's variants and a convolutional network, over seeds.

    python tools/vit_runs.py                  # every variant, seeds 0, 1 and 2
    python tools/vit_runs.py "mean pooling"   # some variants
    python tools/vit_runs.py --force          # run again what the file already holds

Each run is transformer_lib.recipes.train_digits_vit(model, VIT_STEPS, seed, **train) with (model, train) =
recipes.digits_variant(name, seed): the ViT with a class token, with mean pooling, without positions, trained on
images moved at random by up to a pixel, and a small convolutional network (vit.DigitsCNN). The file,
transformer_lib/checkpoints/vit_runs.json, records per variant and seed the held-out accuracy, the accuracy on the
same images with their patches shuffled (a new order per image, the same orders for every run), the accuracy on
the same images each moved by one pixel in one of the eight directions (the same moves for every run), which
images each got right ("right", "shuffled_right", "shifted_right": one 0 or 1 per held-out image, so that runs
pair image by image), and the wall time with the machine and its load; beside them, scikit-learn's logistic
regression on the same split. A run
already in the file is skipped unless --force. tests/unit/test_vit.py re-runs one and compares. The shipped file
was made with one thread (OMP_NUM_THREADS=1) on a two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import recipes, vit

SHUFFLE_SEED = 16  # the test images' shuffled patch orders, the same for every run
SHIFT_SEED = 17  # the test images' one-pixel moves, the same for every run


def right_string(model, images: torch.Tensor, labels: torch.Tensor) -> str:
    """Which of `images` the model gets right, in eval mode: one "1" or "0" per image, in order."""
    model.eval()
    with torch.inference_mode():
        right = model(images).argmax(-1) == labels  # (B,)
    return "".join("1" if r else "0" for r in right.tolist())


def logistic_regression_accuracy() -> float:
    """scikit-learn's logistic regression on the 64 raw pixels, the ViT's split: the baseline."""
    from sklearn.linear_model import LogisticRegression

    train_x, train_y, test_x, test_y = vit.digits_data()
    fitted = LogisticRegression(max_iter=5000).fit(train_x.flatten(1).numpy(), train_y.numpy())
    return float(fitted.score(test_x.flatten(1).numpy(), test_y.numpy()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"some of {list(recipes.VIT_VARIANTS)} (default: all)")
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.vit_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants) - set(recipes.VIT_VARIANTS))
    if unknown:
        parser.error(f"no variant called {unknown}; the variants are {list(recipes.VIT_VARIANTS)}")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data["written_by"] = "tools/vit_runs.py"
    data["steps"] = recipes.VIT_STEPS
    data["logistic regression"] = logistic_regression_accuracy()
    _, _, test_x, test_y = vit.digits_data()
    shuffled = vit.shuffle_patches(test_x, 2, torch.Generator().manual_seed(SHUFFLE_SEED))
    shifted = vit.shift_images(test_x, vit.random_shifts(len(test_y), 1, torch.Generator().manual_seed(SHIFT_SEED)))
    for name in args.variants or recipes.VIT_VARIANTS:
        records = data["runs"].setdefault(name, [])
        for seed in range(args.seeds):
            if any(r["seed"] == seed for r in records) and not args.force:
                continue
            model, train = recipes.digits_variant(name, seed)
            history = recipes.train_digits_vit(model, recipes.VIT_STEPS, seed, **train)
            record = {
                "seed": seed,
                "test_accuracy": history.evals[-1]["test accuracy"],
                "shuffled_accuracy": vit.image_accuracy(model, shuffled, test_y),
                "shifted_accuracy": vit.image_accuracy(model, shifted, test_y),
                "right": right_string(model, test_x, test_y),
                "shuffled_right": right_string(model, shuffled, test_y),
                "shifted_right": right_string(model, shifted, test_y),
                "seconds": round(history.seconds, 1),
                "load": round(os.getloadavg()[0], 2),  # others' work slows a run down
                "machine": machine(),
            }
            records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
            args.out.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{name}, seed {seed}: {record['test_accuracy']:.3f} (shuffled {record['shuffled_accuracy']:.3f}, "
                  f"shifted {record['shifted_accuracy']:.3f}) in {record['seconds']:.0f} s", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
