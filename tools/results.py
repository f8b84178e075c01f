"""Write docs/results.md from the reports of a real run. The README links to it; nobody edits it by hand.

    make results                 # runs `make test`, `make benchmark` and a timed `make check`, then this tool
    python tools/results.py      # only this tool, over the reports already in _build/reports

It reads what those runs leave in _build/reports/: pytest's JUnit XML per stage (test counts), the
notebook times of both nbval passes with the reference workload timed before and after them, and
the benchmark scripts' output. The trained results are the printed outputs of the notebooks' asserted
cells (`# NBVAL_IGNORE_OUTPUT` and an `assert`), as the last `make execute` stored them. The header
names this tool, the commit and the machine; tests/book/test_results.py checks it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "_build" / "reports"
OUT = ROOT / "docs" / "results.md"
HEADER = "<!-- Written by tools/results.py from a real run (make results). Do not edit by hand. -->"
STAGES = {  # JUnit file stem -> what the stage runs
    "unit": "unit tests (tests/unit)",
    "book": "book tests (tests/book)",
    "notebooks": "every notebook under nbval",
    "notebooks-portable": "every notebook under nbval, on the portable kernels",
    "browser": "browser tests (tests/browser)",
}
PASSES = {"notebooks": "native kernels", "notebooks-portable": "portable kernels, one thread"}
PER_NOTEBOOK, SUITE_MEAN = 6.0, 4.5  # the budget: 6x per notebook, 4.5x per notebook for the suite


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    return cpu


def machine() -> str:
    """CPU model, cores, memory, Python and torch, in one line."""
    cpu = cpu_name()
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo.read_text()).group(1))
        memory = f", {kib / 2**20:.0f} GiB"
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores{memory}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.system()} {platform.release()}"
    )


def test_counts(reports: Path) -> list[str]:
    lines = ["| stage | passed | failed | errors | skipped | seconds |", "|---|---|---|---|---|---|"]
    for stem, what in STAGES.items():
        path = reports / f"junit-{stem}.xml"
        if not path.is_file():
            lines.append(f"| {what} | not run | | | | |")
            continue
        suites = ET.parse(path).getroot()
        suites = [suites] if suites.tag == "testsuite" else list(suites)
        total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
        seconds = sum(float(s.get("time", 0)) for s in suites)
        passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
        lines.append(
            f"| {what} | {passed} | {total['failures']} | {total['errors']} | {total['skipped']} | {seconds:.0f} |"
        )
    return lines


def notebook_times(reports: Path) -> list[str]:
    out: list[str] = []
    for stem, what in PASSES.items():
        path = reports / f"{stem}.json"
        if not path.is_file():
            out += [f"**{what}**: not run.", ""]
            continue
        report = json.loads(path.read_text())
        refs = report["reference_seconds"]  # before and after the notebooks, or before each and after the last
        beside = report.get("reference_beside", {})  # notebook -> the reference just before and after it
        reference = sum(refs) / len(refs)
        spread = (max(refs) - min(refs)) / reference
        if beside:
            when = "before each notebook and after the last; each notebook's ratio is to the mean of the two beside it"
            moved = f" It moved by {spread:.0%} during the run." if spread > 0.10 else ""
        else:
            when = "before and after the notebooks"
            moved = f" It moved by {spread:.0%}, more than 10%: read these ratios with care." if spread > 0.10 else ""
        out += [
            f"**{what}**: the reference workload (benchmarks/reference.py) took "
            + ", ".join(f"{r:.2f} s" for r in refs)
            + f" ({when}; spread {spread:.0%}).{moved}"
            + (f" {report['workers']} notebooks ran at a time." if report.get("workers") else ""),
            "",
            "| notebook | seconds | ratio to the reference |",
            "|---|---|---|",
        ]
        times = report["notebooks"]
        ratios = {
            name: seconds / (sum(beside[name]) / 2 if name in beside else reference) for name, seconds in times.items()
        }
        for name, seconds in sorted(times.items()):
            flag = " (over the 6x budget)" if ratios[name] > PER_NOTEBOOK else ""
            out.append(f"| {Path(name).stem} | {seconds:.1f} | {ratios[name]:.1f}x{flag} |")
        total = sum(times.values())
        budget = SUITE_MEAN * len(times)
        ratio = f"**{sum(ratios.values()):.1f}x** (budget {budget:.1f}x)"
        suite = f"| **all {len(times)} notebooks** | **{total:.1f}** | {ratio} |"
        out += [suite, ""]
    return out


def benchmarks(reports: Path) -> list[str]:
    out: list[str] = []
    scripts = {
        "benchmark-notebooks": "Notebooks, each in a fresh kernel (benchmarks/notebooks.py)",
        "benchmark-attention": "Attention and cached decoding (benchmarks/attention.py)",
        "benchmark-optimizer": "AdamW's first step in a fresh process (benchmarks/optimizer.py)",
        "benchmark-speculative": "Speculative decoding in wall time, one thread (benchmarks/speculative.py)",
        "benchmark-playground": "The language-model playground in headless Chromium (benchmarks/playground.py)",
        "benchmark-check": "The fast loop (make check)",
    }
    for stem, what in scripts.items():
        path = reports / f"{stem}.txt"
        out += [f"### {what}", ""]
        out += ["```", path.read_text().rstrip(), "```", ""] if path.is_file() else ["Not run.", ""]
    return out


def _is_trained_claim(cell) -> bool:
    asserts = re.search(r"^\s*assert\b", cell.source, re.M)
    return cell.cell_type == "code" and "NBVAL_IGNORE_OUTPUT" in cell.source and asserts is not None


def trained_results() -> list[str]:
    """Each notebook's asserted trained cells: the first comment line and the printed output."""
    out: list[str] = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        entries = []
        for cell in filter(_is_trained_claim, nb.cells):
            printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").strip()
            if printed:
                why = re.search(r"#\s*why:\s*(.+)", cell.source)
                entries += [f"- {why.group(1).strip() if why else 'a trained result'}:", "", "  ```"]
                entries += [f"  {line}" for line in printed.splitlines()] + ["  ```", ""]
        if entries:
            out += [f"### {path.stem}", ""] + entries
    return out


def render(reports: Path = REPORTS) -> str:
    commit = _git("rev-parse", "--short=12", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", f":!{OUT.relative_to(ROOT)}")
    dirty = " (with uncommitted changes)" if changed else ""  # this file itself does not count
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADER,
        "",
        "# Results of the last full run",
        "",
        f"- Commit: `{commit}`{dirty}",
        f"- Machine: {machine()}",
        f"- Written: {when}, by `tools/results.py` from the reports of `make results`",
        "",
        "Speed and memory are figures, never a pass or fail: shared machines move by 2x within minutes,",
        "so the notebook times are given as ratios to a reference workload timed in the same run.",
        "",
        "## Tests",
        "",
        *test_counts(reports),
        "",
        "## Notebook times under nbval",
        "",
        *notebook_times(reports),
        "## Benchmarks",
        "",
        *benchmarks(reports),
        "## Trained results, as the notebooks print and assert them",
        "",
        "Each chapter asserts its own claims with a margin; these are the numbers of the run stored in the",
        "notebooks (`make execute`). On another machine they differ in the last digits.",
        "",
        *trained_results(),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--reports", type=Path, default=REPORTS)
    args = parser.parse_args(argv)
    if not args.reports.is_dir():
        print(f"no reports in {args.reports}: run `make results` (or `make test` and `make benchmark`) first")
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(args.reports))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
