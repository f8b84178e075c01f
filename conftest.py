"""Repository-wide pytest hooks: time every notebook that nbval runs, as a benchmark, not as a test.

At the end of an nbval run the table of notebook times is printed, each also as a ratio to the
reference workload of benchmarks/reference.py, timed in the same session. Run one notebook at a time,
the reference is timed before every notebook and after the last, and each notebook's ratio is to the mean
of the two timings beside it: a shared machine whose speed drifts during the run (by 30% in one run here)
moves the notebook and its reference alike. Under pytest-xdist it is timed before the first notebook and
after the last only. The spread of the timings is printed (a reference that moved by more than 10% says
so). With
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

# Triton's kernels (transformer_lib.flash_triton) run in its interpreter on a machine without an NVIDIA GPU; the
# choice is read when a kernel is made (@triton.jit), so it is made here, before any test module can use triton.
if not os.path.exists("/dev/nvidia0") and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

LIMIT_S = float(os.environ.get("NOTEBOOK_TIME_LIMIT", "600"))
BUDGET = 6.0
_times: dict[str, float] = defaultdict(float)
_reference: list[float] = []  # the reference workload's seconds: before each notebook (one at a time) and after
_started: list[str] = []  # the notebooks in the order they started, one reference timing before each


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        from kernel_start import install_into_nbval  # tools/, on pytest's pythonpath (pyproject.toml)

        install_into_nbval()  # imported only here: make check's unit tests start no kernel


def pytest_runtest_logstart(nodeid: str, location) -> None:
    """Before a notebook's first cell (outside every phase's duration): the reference, timed beside it."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb") and _reference and not _parallel and (not _started or _started[-1] != path):
        if _started:  # the first notebook's timing is the one made after collection
            _time_reference()
        _started.append(path)


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


_parallel: list[bool] = []  # non-empty under pytest-xdist: the notebooks overlap, so one reference for all


def _workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers run the notebooks at once (0: none, this process runs them)."""
    return int(getattr(config.option, "numprocesses", 0) or 0)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under pytest-xdist the workers collect and run the notebooks and this process only gathers their
    # reports, so it times the reference here, before any worker starts a kernel.
    config = session.config
    if _workers(config) and not hasattr(config, "workerinput") and getattr(config.option, "nbval", False):
        _parallel.append(True)
        _time_reference()


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or _workers(session.config):
        _parallel.append(True)
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
        when = "before each notebook and after the last" if _beside() else "before and after"
        if _beside() and spread > 0.10:
            warning = "  (it moved: each ratio below uses the timings beside its notebook)"
        line = f"reference workload (benchmarks/reference.py): {timed} ({when}), spread {spread:.0%}"
        terminalreporter.write_line(line + warning)
    workers = _workers(config)
    if workers:
        terminalreporter.write_line(f"{workers} notebooks at a time (pytest-xdist), each on its own kernel")
    beside = _beside()  # notebook -> the reference timed just before and just after it (one at a time)
    if beside:
        terminalreporter.write_line(
            "each notebook's ratio is to the mean of the reference timed just before and after it"
        )
    if os.environ.get("NOTEBOOK_REPORT"):
        report = Path(os.environ["NOTEBOOK_REPORT"])
        report.parent.mkdir(parents=True, exist_ok=True)
        fields = {"reference_seconds": _reference, "workers": workers, "notebooks": dict(_times)}
        report.write_text(json.dumps(fields | ({"reference_beside": beside} if beside else {}), indent=1))
    for path, seconds in sorted(_times.items()):
        near = sum(beside[path]) / 2 if path in beside else reference
        ratio = f"{seconds / near:6.1f}x" if near else ""
        over = near is not None and seconds / near > BUDGET
        flag = "  PAST THE SAFETY NET" if seconds > LIMIT_S else ("  over budget" if over else "")
        terminalreporter.write_line(f"{seconds:7.1f} s {ratio}  {path}{flag}")
    total = sum(_times.values())
    if beside and set(beside) == set(_times):  # the suite: the sum of the notebooks' own ratios
        suite = sum(seconds / (sum(beside[path]) / 2) for path, seconds in _times.items())
    else:
        suite = total / reference if reference else None
    terminalreporter.write_line(f"{total:7.1f} s {f'{suite:6.1f}x' if suite else ''}  all notebooks")


def _beside() -> dict[str, list[float]]:
    """Each notebook run one at a time -> [the reference timed before it, the one after it]."""
    if _parallel or len(_reference) != len(_started) + 1:
        return {}
    return {path: [_reference[i], _reference[i + 1]] for i, path in enumerate(_started)}


def pytest_sessionfinish(session, exitstatus) -> None:
    if any(seconds > LIMIT_S for seconds in _times.values()) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
