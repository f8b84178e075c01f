"""Chapter 15's learning curve: four ways to learn the order task, at several label budgets and seeds.

    python tools/finetune_runs.py                  # every method at every budget, seeds 0, 1 and 2
    python tools/finetune_runs.py probe full       # some methods
    python tools/finetune_runs.py --force lora     # run again what the file already holds
    python tools/finetune_runs.py --pooling mean full lora   # read the mean of the words' vectors, not [CLS]
    python tools/finetune_runs.py --forgetting     # what full fine-tuning and LoRA cost the masked-word task

Each run is transformer_lib.pretraining.fine_tune(method, the shipped plays_bert checkpoint, the order task
(Twelfth Night's speeches as written or with their words scrambled: pretraining.order_split), budget, seed).
The file, transformer_lib/checkpoints/finetune_runs.json, records per method, budget and seed the test accuracy,
the trainable parameters and the wall time with the machine and its load, and which test speeches it got right
(test_correct: a string of 0s and 1s, one per speech in the test's order), so that chapter 15 can pair two methods
over the same test speeches as well as over seeds. A run already in the file is skipped
unless --force, and the file is written after every run, so an interrupted sweep goes on where it stopped.
With --pooling mean, full fine-tuning and LoRA (and scratch) read the mean of the words' last hidden vectors, as the
probe does, and their runs are filed as "full mean 20" and so on, beside "full 20" (which reads [CLS]).
With --forgetting, full fine-tuning and LoRA learn the order task from the whole pool, each speech cut to 14 words and
marks (as chapter 15's exercise 3 does), at each seed; each fine-tuned encoder goes back under the pre-trained
masked-word head (pretraining.refill, LoRA merged) and is scored on the first 300 held-out windows at masking seeds 0
and 1 (pretraining.masked_word_shares). The file's "forgetting" section holds each window's share, per run.
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
    parser.add_argument(
        "methods", nargs="*", help=f"some of {list(pretraining.ALL_METHODS)} (default: the four of the figure)"
    )
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument(
        "--pooling",
        choices=pretraining.POOLINGS,
        default="cls",
        help="what a classifier that trains its encoder reads (default: cls, through a pooler)",
    )
    parser.add_argument("--forgetting", action="store_true", help="measure forgetting (full and LoRA) instead")
    parser.add_argument("--out", type=Path, default=recipes.finetune_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.methods) - set(pretraining.ALL_METHODS))
    if unknown:
        parser.error(f"no method called {unknown}; the methods are {list(pretraining.ALL_METHODS)}")
    methods = args.methods or (("full", "lora") if args.forgetting else pretraining.METHODS)
    if args.pooling != "cls" and "probe" in methods:
        parser.error("the probe always reads the mean of the words' vectors: leave it out of --pooling mean")
    suffix = "" if args.pooling == "cls" else f" {args.pooling}"
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data["written_by"] = "tools/finetune_runs.py"
    data["budgets"] = list(recipes.LABEL_BUDGETS)
    pretrained, _ = load_checkpoint("plays_bert")
    if args.forgetting:
        if set(methods) - {"full", "lora"} or args.pooling != "cls":
            parser.error("--forgetting measures full fine-tuning and LoRA, reading [CLS]: name no other method")
        forgetting(data, pretrained, list(methods), args)
        return 0
    task = pretraining.order_split(recipes.plays_words(), recipes.BERT_WINDOW)
    data["test majority"] = max(float(task[3].float().mean()), 1 - float(task[3].float().mean()))
    for method in methods:
        for budget in recipes.LABEL_BUDGETS:
            records = data["runs"].setdefault(f"{method}{suffix} {budget}", [])
            for seed in range(args.seeds):
                if any(r["seed"] == seed for r in records) and not args.force:
                    continue
                _, result = pretraining.fine_tune(method, pretrained, task, budget, seed, pooling=args.pooling)
                correct = result.pop("test correct", None)  # (300,) bool: each test speech right or not
                result.pop("history", None)  # the losses of every step: not kept
                record = {"seed": seed, **{k.replace(" ", "_"): v for k, v in result.items()}}
                if correct is not None:  # one character per test speech, "1" where right, in the test's order
                    record["test_correct"] = "".join("1" if c else "0" for c in correct.tolist())
                record["load"] = round(os.getloadavg()[0], 2)  # others' work slows a run down
                record["machine"] = machine()
                records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
                args.out.write_text(json.dumps(data, indent=1) + "\n")
                print(f"{method}{suffix}, {budget} labels, seed {seed}: {result['test accuracy']:.3f} "
                      f"in {result['seconds']:.0f} s", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


FORGETTING = recipes.FORGETTING  # chapter 15's "What fine-tuning costs" and exercise 3


def forgetting(data: dict, pretrained, methods: list[str], args: argparse.Namespace) -> None:
    """Fill data["forgetting"]: the pre-trained model's share per window, and per method and seed the fine-tuned
    classifier's accuracy and its encoder's shares under the pre-trained head. Written to args.out after every run."""
    vocab, _, held_out = recipes.plays_mlm_data()
    windows = held_out[: FORGETTING["windows"]]
    short = pretraining.order_split(vocab, FORGETTING["max_len"])
    seeds = FORGETTING["masking seeds"]
    section = data.setdefault("forgetting", {})
    if section.get("settings") not in (None, FORGETTING):
        raise SystemExit(f"the file's forgetting runs used {section['settings']}, not {FORGETTING}: move it aside")
    section["settings"] = FORGETTING

    def shares(model) -> list[float]:
        return [round(float(x), 6) for x in pretraining.masked_word_shares(model, windows, seeds)]

    section["pre-trained"] = shares(pretrained)
    for method in methods:
        records = section.setdefault(method, [])
        for seed in range(args.seeds):
            if any(r["seed"] == seed for r in records) and not args.force:
                continue
            tuned, result = pretraining.fine_tune(method, pretrained, short, FORGETTING["budget"], seed)
            record = {
                "seed": seed,
                "test_accuracy": result["test accuracy"],
                "seconds": result["seconds"],
                "shares": shares(pretraining.refill(pretrained, tuned)),
                "load": round(os.getloadavg()[0], 2),
                "machine": machine(),
            }
            records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
            args.out.write_text(json.dumps(data, indent=1) + "\n")
            mean = sum(record["shares"]) / len(record["shares"])
            print(f"forgetting, {method}, seed {seed}: order task {result['test accuracy']:.3f}, masked words "
                  f"{mean:.3f} (pre-trained {sum(section['pre-trained']) / len(windows):.3f})", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
