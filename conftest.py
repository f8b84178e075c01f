"""Repository-wide pytest hooks: time every notebook that nbval runs, as a benchmark, not as a test.

At the end of an nbval run the table of notebook times is printed, each also as a ratio to the
reference workload of benchmarks/reference.py, timed in the same session before the first notebook
and after the last, with its spread (a ratio whose reference moved by more than 10% says so). With
NOTEBOOK_REPORT set, the times also go to that JSON file for tools/results.py. The budget is
<= 6x per notebook (reported, never enforced: machines are shared and their speed moves). Only a
notebook past the safety net of NOTEBOOK_TIME_LIMIT seconds (default 600, far beyond any
plausible machine) fails the run, because then something hangs.

Every notebook's kernel starts through tools/kernel_start.py: over Unix sockets (no TCP port to race
for), waiting up to 300 s, retried once with a warning if it still does not answer.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

LIMIT_S = float(os.environ.get("NOTEBOOK_TIME_LIMIT", "600"))
BUDGET = 6.0
_times: dict[str, float] = defaultdict(float)
_reference: list[float] = []  # the reference workload's seconds, before the notebooks and after


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        from kernel_start import install_into_nbval  # tools/, on pytest's pythonpath (pyproject.toml)

        install_into_nbval()  # imported only here: make check's unit tests start no kernel


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration


def _time_reference() -> None:
    try:
        from reference import reference_seconds  # benchmarks/reference.py, on pytest's pythonpath (pyproject.toml)
    except ImportError:  # benchmarks/ missing: print the times without ratios
        return
    _reference.append(reference_seconds())


def _workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers run the notebooks at once (0: none, this process runs them)."""
    return int(getattr(config.option, "numprocesses", 0) or 0)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under pytest-xdist the workers collect and run the notebooks and this process only gathers their
    # reports, so it times the reference here, before any worker starts a kernel.
    config = session.config
    if _workers(config) and not hasattr(config, "workerinput") and getattr(config.option, "nbval", False):
        _time_reference()


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or _workers(session.config):
        return  # pytest-xdist: timed once, by the process that gathers the reports (pytest_sessionstart)
    if any(item.nodeid.split("::", 1)[0].endswith(".ipynb") for item in session.items):
        _time_reference()  # before the first notebook


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _times:
        return
    if _reference:
        _time_reference()  # after the last notebook
    reference = sum(_reference) / len(_reference) if _reference else None
    title = f"notebook execution times (safety net {LIMIT_S:.0f} s each; budget {BUDGET:.0f}x the reference)"
    terminalreporter.section(title)
    if reference:
        spread = (max(_reference) - min(_reference)) / reference
        timed = ", ".join(f"{r:.2f} s" for r in _reference)
        warning = "  MOVED BY MORE THAN 10%: the ratios below are uncertain" if spread > 0.10 else ""
        line = f"reference workload (benchmarks/reference.py): {timed} (before and after), spread {spread:.0%}"
        terminalreporter.write_line(line + warning)
    workers = _workers(config)
    if workers:
        terminalreporter.write_line(f"{workers} notebooks at a time (pytest-xdist), each on its own kernel")
    if os.environ.get("NOTEBOOK_REPORT"):
        report = Path(os.environ["NOTEBOOK_REPORT"])
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(
            json.dumps({"reference_seconds": _reference, "workers": workers, "notebooks": dict(_times)}, indent=1)
        )
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
