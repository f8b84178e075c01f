"""Chapter 18's CTC fine-tuning over label budgets and seeds, from the pre-trained wav2vec 2.0 and from scratch.

    python tools/ctc_runs.py                     # every budget of recipes.CTC_BUDGETS, seeds 0, 1 and 2, both starts
    python tools/ctc_runs.py --budgets 8 32      # some budgets only
    python tools/ctc_runs.py --stream            # also CTC on chapter 16's stream of fresh labelled clips
    python tools/ctc_runs.py --force             # run again what the file already holds

Each run is transformer_lib.recipes.finetune_ctc(budget, seed, pretrained): recipes.telephone_ctc(seed) with the
shipped telephone_wav2vec2 checkpoint's network (or fresh weights, "scratch"), trained by CTC for CTC_STEPS steps
on `budget` labelled clips of the pool, then scored greedily on recipes.telephone_test() (chapter 16's 300
held-out clips, at 8 kHz). The file, transformer_lib/checkpoints/ctc_runs.json, records per run the character
error rate, the share of clips transcribed exactly, each clip's edit distance (so that runs pair clip by clip),
the first losses and the wall time with the machine and its load. A run already in the file is skipped unless
--force. With --stream, also "stream pre-trained" and "stream scratch": recipes.ctc_stream(seed), CTC on the very
clips chapter 16's encoder-decoder of that seed trained on (SPEECH_STEPS batches of 32 fresh labelled clips).
The shipped file was made with one thread (OMP_NUM_THREADS=1) on a two-core machine.
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


def _record(seed: int, scores: dict) -> dict:
    return {
        "seed": seed,
        "character_error_rate": scores["character error rate"],
        "exact_share": scores["exact share"],
        "edits": scores["edits"],
        "first_losses": scores["first_losses"],
        "seconds": round(scores["seconds"], 1),
        "load": round(os.getloadavg()[0], 2),  # others' work slows a run down
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="*", default=list(recipes.CTC_BUDGETS))
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--stream", action="store_true", help="also CTC on chapter 16's fresh labelled stream")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.ctc_runs_path())
    args = parser.parse_args(argv)
    bad = [b for b in args.budgets if not 1 <= b <= 512]
    if bad:
        parser.error(f"budgets must be from 1 to the pool's 512 clips, got {bad}")
    pretrained, meta = load_checkpoint("telephone_wav2vec2")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data |= {"written_by": "tools/ctc_runs.py", "steps": recipes.CTC_STEPS, "budgets": sorted(
        set(data.get("budgets", [])) | set(args.budgets))}  # fmt: skip
    data["pre-training"] = {"steps": meta["steps"], "final evaluation": meta["evals"][-1]}
    for budget in args.budgets:
        for start in STARTS:
            name = f"{start} {budget}"
            start_from = pretrained if start == "pre-trained" else None
            run_seeds(
                data["runs"].setdefault(name, []),
                args.seeds,
                args.force,
                lambda seed, b=budget, m=start_from: _record(seed, recipes.finetune_ctc(b, seed, m)[1]),
                lambda: args.out.write_text(json.dumps(data, indent=1) + "\n"),
                lambda r, n=name: (
                    f"{n}, seed {r['seed']}: character error rate {r['character_error_rate']:.4f}, "
                    f"{r['exact_share']:.3f} exact, in {r['seconds']:.0f} s"
                ),
            )
    if args.stream:
        for start in STARTS:
            name = f"stream {start}"
            start_from = pretrained if start == "pre-trained" else None
            run_seeds(
                data["runs"].setdefault(name, []),
                args.seeds,
                args.force,
                lambda seed, m=start_from: _record(seed, recipes.ctc_stream(seed, m)[1]),
                lambda: args.out.write_text(json.dumps(data, indent=1) + "\n"),
                lambda r, n=name: f"{n}, seed {r['seed']}: character error rate {r['character_error_rate']:.4f}",
            )
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
