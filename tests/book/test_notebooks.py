"""Every notebook is in the book, follows the template, and is committed executed and clean."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

import setup_cell

ROOT = Path(__file__).resolve().parents[2]

NOTEBOOKS = setup_cell.notebooks(ROOT)
EXERCISE_LABEL = re.compile(r"\*\*Exercise \d+\*\* · (experiment · )?(easy|medium|hard) · about \d+ minutes\. ")
IDS = [p.name for p in NOTEBOOKS]


def _toc_files(node) -> list[str]:
    found = []
    if isinstance(node, dict):
        if "file" in node:
            found.append(node["file"])
        if "root" in node:
            found.append(node["root"])
        for value in node.values():
            found += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += _toc_files(item)
    return found


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb"


def test_every_notebook_is_in_the_toc():
    toc = {Path(f).with_suffix("").as_posix() for f in _toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))}
    missing = [p.name for p in NOTEBOOKS if f"notebooks/{p.stem}" not in toc]
    assert not missing, f"notebooks missing from _toc.yml: {missing}"


def test_every_toc_entry_exists():
    for entry in _toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text())):
        candidates = [ROOT / f"{entry}{ext}" for ext in ("", ".md", ".ipynb")]
        assert any(c.is_file() for c in candidates), f"_toc.yml names {entry}, which does not exist"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_setup_cell_is_generated_from_the_config(path):
    assert setup_cell.problems(path, ROOT) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_code_cell_holds_only_a_comment(path):
    """A cell of comments alone (a leftover placeholder) shows on the website as a stray code cell."""
    stray = [
        c.source
        for c in _read(path).cells
        if c.cell_type == "code" and all(line.strip().startswith("#") for line in c.source.splitlines() if line.strip())
    ]
    assert not stray, f"{path.name} has code cells that hold only comments: {stray}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_with_outputs_no_errors_and_counts_in_order(path):
    nb = _read(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    executed = [c for c in code if "nbval-skip" not in c.metadata.get("tags", [])]
    assert executed, "no code cells to run"
    counts = [c.execution_count for c in executed]
    assert None not in counts, f"{path.name} has cells that were never executed; run `make execute`"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), f"execution counts out of order: {counts}"
    assert any(c.outputs for c in executed), f"{path.name} was committed without outputs"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name} holds error outputs: {[e.ename for e in errors]}"
    stderr = [
        o.text
        for c in executed
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stderr" and "NBVAL_IGNORE_OUTPUT" not in c.source
    ]
    assert not any("Traceback" in s or "Warning" in s for s in stderr), f"{path.name} prints warnings: {stderr}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_follows_the_template(path):
    nb = _read(path)
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# "), "first cell: a '# Title'"
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    markdown = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert re.search(r"^import transformer_lib as tl$", code, re.M), "imports transformer_lib"
    assert "tl.set_seed(" in code and "tl.get_device()" in code, "calls set_seed and get_device"
    headings = re.findall(r"^## (.+)$", markdown, re.M)
    assert headings and headings[0] == "Learning goals", f"first section must be 'Learning goals', got {headings[:1]}"
    assert "Summary" in headings and "Exercises" in headings, f"needs Summary and Exercises sections: {headings}"
    assert headings.index("Summary") < headings.index("Exercises") == len(headings) - 1, "Summary, then Exercises last"
    figures = [c for c in cells if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})]
    assert figures, "needs at least one numbered figure (mystnb.figure metadata)"
    for c in figures:
        assert c.metadata["mystnb"]["figure"].get("caption"), "figure without caption"
        assert c.metadata["mystnb"]["figure"].get("name"), "figure without a name to cross-reference"
        assert c.metadata["mystnb"].get("image", {}).get("alt"), "figure without alt text"
    assert re.search(r"class: warning", markdown) and "Pitfalls" in markdown, "needs a Pitfalls box"
    assert "Self-check" in headings, "needs a Self-check quiz before the exercises"
    quiz = markdown.split("## Self-check", 1)[1].split("## Exercises", 1)[0]
    questions = re.findall(r"^\*\*Q\d+\.\*\*", quiz, re.M)
    assert 3 <= len(questions) <= 5, f"the Self-check needs 3 to 5 questions, has {len(questions)}"
    assert quiz.count("{admonition} Answer") == len(questions), "every Self-check question needs a hidden answer"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_exercises_have_checkers_and_hidden_solutions(path):
    cells = _read(path).cells
    tags = [c.metadata.get("tags", []) for c in cells]
    exercises = [i for i, t in enumerate(tags) if "exercise" in t]
    assert len(exercises) >= 3, f"needs at least 3 exercises, has {len(exercises)}"
    for i in exercises:
        checker = cells[i + 1]
        assert "checker" in tags[i + 1] and "tl.exercises.check_" in checker.source, (
            f"exercise cell {i} must be followed by a checker cell calling tl.exercises"
        )
        assert "return None" in cells[i].source, f"exercise cell {i} must be a stub that returns None"
        solution = cells[i + 2]
        assert "solution" in tags[i + 2] and "hide-input" in tags[i + 2], f"exercise cell {i} needs a hidden solution"
        assert checker.source.split("(")[0] in solution.source, "the solution must pass the same checker"
        printed = "".join(o.get("text", "") for o in solution.get("outputs", []))
        assert "Correct!" in printed, f"the solution to exercise cell {i} does not pass its checker: {printed!r}"
    statements = [c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("**Exercise ")]
    assert len(statements) == len(exercises), f"{len(exercises)} exercise cells but {len(statements)} statements"
    for text in statements:
        assert EXERCISE_LABEL.match(text), (
            f"an exercise must open with '**Exercise N** · [experiment · ]easy|medium|hard · about M minutes.', "
            f"got {text[:80]!r}"
        )
    assert any(EXERCISE_LABEL.match(t).group(1) for t in statements), "needs at least one experiment exercise"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_nbval_ignore_output_only_for_widgets_timings_and_asserted_trained_results(path):
    """nbval honours the marker only as the exact comment `# NBVAL_IGNORE_OUTPUT`; the next line says why.

    Widgets, timings and progress bars are ignored as they are. A trained result differs in its
    last digits between machines, so its printed numbers are ignored too, but only where the same
    cell asserts the claim it prints (a threshold, a property or an ordering): with `assert`, or with
    `tl.expect`, which raises outside the band it prints.
    """
    for cell in _read(path).cells:
        if cell.cell_type != "code" or "NBVAL_IGNORE_OUTPUT" not in cell.source:
            continue
        lines = cell.source.split("\n")
        marker = [i for i, line in enumerate(lines) if "NBVAL_IGNORE_OUTPUT" in line][0]
        assert lines[marker].strip() == "# NBVAL_IGNORE_OUTPUT", f"nbval ignores {lines[marker]!r}: write it alone"
        reason = lines[marker + 1].lower() if marker + 1 < len(lines) else ""
        assert reason.startswith("# why:") and any(w in reason for w in ("widget", "timing", "progress", "trained")), (
            f"{path.name}: the line after NBVAL_IGNORE_OUTPUT must say '# why: ...' (widget, timing, progress bar "
            "or trained result)"
        )
        if "trained" in reason:
            assert re.search(r"^\s*(assert |tl\.expect\()", cell.source, re.M), (
                f"{path.name}: a cell whose trained output nbval ignores must assert what it prints:\n{cell.source}"
            )
