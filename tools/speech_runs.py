"""Chapter 16's touch-tone model over seeds: the character error rate on the held-out clips, per seed.

    python tools/speech_runs.py            # seeds 0, 1 and 2
    python tools/speech_runs.py --force    # run again what the file already holds

Each run is transformer_lib.recipes.RECIPES["touch_tones"](seed=seed): recipes.touch_tone_model(seed) trained by
speech.train_touch_tones for SPEECH_STEPS steps on the clip stream of its seed, then scored greedily on
recipes.touch_tone_test() (300 clips of a seed no training stream uses). The file,
transformer_lib/checkpoints/speech_runs.json, records per seed the character error rate, the share of clips
transcribed exactly, the first losses and the wall time with the machine and its load; seed 0 is the shipped
checkpoint's run. A run already in the file is skipped unless --force. The shipped file was made with one thread
(OMP_NUM_THREADS=1) on a two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import recipes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.speech_runs_path())
    args = parser.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": []}
    data["written_by"] = "tools/speech_runs.py"
    data["steps"] = recipes.SPEECH_STEPS
    for seed in range(args.seeds):
        if any(r["seed"] == seed for r in data["runs"]) and not args.force:
            continue
        _, history, _ = recipes.RECIPES["touch_tones"](seed=seed)
        scores = history.evals[-1]
        record = {
            "seed": seed,
            "character_error_rate": scores["character error rate"],
            "exact_share": scores["exact share"],
            "first_losses": history.losses[:20],
            "final_loss": sum(history.losses[-50:]) / 50,
            "seconds": round(history.seconds, 1),
            "load": round(os.getloadavg()[0], 2),  # others' work slows a run down
            "machine": machine(),
        }
        data["runs"] = sorted([r for r in data["runs"] if r["seed"] != seed] + [record], key=lambda r: r["seed"])
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"seed {seed}: character error rate {record['character_error_rate']:.4f}, "
              f"{record['exact_share']:.3f} of clips exact, in {record['seconds']:.0f} s", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
