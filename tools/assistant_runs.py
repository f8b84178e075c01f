"""Chapter 17's comparisons: supervised fine-tuning with and without the prompt masked, DPO at four betas, GRPO with
the checker's reward, with a loophole and with a learned reward, GRPO with several updates per batch, PPO and expert
iteration, over seeds.

    python tools/assistant_runs.py                 # every run, seeds 0, 1 and 2
    python tools/assistant_runs.py grpo "sft"      # some runs
    python tools/assistant_runs.py --force         # run again what the file already holds

Each run is transformer_lib.recipes.ASSISTANT_RUNS[name](seed). The file, transformer_lib/checkpoints/
assistant_runs.json, records per run and seed the held-out scores (recipes.assistant_scores: greedy exact match per
task, pass@1 at temperature 1, answer length); which held-out prompts the pass@1 sample got right ("right": one 0
or 1 per prompt, the same draws for every run, so that runs pair prompt by prompt); what else the run's last
evaluation holds (the mean reward at the start and end of GRPO and expert iteration, with "reward by step"; for
"grpo from its own sft", the SFT run's scores, "sft ..." and "sft right"); the wall time with the machine and its
load; its greedy answers to EXAMPLES; for each run that starts from the shipped SFT model, "kl from sft"
(recipes.kl_from_start: nats per answer on the held-out requests, on the answers pass@1 samples); and the
untrained base model's scores; and "sft likelihood accuracy", the share of recipes.held_out_pairs that the
shipped SFT model's own answer probabilities rank right (alignment.likelihood_accuracy), the baseline for the
reward models' accuracy. The SFT runs also record
recipes.user_imitation. A run already in the file is skipped unless --force. tests/unit/test_assistant.py re-runs
one and compares. The shipped file was made with one thread (OMP_NUM_THREADS=1) on a two-core machine: the SFT runs and
the shipped assistant_sft checkpoint (every other run but "grpo from its own sft" starts there) on one CPU, every
other run later on another (each record names its machine). The learned-reward runs also record the program's
reward of each step's samples ("gold reward by step") and the reward model's accuracy; the GRPO and PPO runs record
train_grpo's and train_ppo's trace ("kl by step", "clipped share by step", PPO's "value loss by step").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from seed_runs import machine  # tools/seed_runs.py, beside this file
from transformer_lib import alignment, chat, recipes
from transformer_lib.checkpoints import load_checkpoint

EXAMPLES = ["reverse amber", "shout banner", "count castles"]  # held-out words; each run's answers are recorded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {list(recipes.ASSISTANT_RUNS)} (default: all)")
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.assistant_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(recipes.ASSISTANT_RUNS))
    if unknown:
        parser.error(f"no run called {unknown}; the runs are {list(recipes.ASSISTANT_RUNS)}")
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    data["written_by"] = "tools/assistant_runs.py"
    if "base" not in data:
        base, tok = recipes.assistant_base()
        data["base"] = recipes.assistant_scores(base, tok)
    if "sft likelihood accuracy" not in data:  # the baseline for the reward models: the SFT model's own judgement
        sft, _ = load_checkpoint("assistant_sft")
        tok = chat.chat_tokenizer()
        data["sft likelihood accuracy"] = alignment.likelihood_accuracy(sft, tok, recipes.held_out_pairs(sft, tok))
    pairs = None  # DPO's pairs, made once for every DPO run
    shipped_sft = None  # the start of every run but SFT's own, loaded once: "kl from sft" measures the distance
    for name in args.names or recipes.ASSISTANT_RUNS:
        records = data["runs"].setdefault(name, [])
        for seed in range(args.seeds):
            if any(r["seed"] == seed for r in records) and not args.force:
                continue
            if name.startswith("dpo"):
                if pairs is None:
                    sft, _ = load_checkpoint("assistant_sft")
                    pairs = recipes.dpo_pairs(sft, chat.chat_tokenizer())
                model, history, extra = recipes.ASSISTANT_RUNS[name](seed, pairs=pairs)
            else:
                model, history, extra = recipes.ASSISTANT_RUNS[name](seed)
            record = {"seed": seed, **history.evals[-1], "seconds": round(history.seconds, 1), **extra}
            # the held-out prompts its pass@1 sample got right, one "1" or "0" each, so that runs pair prompt by prompt
            record["right"] = recipes.sampled_right(model, chat.chat_tokenizer(), chat.task_words()[1])
            record["examples"] = dict(zip(EXAMPLES, chat.answer(model, chat.chat_tokenizer(), EXAMPLES)))
            if name.startswith("sft"):
                record["user imitation"] = recipes.user_imitation(model, chat.chat_tokenizer())
            elif name != "grpo from its own sft":  # every other run starts from the shipped SFT model
                if shipped_sft is None:
                    shipped_sft, _ = load_checkpoint("assistant_sft")
                record["kl from sft"] = recipes.kl_from_start(model, shipped_sft, chat.chat_tokenizer())
            record |= {"load": round(os.getloadavg()[0], 2), "machine": machine()}  # others' work slows a run down
            records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
            args.out.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{name}, seed {seed}: exact {record['exact match']:.3f}, pass@1 {record['pass@1']:.3f} "
                  f"in {record['seconds']:.0f} s", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
