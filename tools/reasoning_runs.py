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

Two more sections, each made when missing (or with --force when named):

- "verifier", one record per seed: recipes.reasoning_verifier(seed), a learned verifier trained on the start
  model's samples of other problems, and its score of every sample in the "start" record of the same seed
  ("scores", per number of digits, one list of 16 per problem);
- "lm-eval": EleutherAI's lm-evaluation-harness run on addition_start exported with tl.hf.to_hf, with
  reasoning.LM_EVAL_TASKS over recipes.LM_EVAL_PROBLEMS: per problem its document, the log-likelihood of the right
  scratchpad, lm-eval's is_greedy, and the exact match of its greedy sum.

A run already in the file is skipped unless --force. The shipped file was made with one thread (OMP_NUM_THREADS=1)
on a two-core machine; each record names its machine and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import transformer_lib as tl
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


def verifier_record(seed: int, start_record: dict) -> dict:
    """recipes.reasoning_verifier(seed), and its score of each of the start model's samples of that seed."""
    verifier, history, extra = recipes.reasoning_verifier(seed)
    scores = {}
    for key, drawn in start_record["samples"].items():
        prompts, samples = drawn["problems"], len(drawn["sums"][0])
        _, answers = reasoning.sample_answers(  # the same draws again, now as text, for the verifier to read
            load_checkpoint("addition_start")[0], "scratchpad", int(key.split()[0]), len(prompts), samples, seed=seed
        )
        again = [[arithmetic.final_answer(a) for a in group] for group in answers]
        if again != drawn["sums"]:
            raise RuntimeError(f"the start model's {key} samples of seed {seed} came out other than the record's")
        flat = reasoning.verifier_scores(verifier, [p for p in prompts for _ in range(samples)], sum(answers, []))
        scores[key] = [[round(x, 4) for x in row] for row in flat.view(len(prompts), samples).tolist()]
    return {"seed": seed, "seconds": round(history.seconds, 1), "last loss": round(sum(history.losses[-20:]) / 20, 4),
            **extra, "scores": scores}  # fmt: skip


def lm_eval_record() -> dict:
    """lm-evaluation-harness on addition_start, per problem, beside what it was asked."""
    cfg = recipes.LM_EVAL_PROBLEMS
    model, _ = load_checkpoint("addition_start")
    rng = random.Random(cfg["seed"])
    pairs = [pair for d in cfg["digits"] for pair in arithmetic.random_problems(cfg["problems"] // 2, d, rng)]
    docs = reasoning.lm_eval_docs(pairs)
    begin = time.perf_counter()
    out = tl.evaluation.run_lm_eval(
        tl.hf.to_hf(model.eval()),
        tl.hf.to_hf_tokenizer(reasoning.arithmetic_tokenizer()),
        reasoning.LM_EVAL_TASKS,
        docs,
    )
    likelihood, greedy = out["samples"]["addition_scratchpad_likelihood"], out["samples"]["addition_greedy_sum"]
    return {
        "docs": docs,
        "loglikelihood": [round(float(s["resps"][0][0][0]), 5) for s in likelihood],
        "is_greedy": [int(bool(s["acc"])) for s in likelihood],
        "exact_match": [int(float(s["exact_match"])) for s in greedy],
        "seconds": round(time.perf_counter() - begin, 1),
        "lm-eval": __import__("lm_eval").__version__,
        "transformers": __import__("transformers").__version__,
    }


def main(argv: list[str] | None = None) -> int:
    names = ["start", *recipes.REASONING_RUNS, "verifier", "lm-eval"]
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
        "verifier": recipes.REASONING_VERIFIER,
        "lm-eval": recipes.LM_EVAL_PROBLEMS,
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
        if name == "verifier":
            records = data.setdefault("verifier", [])
            for seed in range(args.seeds):
                if any(r["seed"] == seed for r in records) and not args.force:
                    continue
                start_record = next(r for r in data["runs"]["start"] if r["seed"] == seed)
                record = verifier_record(seed, start_record) | {
                    "load": round(os.getloadavg()[0], 2),
                    "machine": machine(),
                }
                records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
                args.out.write_text(json.dumps(data, indent=1) + "\n")
                print(f"verifier, seed {seed}: {record['seconds']:.0f} s", flush=True)
            continue
        if name == "lm-eval":
            if "lm-eval" not in data or args.force:
                data["lm-eval"] = lm_eval_record() | {"load": round(os.getloadavg()[0], 2), "machine": machine()}
                args.out.write_text(json.dumps(data, indent=1) + "\n")
                print(f"lm-eval: {data['lm-eval']['seconds']:.0f} s", flush=True)
            continue
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
