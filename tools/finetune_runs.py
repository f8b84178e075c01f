"""Chapter 15's learning curve: four ways to learn the order task, at several label budgets and seeds.

    python tools/finetune_runs.py                  # every method at every budget, seeds 0, 1 and 2
    python tools/finetune_runs.py probe full       # some methods
    python tools/finetune_runs.py --force lora     # run again what the file already holds

Each run is transformer_lib.pretraining.fine_tune(method, the shipped plays_bert checkpoint, the order task
(Twelfth Night's speeches as written or with their words scrambled: pretraining.order_split), budget, seed).
The file, transformer_lib/checkpoints/finetune_runs.json, records per method, budget and seed the test accuracy,
the trainable parameters and the wall time with the machine and its load, and which test speeches it got right
(test_correct: a string of 0s and 1s, one per speech in the test's order), so that chapter 15 can pair two methods
over the same test speeches as well as over seeds. A run already in the file is skipped
unless --force, and the file is written after every run, so an interrupted sweep goes on where it stopped.
tests/unit/test_pretraining.py re-runs one point and compares. The shipped file was made with one thread
(OMP_NUM_THREADS=1) on a two-core machine. Its scratch runs predate test_correct; `--force probe full lora` added
it to the other 36, which came out with the same accuracies as before (their times show a busier machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import pretraining, recipes
from transformer_lib.checkpoints import load_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", help=f"some of {list(pretraining.METHODS)} (default: all)")
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.finetune_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.methods) - set(pretraining.METHODS))
    if unknown:
        parser.error(f"no method called {unknown}; the methods are {list(pretraining.METHODS)}")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data["written_by"] = "tools/finetune_runs.py"
    data["budgets"] = list(recipes.LABEL_BUDGETS)
    pretrained, _ = load_checkpoint("plays_bert")
    task = pretraining.order_split(recipes.plays_words(), recipes.BERT_WINDOW)
    data["test majority"] = max(float(task[3].float().mean()), 1 - float(task[3].float().mean()))
    for method in args.methods or pretraining.METHODS:
        for budget in recipes.LABEL_BUDGETS:
            records = data["runs"].setdefault(f"{method} {budget}", [])
            for seed in range(args.seeds):
                if any(r["seed"] == seed for r in records) and not args.force:
                    continue
                _, result = pretraining.fine_tune(method, pretrained, task, budget, seed)
                correct = result.pop("test correct", None)  # (300,) bool: each test speech right or not
                record = {"seed": seed, **{k.replace(" ", "_"): v for k, v in result.items()}}
                if correct is not None:  # one character per test speech, "1" where right, in the test's order
                    record["test_correct"] = "".join("1" if c else "0" for c in correct.tolist())
                record["load"] = round(os.getloadavg()[0], 2)  # others' work slows a run down
                record["machine"] = machine()
                records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
                args.out.write_text(json.dumps(data, indent=1) + "\n")
                print(f"{method}, {budget} labels, seed {seed}: {result['test accuracy']:.3f} "
                      f"in {result['seconds']:.0f} s", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
