"""`make student`: no solution leaks, and every student notebook runs top to bottom."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import plain_notebooks
import student_edition
from notebook_runner import run_cells

ROOT = Path(__file__).resolve().parents[2]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    assert student_edition.main(["--out", str(out)]) == 0
    return out / "notebooks"


def _teacher(path):
    """The tested notebook as the student edition starts from it: its plain form, without MyST."""
    return plain_notebooks.plain_notebook(nbformat.read(path, as_version=4), plain_notebooks.bibliography())


def _solution_lines(nb) -> list[str]:
    """The distinctive lines of every solution in a teacher's notebook."""
    lines = []
    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []):
            lines += [ln.strip() for ln in cell.source.split("\n") if len(ln.strip()) > 25 and "print(" not in ln]
        if cell.cell_type == "markdown":
            for block in student_edition.SOLUTION_DROPDOWN.findall(cell.source):
                lines += [ln.strip() for ln in block.split("\n") if len(ln.strip()) > 25]
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_solution_leaks(edition, path):
    teacher = _teacher(path)
    student = nbformat.read(edition / path.name, as_version=4)
    text = "\n".join(c.source for c in student.cells)
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    assert "Solution to exercise" not in text and not re.search(r"def solution_\w+", text)
    # lines the chapter also teaches outside its solutions (e.g. the from-scratch layer norm) are not leaks
    taught = "\n".join(
        student_edition.SOLUTION_DROPDOWN.sub("", c.source)
        for c in teacher.cells
        if "solution" not in c.metadata.get("tags", [])
    )
    leaked = [line for line in _solution_lines(teacher) if line in text and line not in taught]
    assert not leaked, f"{path.name}: solution text in the student edition: {leaked[:3]}"
    checkers = [c for c in student.cells if "checker" in c.metadata.get("tags", [])]
    assert len(checkers) >= 3 and all("raises-exception" in c.metadata["tags"] for c in checkers)
    stubs = [c for c in student.cells if "exercise" in c.metadata.get("tags", [])]
    assert len(stubs) >= 3 and all("raise tl.NotYetDone(" in c.source for c in stubs)


def _names(tree: ast.AST, ctx: type) -> set[str]:
    """Names a cell binds (ctx=ast.Store, plus def/class) or reads (ctx=ast.Load)."""
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    if ctx is ast.Store:
        found |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_student_notebook_is_the_tested_notebook_minus_its_solutions(edition, path):
    """The cheap proof that a student notebook runs: nbval already ran every teacher cell.

    The student edition keeps those cells in order and changes only the exercise stubs (their
    `return None` becomes a friendly `raise tl.NotYetDone(...)` inside the function). So it runs
    as the teacher's does, unless a kept cell reads a name that only a removed solution defined:
    that is checked here, with Python's own parser, instead of executing every notebook again.
    """
    teacher = _teacher(path)
    student = nbformat.read(edition / path.name, as_version=4)
    kept = [c for c in teacher.cells if "solution" not in c.metadata.get("tags", [])]
    assert len(student.cells) == len(kept)
    removed: set[str] = set()
    for t, s in zip(kept, student.cells):
        tags = t.metadata.get("tags", [])
        assert s.cell_type == t.cell_type and s.metadata.get("tags", [])[: len(tags)] == tags
        if s.cell_type != "code":
            continue
        if "exercise" in t.metadata.get("tags", []):
            stub = re.search(r'raise tl\.NotYetDone\("[^"]*"\)', s.source)
            assert stub and s.source == t.source.replace("return None", stub.group(0)), f"{path.name}: stub changed"
        else:
            assert s.source == t.source, f"{path.name}: a kept cell changed"
    for cell in teacher.cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith(("%", "!")):
            continue
        tree = ast.parse("\n".join(ln for ln in cell.source.split("\n") if not ln.lstrip().startswith("%")))
        if "solution" in cell.metadata.get("tags", []):
            removed |= _names(tree, ast.Store)
        else:
            used = _names(tree, ast.Load) & removed
            assert not used, f"{path.name}: a kept cell reads {used}, which only a removed solution defines"


def test_one_student_notebook_runs_top_to_bottom(edition):
    """End to end, once: the template's student notebook stops only at its unfinished exercises."""
    nb = nbformat.read(edition / "00_template.ipynb", as_version=4)
    for cell in nb.cells:  # the setup cell installs nothing here: the package is already installed
        if "nbval-skip" in cell.metadata.get("tags", []):
            cell.source = "pass"
    client = NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(ROOT / "notebooks")}})
    run_cells(client, "student 00_template.ipynb")  # a hanging cell fails, named, within the timeout
    errors = [
        (c.source.split("(")[0], o.ename)
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert len(errors) >= 3, "each unfinished exercise's checker should stop with NotYetDone"
    assert {ename for _, ename in errors} == {"NotYetDone"}, f"unexpected errors: {errors}"
    last = nb.cells[-1]
    assert last.cell_type == "markdown" or last.execution_count is not None, "execution did not reach the end"


def test_the_slides_say_where_solutions_are_without_a_button_they_lack():
    """A deck has no "Show code cell source": its exercise slide points to the website and the instructor's copy."""
    import slides

    bib = plain_notebooks.bibliography()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        deck = slides.slide_notebook(nbformat.read(path, as_version=4), bib)
        text = "\n".join(c.source for c in deck.cells if c.cell_type == "markdown")
        assert "Show code" not in text and "double-click" not in text, path.name
        assert slides.WHERE_SOLUTIONS in text, path.name
