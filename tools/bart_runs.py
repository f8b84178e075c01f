"""Chapter 18's BART runs: gaps of unknown length against chapter 15's BERT, and punctuation over label budgets.

    python tools/bart_runs.py                    # the gaps, and every budget of recipes.BART_BUDGETS, seeds 0, 1, 2
    python tools/bart_runs.py --budgets 32 128   # some budgets only
    python tools/bart_runs.py --force            # run again what the file already holds

The gaps: every case of recipes.gap_cases() (the first BART_HELD_OUT lines of Twelfth Night, each with a gap of
1, 2 and 3 tokens from token BART_GAP_AT), filled by the shipped plays_bart checkpoint told only where the gap is
(recipes.bart_gap_fills), and by the shipped plays_bert told how many tokens are missing, or always given one, two
or three masks (recipes.bert_gap_fills). Each fill is recorded, so that the chapter pairs the models case by case.

The punctuation: recipes.finetune_punctuation(budget, seed, pretrained) from the shipped BART (or from fresh
weights, "scratch"), BART_TUNE_STEPS steps on `budget` lines of the training plays, scored greedily on the held-out
lines. The file, transformer_lib/checkpoints/bart_runs.json, records per run the token error rate, the share of
lines exactly right, each line's edits (so that runs pair line by line), the first losses and the wall time with
the machine and its load. A run already in the file is skipped unless --force.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from seed_runs import machine, run_seeds  # tools/seed_runs.py, beside this file
from transformer_lib import recipes
from transformer_lib.checkpoints import load_checkpoint

STARTS = ("pre-trained", "scratch")
BERT_COUNTS = (None, 1, 2, 3)  # None: told the gap's length


def gaps(bart_model, bert_model) -> dict:
    """Every gap case filled by BART (told nothing) and by BERT (told the length, or always 1, 2 or 3 masks)."""
    cases = recipes.gap_cases()
    fills = {"BART": recipes.bart_gap_fills(bart_model, cases)}
    for k in BERT_COUNTS:
        name = "BERT, told the length" if k is None else f"BERT, {k} mask{'s' if k > 1 else ''}"
        fills[name] = recipes.bert_gap_fills(bert_model, cases, masks=k)
    return {"lengths": [n for _, n in cases], "truth": [line[recipes.BART_GAP_AT : recipes.BART_GAP_AT + n]
            for line, n in cases], "fills": fills}  # fmt: skip


def _record(seed: int, scores: dict) -> dict:
    return {
        "seed": seed,
        "token_error_rate": scores["token error rate"],
        "exact_lines": scores["exact lines"],
        "edits": scores["edits"],
        "written": scores["written"],  # the first five held-out lines, as ids
        "first_losses": scores["first_losses"],
        "seconds": round(scores["seconds"], 1),
        "load": round(os.getloadavg()[0], 2),  # others' work slows a run down
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="*", default=list(recipes.BART_BUDGETS))
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.bart_runs_path())
    args = parser.parse_args(argv)
    pretrained, meta = load_checkpoint("plays_bart")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"punctuation": {}}
    data |= {"written_by": "tools/bart_runs.py", "steps": recipes.BART_TUNE_STEPS, "budgets": sorted(
        set(data.get("budgets", [])) | set(args.budgets))}  # fmt: skip
    data["pre-training"] = {"steps": meta["steps"], "final evaluation": meta["evals"][-1]}
    if "gaps" not in data or args.force:
        bert, _ = load_checkpoint("plays_bert")
        data["gaps"] = gaps(pretrained, bert)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print("gaps: done", flush=True)
    for budget in args.budgets:
        for start in STARTS:
            name, start_from = f"{start} {budget}", pretrained if start == "pre-trained" else None
            run_seeds(
                data["punctuation"].setdefault(name, []),
                args.seeds,
                args.force,
                lambda seed, b=budget, m=start_from: _record(seed, recipes.finetune_punctuation(b, seed, m)[1]),
                lambda: args.out.write_text(json.dumps(data, indent=1) + "\n"),
                lambda r, n=name: (
                    f"{n}, seed {r['seed']}: token error rate {r['token_error_rate']:.4f}, "
                    f"{r['exact_lines']:.3f} exact, in {r['seconds']:.0f} s"
                ),
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
