"""Print what speculative decoding buys chapter 20's Shakespeare model in wall time, beside plain sampling. Not a test.

    python benchmarks/speculative.py [--repeats 3]

The target is the shipped shakespeare_char; the drafts are recipes.DRAFTS. Each case writes recipes.SPECULATIVE's
new_tokens characters at temperature 1 after each of the first four prompts of recipes.speculative_prompts(), and
the median over `repeats` rounds of all cases (run round-robin, so that drift hits all of them alike) is printed as
milliseconds per token:

- "target alone, no cache": one target pass over the whole text so far per token, as speculative_generate's passes
  are (it keeps no KV cache): the baseline its speed-up is measured against;
- "speculative, <draft>": speculative.speculative_generate with k = 4, and its tokens per target pass;
- "target alone, KV cache": the target's own generate, which keeps a KV cache, for scale.

On one CPU thread the speed-up is what the draft's k passes cost against the target passes they save; the chapter
counts target passes and does not time them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import transformer_lib as tl
from transformer_lib import recipes, speculative


@torch.no_grad()
def _plain(target, prompt: torch.Tensor, n: int, seed: int) -> None:
    """n tokens sampled at temperature 1, one target pass over the whole text per token (no cache)."""
    g, ids = torch.Generator().manual_seed(seed), prompt
    for _ in range(n):
        probs = target(ids)[0, -1].double().softmax(-1)  # (V,)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g)[None]], dim=1)  # (1, T + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings, prompts = recipes.SPECULATIVE, recipes.speculative_prompts()[:4]
    n, k = settings["new_tokens"], settings["k"]
    target, _ = tl.load_checkpoint("shakespeare_char")
    drafts = {name: tl.load_checkpoint(f"shakespeare_{name}")[0] for name in recipes.DRAFTS}
    passes: dict[str, list[float]] = {name: [] for name in drafts}

    def speculate(draft, name):
        def run():
            for seed, prompt in enumerate(prompts):
                _, counts = speculative.speculative_generate(target, draft, prompt, n, k=k, temperature=1.0,
                                                             rng=torch.Generator().manual_seed(seed))  # fmt: skip
                passes[name].append(counts["tokens per target pass"])

        return run

    cases = {"target alone, no cache": lambda: [_plain(target, p, n, s) for s, p in enumerate(prompts)]}
    cases |= {f"speculative, {name}": speculate(draft, name) for name, draft in drafts.items()}
    cases["target alone, KV cache"] = lambda: [target.generate(p, n, temperature=1.0) for p in prompts]
    for fn in cases.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000 / (n * len(prompts)))
    base = statistics.median(times["target alone, no cache"])
    print(f"shakespeare_char writing {n} characters after each of {len(prompts)} prompts at temperature 1, "
          f"{torch.get_num_threads()} thread(s); median of {args.repeats}, ms a token")  # fmt: skip
    for name, values in times.items():
        ms = statistics.median(values)
        extra = ""
        if name.startswith("speculative"):
            per_pass = statistics.mean(passes[name.split(", ")[1]])
            extra = f", {per_pass:.2f} tokens a target pass, {base / ms:.2f}x the target alone without a cache"
        print(f"{name:28s} {ms:7.2f} ms a token{extra}")


if __name__ == "__main__":
    main()
