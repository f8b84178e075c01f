"""Run a notebook's code cells in a fresh kernel, one event loop for all of them, each under a watchdog.

Used by benchmarks/notebooks.py and tests/book/test_student_edition.py, which time or check one
cell at a time. nbclient's synchronous execute_cell stops its event loop after every cell; run that
way, 2 of 5 runs of chapter 8 sat idle for good at its attention explorer (kernel and client both
waiting, past nbclient's own timeout). With one loop for the whole notebook, 0 of 8 did. Whatever
the cause, the watchdog turns such a wait into an error that names the notebook and the cell.
"""

from __future__ import annotations

import asyncio
import time

from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

from kernel_start import STARTUP_TIMEOUT_S, IpcKernelManager

WATCHDOG_GRACE_S = 10  # beyond nbclient's own per-cell timeout


class CellHung(RuntimeError):
    """A cell ran past its timeout, or its reply never came; the message names the notebook and the cell."""


def run_cells(client: NotebookClient, name: str) -> tuple[float, list[tuple[float, int, str]]]:
    """Execute every code cell of client.nb in a new kernel (shut down afterwards, as the client says).

    Returns (seconds from the kernel's start to the last cell's end, [(seconds, cell index, first
    line)]). Raises CellHung when a cell runs past client.timeout or no reply comes within
    WATCHDOG_GRACE_S more; an error in a cell raises nbclient's CellExecutionError as usual. The kernel talks
    over Unix sockets and may take STARTUP_TIMEOUT_S to start (tools/kernel_start.py says why).
    """
    if client.km is None:
        client.kernel_manager_class = IpcKernelManager
        client.startup_timeout = max(client.startup_timeout, STARTUP_TIMEOUT_S)
    return asyncio.run(_run_cells(client, name))


async def _run_cells(client: NotebookClient, name: str) -> tuple[float, list[tuple[float, int, str]]]:
    cells: list[tuple[float, int, str]] = []
    start = time.perf_counter()
    async with client.async_setup_kernel():
        for index, cell in enumerate(client.nb.cells):
            if cell.cell_type != "code":
                continue
            first = next((line for line in cell.source.splitlines() if not line.startswith("#")), "")[:70]
            t0 = time.perf_counter()
            try:
                run = client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
                await asyncio.wait_for(run, client.timeout + WATCHDOG_GRACE_S)
            except CellTimeoutError:
                raise CellHung(f"{name}: cell {index} ({first!r}) ran for more than {client.timeout} s") from None
            except TimeoutError:
                raise CellHung(
                    f"{name}: cell {index} ({first!r}) got no reply from the kernel in "
                    f"{client.timeout + WATCHDOG_GRACE_S} s"
                ) from None
            cells.append((time.perf_counter() - t0, index, first))
        seconds = time.perf_counter() - start  # the last cell's end: the kernel's shutdown is not counted
    return seconds, cells
