"""Chapter 21's runs: addition answered directly or with worked steps, and GRPO with a program's reward, over seeds.

    python tools/reasoning_runs.py                 # every run, seeds 0, 1 and 2
    python tools/reasoning_runs.py scratchpad      # some runs
    python tools/reasoning_runs.py --force         # run again what the file already holds

Each run is transformer_lib.recipes.REASONING_RUNS[name](seed). The file, transformer_lib/checkpoints/
reasoning_runs.json, records per run and seed the wall time, the last training loss, and:

- for the supervised runs ("scratchpad", "direct", "direct, 4x the problems"): recipes.addition_scores, greedy right
  or wrong on the seed's 200 fresh problems at each of 1 to 6 digits, one character per problem, so that the styles
  pair problem by problem;
- for the GRPO runs, and for "start" (the shipped addition_start that they start from, measured with each seed's
  draws): the mean reward and answer length of each step's samples (GRPO only), and "samples": for each number of
  digits in recipes.REASONING_SAMPLES, 16 answers at temperature 1 to each of 100 fresh problems, kept as the sum each
  answer ended on ("sums", null where it wrote none) and whether each answer's steps were all right ("steps right",
  one character per answer). pass@k, the vote and best-of-N with the program's verifier are computed from these.

A run already in the file is skipped unless --force. The shipped file was made with one thread (OMP_NUM_THREADS=1)
on a two-core machine; each record names its machine and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import arithmetic, reasoning, recipes
from transformer_lib.checkpoints import load_checkpoint

SUPERVISED = {"scratchpad": "scratchpad", "direct": "direct", "direct, 4x the problems": "direct"}


def samples(model, seed: int) -> dict[str, dict]:
    """recipes.REASONING_SAMPLES' draws from `model` (the scratchpad style), kept as sums and steps-right flags."""
    cfg = recipes.REASONING_SAMPLES
    out = {}
    for d in cfg["digits"]:
        prompts, answers = reasoning.sample_answers(model, "scratchpad", d, cfg["problems"], cfg["samples"], seed=seed)
        out[f"{d} digits"] = {
            "problems": prompts,
            "sums": [[arithmetic.final_answer(a) for a in group] for group in answers],
            "steps right": [
                "".join(str(int(arithmetic.steps_right(p, a))) for a in group) for p, group in zip(prompts, answers)
            ],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    names = ["start", *recipes.REASONING_RUNS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {names} (default: all)")
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.reasoning_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        parser.error(f"no run called {unknown}; the runs are {names}")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data["written_by"] = "tools/reasoning_runs.py"
    data["settings"] = {
        "steps": recipes.ADDITION_STEPS,
        "batch": recipes.ADDITION_BATCH,
        "long steps": recipes.ADDITION_LONG_STEPS,
        "start steps": recipes.ADDITION_START_STEPS,
        "digits": list(recipes.ADDITION_DIGITS),
        "problems": recipes.ADDITION_PROBLEMS,
        "grpo": recipes.REASONING_GRPO,
        "samples": recipes.REASONING_SAMPLES,
    }
    for name in args.names or names:
        records = data["runs"].setdefault(name, [])
        for seed in range(args.seeds):
            if any(r["seed"] == seed for r in records) and not args.force:
                continue
            begin = time.perf_counter()
            if name == "start":
                model, _ = load_checkpoint("addition_start")
                record = {"seed": seed}
            else:
                model, history, extra = recipes.REASONING_RUNS[name](seed)
                record = {"seed": seed, "seconds": round(history.seconds, 1), "last loss": round(history.losses[-1], 5)}
                record |= extra
            if name in SUPERVISED:
                record["right"] = recipes.addition_scores(model, SUPERVISED[name], seed)
            else:
                record["samples"] = samples(model, seed)
            record["seconds with measuring"] = round(time.perf_counter() - begin, 1)
            record |= {"load": round(os.getloadavg()[0], 2), "machine": machine()}
            records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
            args.out.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{name}, seed {seed}: {record['seconds with measuring']:.0f} s", flush=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
