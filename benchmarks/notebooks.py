"""Time every notebook against the reference workload, in one run. Not a test: it prints figures.

    python benchmarks/notebooks.py [--cells N] [notebooks/04_attention.ipynb ...]

Each notebook is executed top to bottom in a fresh kernel (as nbval does, setup cell skipped) and
timed from the kernel's start to the end of its last cell. The kernel is then stopped at once, as
nbval stops it: a graceful shutdown of a kernel that imported torch takes another 0.8 s, which no
reader waits for. The time is given as a ratio to `reference.py`'s workload, timed before every notebook
and after the last: each notebook's ratio is to the mean of the two timings beside it, so that a shared
machine whose speed drifts during the run moves a notebook and its reference alike. The budget is <= 6x
per notebook and, for the whole suite, <= 4.5x times the number of notebooks (the sum of their ratios).
`--cells N` also lists the N slowest cells of each notebook.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from reference import reference_seconds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from notebook_runner import run_cells  # noqa: E402

PER_NOTEBOOK, SUITE_MEAN = 6.0, 4.5  # the suite's budget: 4.5x per notebook on average
CELL_TIMEOUT = 300  # seconds a cell may run, as make test's --nbval-cell-timeout
MOVED = 0.10  # a reference that moved more than this between its two timings makes every ratio uncertain


def run_notebook(path: Path) -> tuple[float, list[tuple[float, int, str]]]:
    """Execute one notebook (its nbval-skip cells left out); return (seconds, [(seconds, index, first line)])."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if "nbval-skip" not in c.metadata.get("tags", [])]
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        shutdown_kernel="immediate",  # as nbval does
    )
    return run_cells(client, path.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--cells", type=int, default=0, help="list the N slowest cells of each notebook")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    refs, results = [reference_seconds()], []
    for path in paths:  # the reference before each notebook and after the last
        results.append((path, *run_notebook(path)))
        refs.append(reference_seconds())
    spread = (max(refs) - min(refs)) / (sum(refs) / len(refs))  # as the nbval report computes it
    moved = f"  MOVED BY MORE THAN {MOVED:.0%}: each ratio uses the timings beside it" if spread > MOVED else ""
    print(
        f"reference workload (nn.Transformer, 100 Adam steps), timed {len(refs)} times: {min(refs):.2f} to "
        f"{max(refs):.2f} s, spread {spread:.0%}{moved}"
    )
    print(f"{'notebook':32} {'seconds':>8} {'reference':>9} {'ratio':>7}   budget {PER_NOTEBOOK:.0f}x")
    total = suite_ratio = 0.0
    for (path, seconds, cells), before, after in zip(results, refs, refs[1:]):
        near = (before + after) / 2  # the reference timed just before and just after this notebook
        total, suite_ratio = total + seconds, suite_ratio + seconds / near
        flag = "" if seconds / near <= PER_NOTEBOOK else "  over budget"
        print(f"{path.name:32} {seconds:8.1f} {near:8.2f}s {seconds / near:6.1f}x{flag}")
        for cell_seconds, index, first in sorted(cells, reverse=True)[: args.cells]:
            print(f"    {cell_seconds:6.1f} s  cell {index:3d}  {first}")
    suite = SUITE_MEAN * len(results)
    flag = "" if suite_ratio <= suite else "  over budget"
    print(f"{'all notebooks':32} {total:8.1f} {'':9} {suite_ratio:6.1f}x   budget {suite:.0f}x{flag}")


if __name__ == "__main__":
    main()
