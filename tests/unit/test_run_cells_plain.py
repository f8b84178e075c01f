"""tools/run_cells_plain.py, the notebook runner for machines without Jupyter: it runs the cells in order, skips
magics and shell lines, stands in for IPython.display where IPython is missing, and reports the first failure."""

import json

import pytest

import run_cells_plain  # tools/run_cells_plain.py


def _notebook(tmp_path, *sources):
    cells = [{"cell_type": "markdown", "source": "# a title", "metadata": {}}]
    cells += [
        {"cell_type": "code", "source": s, "metadata": {}, "outputs": [], "execution_count": None} for s in sources
    ]
    path = tmp_path / "plain.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_cells_share_one_namespace_and_magics_are_skipped(tmp_path):
    path = _notebook(tmp_path, "%matplotlib inline\nx = 2", "!echo skipped\nassert x * 3 == 6")
    ran, failure, _ = run_cells_plain.run_notebook(path)
    assert (ran, failure) == (2, None)


def test_without_ipython_the_display_imports_become_stand_ins(tmp_path, monkeypatch):
    monkeypatch.setattr(run_cells_plain, "_has_ipython", lambda: False)
    path = _notebook(
        tmp_path,
        "from IPython.display import Audio, display\nshown = Audio([0.0], rate=8000)",
        "display(shown)\nassert shown.kwargs == {'rate': 8000}",
    )
    ran, failure, _ = run_cells_plain.run_notebook(path)
    assert (ran, failure) == (2, None)


def test_the_first_failing_cell_is_named_and_main_exits_non_zero(tmp_path, capsys):
    path = _notebook(tmp_path, "y = 1", "assert y == 2, 'y is not 2'", "z = 3")
    ran, failure, _ = run_cells_plain.run_notebook(path)
    assert ran == 1 and "cell 2" in failure and "y is not 2" in failure
    assert run_cells_plain.main([str(path)]) == 1
    assert "FAILED, 1 code cells ran" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, expected",
    [
        ("from IPython.display import HTML", "HTML = type('HTML', (_Shown,), {})"),
        (
            "    from IPython.display import (Audio as A, display)",
            "    A = type('A', (_Shown,), {})\n    display = _display",
        ),
    ],
)
def test_display_imports_are_rewritten_keeping_names_and_indentation(line, expected):
    assert run_cells_plain._code(line, ipython=False) == expected
    assert run_cells_plain._code(line, ipython=True) == line
