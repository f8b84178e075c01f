"""tools/grading.py: nbgrader grades a simulated class of the template chapter, exactly, twice over.

The submissions are written here from the student release: the chapter's own solutions (from the
instructor's assignment), classic mistakes, a syntax error, an endless loop, deleted, reordered and
edited cells, a file that is not a notebook, and three ways of replacing a checker or CORRECT.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import nbformat
import pytest

import grading

CHAPTER = "00_template"
TIMEOUT = 10  # seconds per cell while grading; the template's cells take well under one

# the classic mistakes of the template chapter, by exercise function: the allowed mask for the
# blocked one, and every entry counted instead of the lower triangle
WRONG = {
    "my_future_mask": "    return torch.ones(size, size, dtype=torch.bool).tril()",
    "my_allowed_count": "    return n * n",
}


def _answers(nb) -> dict[str, nbformat.NotebookNode]:
    """The answer cells of a notebook, by the name of the function each defines."""
    return {
        re.search(r"def (\w+)\(", c.source).group(1): c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def _body(cell, body: str) -> str:
    """The release's stub with its `raise tl.NotYetDone()` line replaced by `body`."""
    return re.sub(r"^\s*raise tl\.NotYetDone\(\).*$", body, cell.source, flags=re.M)


def _class(course: Path, out: Path) -> dict[str, dict[str, float]]:
    """Write the simulated class into `out`; the points each submission must get, by exercise."""
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    solved = _answers(nbformat.read(course / "source" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4))
    names = list(_answers(release))  # my_future_mask, my_allowed_count, ... in order
    assert len(names) >= 4 and set(WRONG) <= set(names)
    ids = {n: _answers(release)[n].metadata.nbgrader["grade_id"] for n in names}
    full = dict.fromkeys(ids.values(), 1.0)
    expected = {}

    def submit(student, points, change=None, answers=None):
        nb = nbformat.from_dict(release)
        cells = _answers(nb)
        for name in names:
            cells[name].source = (answers or {}).get(name, solved[name].source)
        if change:
            change(nb, cells)
        (out / student).mkdir(parents=True)
        nbformat.write(nb, out / student / f"{CHAPTER}.ipynb")
        expected[student] = {**full, **points}

    first, second, third, fourth = names[:4]
    submit("all_correct", {})
    submit("all_stubs", dict.fromkeys(ids.values(), 0.0), answers={n: _answers(release)[n].source for n in names})
    submit(
        "classic_mistakes",
        {ids[n]: 0.0 for n in WRONG},
        answers={n: _body(_answers(release)[n], WRONG[n]) for n in WRONG},
    )
    submit("syntax_error", {ids[second]: 0.0}, answers={second: _body(_answers(release)[second], "    return (")})
    endless = "    while True:\n        pass"
    submit("endless_loop", {ids[third]: 0.0}, answers={third: _body(_answers(release)[third], endless)})

    def shuffle(nb, cells):
        # the third answer deleted (its checker then fails), the fourth checker deleted (nbgrader adds it
        # back), the second exercise moved before the first, a read-only cell edited (nbgrader restores it)
        grade_ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
        nb.cells = [
            c for c, g in zip(nb.cells, grade_ids, strict=True) if g not in (ids[third], ids[fourth] + "_check")
        ]
        at = [i for i, c in enumerate(nb.cells) if c is cells[first] or c is cells[second]]
        block2 = nb.cells[at[1] : at[1] + 2]
        del nb.cells[at[1] : at[1] + 2]
        nb.cells[at[0] : at[0]] = block2
        setup = next(c for c in nb.cells if "import transformer_lib as tl" in c.source)
        setup.source = "raise SystemExit('a student edited a read-only cell')\n" + setup.source

    submit("deleted_reordered", {ids[third]: 0.0}, change=shuffle)
    (out / "corrupted").mkdir()
    (out / "corrupted" / f"{CHAPTER}.ipynb").write_text('{"cells": [ this is not JSON', encoding="utf-8")
    expected["corrupted"] = dict.fromkeys(ids.values(), 0.0)
    # a wrong answer with its checker replaced in the package: no points for it, flagged
    fake = _body(_answers(release)[first], WRONG[first]) + '\n\ntl.exercises.check_future_mask = lambda f: "Correct!"'
    submit("replaces_checker", {ids[first]: 0.0}, answers={first: fake})
    # CORRECT patched where every checker reads it: no points for any exercise
    patch = "import transformer_lib.exercises._common\n\ntransformer_lib.exercises._common.CORRECT = 'Not quite'\n"
    submit("replaces_correct", dict.fromkeys(ids.values(), 0.0), answers={first: patch + solved[first].source})
    # its own check_allowed_count and CORRECT in the notebook's namespace, and torch.equal made to agree
    own = (
        "\n\ndef check_allowed_count(fn):\n    return 'Correct!'\n\n\nCORRECT = 'Not quite'\n"
        "torch.equal = lambda a, b: True\n"
    )
    submit("redefines_in_namespace", dict.fromkeys(ids.values(), 0.0), answers={second: solved[second].source + own})
    return expected


