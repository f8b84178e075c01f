"""Run chapter 14's comparisons over several seeds; write the results to transformer_lib/checkpoints/seed_runs.json.

    python tools/seed_runs.py                      # every run of recipes.SEED_RUNS, seeds 0, 1 and 2
    python tools/seed_runs.py dense moe --seeds 3  # some runs, seeds 0 .. 2 (or more)
    python tools/seed_runs.py --force full         # run again what the file already holds

The runs are recipes.SEED_RUNS: the mixture of experts and the dense model (recipes.SEED_RUN_STEPS steps
each), full fine-tuning and LoRA at several ranks and alphas (the shipped recipes' 300 steps). For each
run and seed the file records the final held-out loss (nats and bits per character), the steps, the
wall time with the machine and its load, and the first losses, which tests/unit/test_seed_runs.py
re-computes. A run already in the file is skipped unless --force, and the file is written after every
run, so an interrupted sweep goes on where it stopped. The shipped file was made with

    OMP_NUM_THREADS=1 python tools/seed_runs.py dense moe full "lora r8"                 # three seeds each
    OMP_NUM_THREADS=1 python tools/seed_runs.py "lora r1" "lora r4" "lora r32" --seeds 1  # the rank sweep, seed 0
    OMP_NUM_THREADS=1 python tools/seed_runs.py "lora r8 alpha 4" "lora r8 alpha 64"      # the alpha sweep, three seeds
    OMP_NUM_THREADS=1 python tools/seed_runs.py "lora r8 alpha 16 lr x4"                  # its control, three seeds
    OMP_NUM_THREADS=1 python tools/seed_runs.py dense moe --seeds 6  # seeds 3 to 5, later, on another CPU

(one thread, because other jobs shared the two-core machine: two threads then wait on each other).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

from results import cpu_name  # tools/results.py, beside this file
from transformer_lib import recipes
from transformer_lib.training import lm_eval_loss

FIRST_STEPS = 10  # how many first losses each record keeps for the test


def machine() -> str:
    """CPU model, cores, threads and torch, in one line."""
    return f"{cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads; torch {torch.__version__}"


def write_run_file(data: dict, out: Path, start: float) -> None:
    """Finish a run file: the wall time since `start` (time.perf_counter), the load and the machine, then `data` as
    JSON into `out` (the run files of tools/viola_runs.py and tools/speculative_runs.py)."""
    import time

    data["seconds"] = round(time.perf_counter() - start, 1)
    data["load"] = round(os.getloadavg()[0], 2)
    data["machine"] = machine()
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out} in {data['seconds']:.0f} s", flush=True)


def run_seeds(records: list[dict], seeds: int, force: bool, run, save, say) -> None:
    """Seeds 0 .. seeds - 1 into `records`, kept in seed order: run(seed) -> a record, then save() and print
    say(record). A seed the records already hold is skipped unless force (the run files' tools share this)."""
    for seed in range(seeds):
        if any(r["seed"] == seed for r in records) and not force:
            continue
        record = run(seed)
        records[:] = sorted([r for r in records if r["seed"] != seed] + [record], key=lambda r: r["seed"])
        save()
        print(say(record), flush=True)


def _load(path: Path) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    return {"runs": {}}


def _write(data: dict, path: Path) -> None:
    """Write `data` with the runs in name order and each run's records by seed (`data` itself is left as it is)."""
    runs = {name: sorted(records, key=lambda r: r["seed"]) for name, records in sorted(data["runs"].items())}
    path.write_text(json.dumps({**data, "runs": runs}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {list(recipes.SEED_RUNS)} (default: all)")
    parser.add_argument("--seeds", type=int, default=len(recipes.SEEDS), help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--force", action="store_true", help="run again what the file already holds")
    parser.add_argument("--out", type=Path, default=recipes.seed_runs_path())
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(recipes.SEED_RUNS))
    if unknown:
        parser.error(f"no run called {unknown}; the runs are {list(recipes.SEED_RUNS)}")
    data = _load(args.out)
    data["written_by"] = "tools/seed_runs.py"
    data["seed_run_steps"] = recipes.SEED_RUN_STEPS
    if "base test loss" not in data:  # the shipped model before fine-tuning, on the same test part
        from transformer_lib.checkpoints import load_checkpoint

        base, _ = load_checkpoint("shakespeare_char")
        data["base test loss"] = lm_eval_loss(base, recipes.adaptation_data()[2], recipes.SHAKESPEARE_BLOCK)
    for name in args.names or list(recipes.SEED_RUNS):
        records = data["runs"].setdefault(name, [])
        for seed in range(args.seeds):
            if any(r["seed"] == seed for r in records) and not args.force:
                continue
            _, history, _ = recipes.SEED_RUNS[name](seed, progress=True)
            loss = history.evals[-1][recipes.SEED_RUN_METRICS[name]]
            record = {
                "seed": seed,
                "steps": len(history.steps),
                "metric": recipes.SEED_RUN_METRICS[name],
                "loss": loss,
                "bits": loss / math.log(2),
                "seconds": round(history.seconds, 1),
                "load": round(os.getloadavg()[0], 2),  # the machine's load average at the end: others' work slows it
                "machine": machine(),
                "first_losses": history.losses[:FIRST_STEPS],
            }
            records[:] = [r for r in records if r["seed"] != seed] + [record]
            _write(data, args.out)
            print(f"{name}, seed {seed}: {record['bits']:.4f} bits per character after {record['steps']} steps "
                  f"in {record['seconds']:.0f} s -> {args.out}", flush=True)  # fmt: skip
    _write(data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
