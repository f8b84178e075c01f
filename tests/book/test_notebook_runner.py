"""tools/notebook_runner.py: a cell that runs too long, or whose reply never comes, fails and is named."""

from __future__ import annotations

import asyncio

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import notebook_runner


def _client(*sources: str, timeout: int = 20) -> NotebookClient:
    cells = [new_markdown_cell("# a title")] + [new_code_cell(source) for source in sources]
    nb = nbformat.from_dict(new_notebook(cells=cells))
    return NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate")


def test_every_code_cell_runs_in_order_and_is_timed():
    client = _client("x = 1", "# a comment\nx += 1\nprint(x)")
    seconds, cells = notebook_runner.run_cells(client, "two.ipynb")
    assert [(index, first) for _, index, first in cells] == [(1, "x = 1"), (2, "x += 1")]
    assert client.nb.cells[2].outputs[0]["text"] == "2\n"
    assert seconds >= sum(t for t, _, _ in cells) > 0


def test_a_cell_past_its_timeout_is_named():
    client = _client("x = 1", "import time\ntime.sleep(30)", timeout=2)
    with pytest.raises(notebook_runner.CellHung, match=r"slow.ipynb: cell 2 \('import time'\) ran for more than 2 s"):
        notebook_runner.run_cells(client, "slow.ipynb")


def test_a_reply_that_never_comes_is_named(monkeypatch):
    client = _client("x = 1", timeout=1)

    async def never_replies(cell, index, execution_count=None):  # a lost reply: nbclient would wait for good
        await asyncio.Event().wait()

    monkeypatch.setattr(client, "async_execute_cell", never_replies)
    monkeypatch.setattr(notebook_runner, "WATCHDOG_GRACE_S", 0.5)
    with pytest.raises(notebook_runner.CellHung, match=r"lost.ipynb: cell 1 \('x = 1'\) got no reply .* in 1.5 s"):
        notebook_runner.run_cells(client, "lost.ipynb")
