"""Repository-wide pytest hooks: time every notebook that nbval runs and fail any over the limit.

The limit is 60 s per notebook (override with NOTEBOOK_TIME_LIMIT). The table of times is printed
at the end of the run, one line per notebook.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

LIMIT_S = float(os.environ.get("NOTEBOOK_TIME_LIMIT", "60"))
_times: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration


def _slow() -> list[str]:
    return [path for path, seconds in _times.items() if seconds > LIMIT_S]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _times:
        return
    terminalreporter.section(f"notebook execution times (limit {LIMIT_S:.0f} s each)")
    for path, seconds in sorted(_times.items()):
        flag = "  TOO SLOW" if seconds > LIMIT_S else ""
        terminalreporter.write_line(f"{seconds:7.1f} s  {path}{flag}")


def pytest_sessionfinish(session, exitstatus) -> None:
    if _slow() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
