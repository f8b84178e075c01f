"""Print what torch.optim.AdamW's first step costs in a fresh process, next to `fit`'s lean AdamW. Not a test.

    python benchmarks/optimizer.py [--repeats 3]

torch.optim.Optimizer imports torch._dynamo on its first construction and step (a guard against
torch.compile). Each notebook runs in a fresh kernel and trains a little, so that one-off cost is
paid once per notebook. `transformer_lib._adamw.LeanAdamW` keeps AdamW's state itself and calls the
same functional kernel, bit for bit the same numbers (tests/unit/test_fit_optimizer.py). Each case
runs in its own fresh interpreter, `repeats` times; the medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CASES = {
    "torch.optim.AdamW": (
        "opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01, fused=True)\n"
        "m(x).sum().backward(); opt.step()\n"
    ),
    "LeanAdamW (fit's)": (
        "from transformer_lib._adamw import LeanAdamW\n"
        "opt = LeanAdamW(m.parameters(), betas=(0.9, 0.98), weight_decay=0.01, fused=True)\n"
        "m(x).sum().backward(); opt.step(1e-3)\n"
    ),
}

TEMPLATE = (
    "import time, torch, transformer_lib\n"
    "m, x = torch.nn.Linear(64, 64), torch.randn(4, 64)\n"
    "start = time.perf_counter()\n"
    "{body}"
    "print(time.perf_counter() - start)\n"
)


def first_step_seconds(body: str) -> float:
    out = subprocess.run([sys.executable, "-c", TEMPLATE.format(body=body)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, body in CASES.items():
        times = [first_step_seconds(body) for _ in range(args.repeats)]
        print(
            f"{name:20s} first construction and step: median {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, max {max(times):.3f}, {args.repeats} fresh processes)"
        )


if __name__ == "__main__":
    main()