def _rows(course: Path) -> dict[str, dict[str, str]]:
    with (course / "grades_by_exercise.csv").open() as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


@pytest.mark.slow
def test_a_simulated_class_is_graded_exactly(tmp_path):
    from nbgrader.api import Gradebook

    course, submissions = tmp_path / "course", tmp_path / "submissions"
    assert grading.release(course, [CHAPTER[:2]], points=1, timeout=TIMEOUT) == [CHAPTER]
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    text = "\n".join(c.source for c in release.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN" not in text and "solution_" not in text  # nothing leaks
    expected = _class(course, submissions)
    assert len(expected) >= 8

    grading.grade(course, submissions)
    first = (course / "grades_by_exercise.csv").read_text()
    rows = _rows(course)
    assert set(rows) == set(expected), "every student is graded"
    for student, points in expected.items():
        got = {k: float(rows[student][k]) for k in points}
        assert got == points, f"{student}: {rows[student]}"
        assert float(rows[student]["score"]) == sum(points.values()), student
    assert rows["corrupted"]["error"].startswith("not a readable notebook"), rows["corrupted"]
    assert all(not rows[s]["error"] for s in expected if s != "corrupted")
    flagged = {s for s in expected if rows[s]["flagged"]}
    assert flagged == {"replaces_checker", "replaces_correct", "redefines_in_namespace"}, flagged

    # the grader's own gradebook holds the same scores, and the flagged cells are marked for review
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, points in expected.items():
            if student != "corrupted":
                assert gb.find_submission(CHAPTER, student).score == sum(points.values()), student
        cell = gb.find_grade(f"{_first_id(course)}_check", CHAPTER, CHAPTER, "replaces_checker")
        assert cell.needs_manual_grade and cell.score == 0
    with (course / "grades.csv").open() as f:  # nbgrader's export
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert exported == {s: sum(p.values()) for s, p in expected.items()}

    # feedback: each checker's hint, the time limit, the flag, the clear error
    def feedback(student):
        return (course / "feedback" / student / CHAPTER / "feedback.md").read_text()

    assert feedback("all_correct").count("Correct!") == len(expected["all_correct"])
    assert "this is the allowed mask" in feedback("classic_mistakes").lower() or "allowed" in feedback(
        "classic_mistakes"
    )
    assert "SyntaxError" in feedback("syntax_error")
    assert "time limit" in feedback("endless_loop")
    assert "TAMPERED" in feedback("replaces_checker") and "Flagged" in feedback("replaces_checker")
    assert "not a readable notebook" in feedback("corrupted")
    assert (course / "feedback" / "all_correct" / CHAPTER / f"{CHAPTER}.html").exists()

    grading.grade(course, submissions)  # graded again: the same grades
    assert (course / "grades_by_exercise.csv").read_text() == first


def _first_id(course: Path) -> str:
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return next(
        c.metadata.nbgrader["grade_id"] for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")
    )
