"""Train the package's shipped checkpoints from transformer_lib.recipes and write them to transformer_lib/checkpoints/.

    python tools/train_checkpoints.py [NAME ...]      (default: every recipe)
    python tools/train_checkpoints.py plays_bert --device cuda   (a recipe that takes a device)

Each file records the recipe's first losses, so that tests/unit/test_checkpoints.py can re-run the
first steps on any machine and check that the file really comes from its recipe.
"""

from __future__ import annotations

import argparse
import sys

import torch

import transformer_lib as tl
from transformer_lib import checkpoints, recipes

FIRST_STEPS = 20  # how many losses the test re-computes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {sorted(recipes.RECIPES)}")
    parser.add_argument("--device", help="train on this device (only recipes with a `device` argument: plays_bert)")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(recipes.RECIPES))
    if unknown:
        parser.error(f"no recipe called {unknown}; the recipes are {sorted(recipes.RECIPES)}")
    for name in args.names or sorted(recipes.RECIPES):
        on = {"device": args.device} if args.device else {}  # a recipe without the argument refuses it by name
        model, history, init = recipes.RECIPES[name](progress=True, **on)
        path = checkpoints.save_checkpoint(
            model,
            checkpoints.CHECKPOINT_DIR / f"{name}.pt",
            init=init,
            recipe=name,
            steps=len(history.steps),
            first_losses=history.losses[:FIRST_STEPS],
            losses=history.losses,
            eval_steps=history.eval_steps,
            evals=history.evals,
            seconds=round(history.seconds, 1),
            torch_version=str(torch.__version__),
            device=torch.cuda.get_device_name() if str(args.device).startswith("cuda") else "cpu",
            transformer_lib_version=tl.__version__,
        )
        print(f"{name}: {len(history.steps)} steps in {history.seconds:.1f} s, {history.evals[-1]} -> {path}")
        if name == "shakespeare_bpe":  # its tokenizer ships beside it, so that loading the data trains nothing
            merges = tl.train_bpe(tl.corpus.shakespeare("train"), recipes.SHAKESPEARE_MERGES)
            merges.save(recipes.shakespeare_bpe_path())


if __name__ == "__main__":
    sys.exit(main())
