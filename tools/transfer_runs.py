"""Chapter 15's transfer against pre-training steps: the plays_bert recipe run again, the probe measured along it.

    python tools/transfer_runs.py                    # the whole recipe, 10,000 steps (about 75 minutes, one thread)
    python tools/transfer_runs.py --every 500        # how often to stop and measure (default 500 steps)

The recipe is transformer_lib.recipes.RECIPES["plays_bert"], the one that made the shipped checkpoint, with the same
seed, data and steps. Every --every steps, and before the first step, the model is measured twice: its masked-word
accuracy on Twelfth Night (as the recipe always does) and, for each label budget of chapter 15 and seeds 0, 1 and 2,
the linear probe on its frozen features (pretraining.fine_tune("probe", ...)), the method that reads the encoder
without changing it. Measuring changes nothing the model trains on: the masks of the evaluation and the probe's draws
come from their own generators, and the model has no dropout.

The file, transformer_lib/checkpoints/transfer_runs.json (read by recipes.load_transfer_runs), holds one point
per measurement: the steps taken so far, the masked-word loss and accuracy, and the probe's test accuracy per budget
and seed. No weights are kept: the chapter needs only these numbers. It also records the run's first losses, so that
tests/unit/test_pretraining.py can check that this is the recipe that made the shipped checkpoint (whose run was on a
GPU), the machine and the time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import pretraining, recipes
from transformer_lib.checkpoints import CHECKPOINT_DIR

FIRST_STEPS = 20  # as tools/train_checkpoints.py records them


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=500, help="measure every this many steps (default 500)")
    parser.add_argument("--steps", type=int, default=None, help="fewer steps than the recipe's 10,000 (for a test)")
    parser.add_argument("--budgets", type=int, nargs="*", default=list(recipes.LABEL_BUDGETS))
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="probe seeds 0 .. N-1 (default 3)")
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR / "transfer_runs.json")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be a positive number of steps, got {args.every}")
    vocab = recipes.plays_words()
    task = pretraining.order_split(vocab, recipes.BERT_WINDOW)
    pool = task[0].shape[0]
    if any(not 2 <= b <= pool for b in args.budgets):
        parser.error(f"each budget must be from 2 to the pool's {pool} speeches, got {args.budgets}")

    def probe(model: torch.nn.Module) -> dict[str, float]:
        """The probe's test accuracy at every budget and seed, keyed 'probe BUDGET seed SEED'."""
        out = {}
        with torch.enable_grad():  # fit evaluates under no_grad; the probe trains
            for budget in args.budgets:
                for seed in range(args.seeds):
                    _, result = pretraining.fine_tune("probe", model, task, budget, seed)
                    out[f"probe {budget} seed {seed}"] = result["test accuracy"]
        return out

    _, _, held_out = recipes.plays_mlm_data()
    start = recipes.plays_bert(vocab.vocab_size, seed=0)  # the recipe's first weights, before any step
    first = {**recipes.masked_accuracy(start, held_out), **probe(start)}
    began = time.perf_counter()
    _, history, _ = recipes.RECIPES["plays_bert"](steps=args.steps, progress=True, eval_every=args.every, also=probe)
    points = [(0, first)]
    for step, metrics in zip(history.eval_steps, history.evals):
        if step + 1 > points[-1][0]:  # steps taken; the closing evaluation may repeat the last one
            points.append((step + 1, metrics))
    data = {
        "written_by": "tools/transfer_runs.py",
        "recipe": "plays_bert",
        "steps": len(history.steps),
        "every": args.every,
        "budgets": args.budgets,
        "seeds": list(range(args.seeds)),
        "first_losses": history.losses[:FIRST_STEPS],
        "seconds": round(time.perf_counter() - began, 1),
        "threads": torch.get_num_threads(),
        "load": round(os.getloadavg()[0], 2),
        "machine": machine(),
        "torch_version": str(torch.__version__),
        "points": [
            {
                "steps": steps,
                "masked loss": m["masked loss"],
                "masked accuracy": m["masked accuracy"],
                "probe": {str(b): [m[f"probe {b} seed {s}"] for s in range(args.seeds)] for b in args.budgets},
            }
            for steps, m in points
        ],
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    last = data["points"][-1]
    print(f"{len(points)} points in {data['seconds']:.0f} s; after {last['steps']} steps: masked words "
          f"{last['masked accuracy']:.3f}, probe {last['probe']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
