"""Chapter 20's speculative decoding measured: how many draft tokens the Shakespeare model keeps, for each draft.

    python tools/speculative_runs.py

Reads the shipped shakespeare_char (the target) and the drafts of recipes.DRAFTS (shakespeare_draft_tiny and
shakespeare_draft_small). With recipes.SPECULATIVE's settings, each draft writes new_tokens characters after each
prompt of recipes.speculative_prompts() by speculative.speculative_generate (k draft tokens a round, temperature 1),
for each sampling seed. The file, transformer_lib/checkpoints/speculative_runs.json, records per draft the share of
draft tokens kept ("acceptance") and the tokens written per target pass, one number per (seed, prompt), seed by seed
and prompt by prompt in the same order for every draft, so that the chapter pairs the drafts run by run; and the
wall time with the machine. The shipped file was made with one thread (OMP_NUM_THREADS=1), in about 10 seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from seed_runs import write_run_file  # tools/seed_runs.py, beside this file
from transformer_lib import recipes, speculative
from transformer_lib.checkpoints import load_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=recipes.speculative_runs_path())
    args = parser.parse_args(argv)
    start = time.perf_counter()
    settings = recipes.SPECULATIVE
    target, _ = load_checkpoint("shakespeare_char")
    prompts = recipes.speculative_prompts()
    data = {"written_by": "tools/speculative_runs.py", "settings": settings, "drafts": list(recipes.DRAFTS), "runs": {}}
    for name in recipes.DRAFTS:
        draft, _ = load_checkpoint(f"shakespeare_{name}")
        kept, per_pass = [], []
        for seed in settings["seeds"]:
            for prompt in prompts:
                _, counts = speculative.speculative_generate(
                    target, draft, prompt, settings["new_tokens"], k=settings["k"],
                    temperature=settings["temperature"], rng=torch.Generator().manual_seed(seed),
                )  # fmt: skip
                kept.append(counts["acceptance"])
                per_pass.append(counts["tokens per target pass"])
        data["runs"][name] = {"acceptance": kept, "tokens per target pass": per_pass}
        print(f"{name}: kept {sum(kept) / len(kept):.3f}, {sum(per_pass) / len(per_pass):.2f} tokens a target pass",
              flush=True)  # fmt: skip
    write_run_file(data, args.out, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
