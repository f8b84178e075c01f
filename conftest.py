"""Repository-wide pytest hooks: time every notebook that nbval runs, as a benchmark, not as a test.

At the end of an nbval run the table of notebook times is printed, each also as a ratio to the
reference workload of benchmarks/reference.py, timed once in the same session. The budget is
<= 6x per notebook (reported, never enforced: machines are shared and their speed moves). Only a
notebook past the safety net of NOTEBOOK_TIME_LIMIT seconds (default 600, far beyond any
plausible machine) fails the run, because then something hangs.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

LIMIT_S = float(os.environ.get("NOTEBOOK_TIME_LIMIT", "600"))
BUDGET = 6.0
_times: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration


def _reference_seconds() -> float | None:
    try:
        from reference import reference_seconds  # benchmarks/reference.py, on pytest's pythonpath (pyproject.toml)
    except ImportError:  # benchmarks/ missing: print the times without ratios
        return None
    return reference_seconds()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _times:
        return
    reference = _reference_seconds()
    title = f"notebook execution times (safety net {LIMIT_S:.0f} s each; budget {BUDGET:.0f}x the reference)"
    terminalreporter.section(title)
    if reference:
        terminalreporter.write_line(f"reference workload (benchmarks/reference.py): {reference:.2f} s")
    for path, seconds in sorted(_times.items()):
        ratio = f"{seconds / reference:6.1f}x" if reference else ""
        over = reference is not None and seconds / reference > BUDGET
        flag = "  PAST THE SAFETY NET" if seconds > LIMIT_S else ("  over budget" if over else "")
        terminalreporter.write_line(f"{seconds:7.1f} s {ratio}  {path}{flag}")
    total = sum(_times.values())
    terminalreporter.write_line(f"{total:7.1f} s {f'{total / reference:6.1f}x' if reference else ''}  all notebooks")


def pytest_sessionfinish(session, exitstatus) -> None:
    if any(seconds > LIMIT_S for seconds in _times.values()) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
