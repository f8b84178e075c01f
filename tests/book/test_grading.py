"""tools/grading.py: nbgrader grades a simulated class of the template chapter, exactly, twice over.

The submissions are written here from the student release: the chapter's own solutions (from the
instructor's assignment), classic mistakes, a syntax error, an endless loop, deleted, reordered and
edited cells, a file that is not a notebook, three ways of replacing a checker or CORRECT, a callable
object in place of torch.equal, one checker replaced by setattr, a kernel that dies, a 50 MB print, and
a student graded first who writes to the checkers, the package, the gradebook and another student's work.
"""

from __future__ import annotations

import csv
import hashlib
import html
import re
import sys
from pathlib import Path

import nbformat
import pytest

import grading
import grading_guard

CHAPTER = "00_template"
MARKER = "all_correct's own words, 7f3a9c"  # in one submission only: no other student may read it
DETACHED = "tl-grading-detached-7f3a9c"  # in the command line of a student's detached process
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

    def mark(nb, cells):
        cells[first].source += f"\n# {MARKER}"

    submit("all_correct", {}, change=mark)
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

    # graded first (by name): tries to make its own copy of the checkers always say Correct, to write to the real
    # package's files, the gradebook, another student's work and the grader's snapshot, and to add a student. In the
    # sandbox none of those paths can be reached or written: each attempt fails, and its right answers count
    course_dir, package, other = course.resolve(), grading_guard.package_dir(), out.resolve() / "all_stubs"
    full_marks = out.resolve() / "all_correct" / f"{CHAPTER}.ipynb"
    collected = course_dir / "submitted" / "all_stubs" / CHAPTER / f"{CHAPTER}.ipynb"
    vandal = f"""
import os, pathlib, shutil
import transformer_lib.exercises.ch00_template as ch


def attempt(what, action):
    try:
        action()
        print("DONE", what)
    except Exception as error:
        print("refused", what, type(error).__name__)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


every = "\\nfor _n in __all__:\\n    globals()[_n] = lambda *a, **k: CORRECT\\n"
attempt("own checkers", lambda: append(ch.__file__, every))
for real in [{str(package / "exercises" / "ch00_template.py")!r}, {str(package / "__init__.py")!r}]:
    attempt(real, lambda: append(real, "\\n# a student was here\\n"))
attempt("gradebook", lambda: pathlib.Path({str(course_dir / "gradebook.db")!r}).write_bytes(b"not a gradebook"))
for theirs in [{str(other / f"{CHAPTER}.ipynb")!r}, {str(collected)!r}]:
    attempt(theirs, lambda: shutil.copy({str(full_marks)!r}, theirs))
attempt("ghost", lambda: pathlib.Path({str(out.resolve() / "zz_ghost")!r}).mkdir())
"""
    submit("aa_writes_files", {}, answers={first: vandal + solved[first].source})

    # a startup file in the home folder, with an input transformer that turns every later checker cell into
    # print("Correct!"): in the sandbox the home folder is this submission's own, thrown away after it
    hijack = (
        "def _rewrite(lines):\n"
        "    return ['print(\\'Correct!\\')\\n'] if any('check_' in line for line in lines) else lines\n"
        "get_ipython().input_transformers_post.append(_rewrite)\n"
    )
    startup = f"""
import os, pathlib
for root in [pathlib.Path.home() / ".ipython", pathlib.Path(os.environ.get("IPYTHONDIR", "/nowhere"))]:
    folder = root / "profile_default" / "startup"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00-everyone-passes.py").write_text({hijack!r})
"""
    stubs = {n: _answers(release)[n].source for n in names}
    submit("ab_startup_file", dict.fromkeys(ids.values(), 0.0), answers={**stubs, first: startup + stubs[first]})

    # a detached process (its own session, double fork) that waits for later students, then hands in full marks for
    # all_stubs and breaks the gradebook: it dies with its sandbox
    later = f"""
import time, shutil, pathlib
time.sleep(3)
for target in [{str(other / f"{CHAPTER}.ipynb")!r}, {str(collected)!r}]:
    try:
        shutil.copy({str(full_marks)!r}, target)
    except OSError:
        pass
try:
    pathlib.Path({str(course_dir / "gradebook.db")!r}).write_bytes(b"x")
except OSError:
    pass
time.sleep(600)  # {DETACHED}
"""
    detach = f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", {later!r}], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
    submit("ac_detached_process", dict.fromkeys(ids.values(), 0.0), answers={**stubs, first: detach + stubs[first]})

    # torch.equal replaced by a forgery that copies the name, the module, the type's name and module of the real one
    # and is defined in a file that is not the notebook's: the hidden check compares identity, so it is flagged
    forge = """
import functools
_space = {}
exec(compile(
    "class builtin_function_or_method:\\n    def __call__(self, *a, **k):\\n        return True\\n",
    "/usr/lib/python3/dist-packages/looks_real.py", "exec"), _space)
_kind = _space["builtin_function_or_method"]
_kind.__module__, _kind.__qualname__ = "builtins", "builtin_function_or_method"
_fake = _kind()
_fake.__module__, _fake.__name__, _fake.__qualname__ = "torch", "equal", "equal"
torch.equal = _fake
"""
    wrong = {n: _body(_answers(release)[n], WRONG[n]) for n in WRONG}
    submit("ad_forged_callable", dict.fromkeys(ids.values(), 0.0), answers={**wrong, first: forge + wrong[first]})

    # manual_score set to full marks in any gradebook it can find: none is in its sandbox, and none is trusted
    manual = """
import os, sqlite3
for top in ["/", os.path.expanduser("~")]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
        for name in files:
            if name.endswith(".db"):
                try:
                    db = sqlite3.connect(os.path.join(folder, name))
                    db.execute("UPDATE grade SET manual_score = 1, needs_manual_grade = 0")
                    db.commit()
                    print("set manual_score in", os.path.join(folder, name))
                except Exception as error:
                    print("could not use", name, error)
"""
    submit("ae_manual_score", dict.fromkeys(ids.values(), 0.0), answers={**stubs, first: manual + stubs[first]})

    # the first exercise right; the second answer cell loops around KeyboardInterrupt, so the interrupt at its time
    # limit does nothing: its kernel is killed, the first exercise keeps its point, the rest get 0
    swallow = "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n"
    swallow += "    except KeyboardInterrupt:\n        pass\n"
    submit(
        "af_swallows_interrupt",
        {ids[second]: 0.0, ids[third]: 0.0, ids[fourth]: 0.0},
        answers={second: swallow + solved[second].source},
    )

    # reads everything it can reach for solutions, hidden tests, the course and other students, prints what it
    # finds, and prints the kernel's input history (the hidden checks run there) in a cell of its own at the end
    reader = f"""
import os
found = []
for folder, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr", "site-packages")]
    for name in files:
        path = os.path.join(folder, name)
        if name.endswith((".ipynb", ".db", ".csv")) or "gradebook" in name or "submitted" in path:
            found.append(path)
        elif os.path.getsize(path) < 1_000_000:
            try:
                text = open(path, errors="ignore").read()
            except OSError:
                continue
            if any(m in text for m in ("def solution_", "_nbgrader_check", {MARKER!r}, "all_stubs")):
                found.append(path)
for path in found:
    print("FOUND", path)
    try:
        print(open(path, errors="ignore").read()[:20000])
    except OSError as error:
        print(error)
"""

    def history(nb, cells):
        nb.cells.append(nbformat.v4.new_code_cell("print('\\n'.join(In))\nprint(_ih[-2])"))

    # and its second answer prints the cell it runs in (the checker cell, hidden part included) when it is called
    quoting = solved[second].source.replace("\n    return ", "\n    print(In[-1])\n    return ", 1)
    assert quoting != solved[second].source
    submit("ag_reads_everything", {}, change=history, answers={first: reader + solved[first].source, second: quoting})

    # writes a .pth file and sitecustomize.py into the environment's site-packages and a script into its bin:
    # read-only in the sandbox, so the rest of the class is graded as usual
    env_writer = """
import sys, sysconfig, pathlib
for target, text in [
    (pathlib.Path(sysconfig.get_paths()["purelib"]) / "zz_stop.pth", "import sys; sys.exit(1)\\n"),
    (pathlib.Path(sysconfig.get_paths()["purelib"]) / "sitecustomize.py", "raise SystemExit(1)\\n"),
    (pathlib.Path(sys.executable).parent / "jupyter-nbconvert", "#!/bin/sh\\nexit 1\\n"),
]:
    try:
        target.write_text(text)
        print("wrote", target)
    except OSError as error:
        print("refused", target, type(error).__name__)
"""
    submit("ah_site_packages", {}, answers={first: env_writer + solved[first].source})

    # torch.equal replaced by an object with __call__, to let two wrong answers through: every check after it
    patch = "\n\nclass Yes:\n    def __call__(self, *a, **k):\n        return True\n\n\ntorch.equal = Yes()\n"
    wrong = {n: _body(_answers(release)[n], WRONG[n]) for n in WRONG}
    wrong[first] = patch + wrong[first]
    submit("callable_patch", dict.fromkeys(ids.values(), 0.0), answers=wrong)

    # one checker replaced by setattr, with a name built at run time: that exercise only is flagged
    one = "\n\nE = tl.exercises\nsetattr(E, 'check_' + 'future_mask', lambda *a, **k: E.CORRECT)\n"
    submit("one_checker_setattr", {ids[first]: 0.0}, answers={first: wrong[first].replace(patch, "") + one})

    # the kernel dies in the third answer: the first two are graded
    dies = "    import os\n\n    os._exit(0)"
    submit("kernel_dies", {ids[third]: 0.0, ids[fourth]: 0.0}, answers={third: _body(_answers(release)[third], dies)})

    # 50 MB printed by a correct answer: kept as a bounded head and tail
    flood = "\n\nfor _ in range(50_000):\n    print('x' * 999)\n"
    submit("prints_50mb", {}, answers={second: solved[second].source + flood})
    return expected


def _digest(roots: list[Path]) -> dict[str, str]:
    """Every file under the roots, by path: its sha256."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _rows(course: Path) -> dict[str, dict[str, str]]:
    with (course / "grades_by_exercise.csv").open() as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def _processes(marker: str) -> list[str]:
    """The command lines of this machine's processes that contain marker."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not a process
            continue
        if marker in line:
            found.append(line)
    return found


def _need_bubblewrap() -> None:
    """The sandbox's bwrap, as the browser tests treat Chromium: a loud skip on a reader's machine without it, a
    failure under CI=true (.ci/run installs it)."""
    import os

    import grading_sandbox

    try:
        grading_sandbox.check_available()
    except grading_sandbox.SandboxUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the grader's sandbox is needed here. {error}")
        pytest.skip(f"!!! THE GRADING SANDBOX TEST IS SKIPPED: {error}")


@pytest.mark.slow
def test_a_simulated_class_is_graded_exactly(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    _need_bubblewrap()
    home = tmp_path / "instructor_home"  # the instructor's home folder while grading: nothing may appear in it
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("IPYTHONDIR", raising=False)
    course, submissions = tmp_path / "course", tmp_path / "submissions"
    assert grading.release(course, [CHAPTER[:2]], points=1, timeout=TIMEOUT) == [CHAPTER]
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    text = "\n".join(c.source for c in release.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN" not in text and "solution_" not in text  # nothing leaks
    expected = _class(course, submissions)
    assert len(expected) >= 20
    package = grading_guard.package_dir()
    untouched = [package, submissions, Path(grading.__file__).parent, course / "source", course / "release"]
    before = _digest(untouched)
    saved = {p: Path(p).read_bytes() for p in before if str(package) in p}  # the checkout, whatever happens
    home_before = sorted(str(p.relative_to(home)) for p in home.rglob("*"))

    try:
        grading.grade(course, submissions)
        assert _digest(untouched) == before, "grading left a file changed"
    finally:
        for path, data in saved.items():
            Path(path).write_bytes(data)
    assert not _processes(DETACHED), "a student's process outlived its grading"
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
    assert flagged == {
        "replaces_checker",
        "replaces_correct",
        "redefines_in_namespace",
        "callable_patch",
        "one_checker_setattr",
        "ad_forged_callable",
    }, flagged
    first_id = _first_id(course)
    assert rows["one_checker_setattr"]["flagged"] == f"TAMPERED: {first_id}", rows["one_checker_setattr"]
    assert "torch.equal (with another object: equal)" in _feedback(course, "ad_forged_callable")
    # the sandbox: every write outside the submission's own folders was refused inside, nothing reached the class
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == home_before, "a file appeared in HOME"
    assert not (submissions / "zz_ghost").exists()
    stopped = rows["af_swallows_interrupt"]["note"]
    assert "stopped the kernel at exercise 2" in stopped and "ignored the interrupt" in stopped, stopped
    assert "check_allowed_count" not in stopped  # the answer cell that looped is named, not its checker
    graded = nbformat.read(course / "autograded" / "aa_writes_files" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    said = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert said.count("refused") == 7 and "DONE" not in said, said
    graded = nbformat.read(course / "autograded" / "ah_site_packages" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    said = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert said.count("refused") == 3 and "wrote" not in said, said
    graded = nbformat.read(course / "autograded" / "ae_manual_score" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    said = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    # (it finds nbgrader's own test gradebook in site-packages, read-only, and nothing of the course)
    assert "set manual_score in" not in said and "course" not in said, said
    # what the reader printed: nothing of the course, the solutions, the hidden checks or another student
    graded = nbformat.read(course / "autograded" / "ag_reads_everything" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in graded.cells[_answer_index(graded, first_id)].outputs)
    assert "FOUND" not in printed, printed[:2000]
    # feedback: verdicts and hints, never a hidden check, a solution or another student's work
    # (what a student wrote itself may come back to it: the simulated class pasted the instructor's solutions)
    for student in expected:
        own = (submissions / student / f"{CHAPTER}.ipynb").read_text(errors="ignore")
        secrets = ["_nbgrader_check", "HIDDEN TESTS", "def solution_", MARKER, "tl-grading-"]
        secrets = [s for s in secrets if s not in own]
        for path in (course / "feedback" / student).rglob("*"):
            if path.is_file():  # the HTML's code is highlighted token by token: read its text
                text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text(errors="ignore")))
                assert not [s for s in secrets if s in text], (student, path.name)
    page = course / "feedback" / "ag_reads_everything" / CHAPTER / f"{CHAPTER}.html"
    assert page.read_text().count("output withheld by the grader") >= 2  # the history cell and the checker's
    assert "withheld by the grader" in _feedback(course, "ag_reads_everything")
    assert "Yes" in rows["callable_patch"]["flagged"] or "torch.equal" in _feedback(course, "callable_patch")
    assert "kernel died at exercise 3" in rows["kernel_dies"]["note"], rows["kernel_dies"]
    assert "check_cached_rows" in rows["kernel_dies"]["note"]  # the checker cell, which ran the answer
    assert not (submissions / "zz_ghost").exists()
    graded = course / "autograded" / "prints_50mb" / CHAPTER / f"{CHAPTER}.ipynb"
    assert graded.stat().st_size < 1_000_000, graded.stat().st_size
    assert "cut by the grader" in graded.read_text()
    page = course / "feedback" / "prints_50mb" / CHAPTER / f"{CHAPTER}.html"
    assert page.stat().st_size < 2_000_000 and "cut by the grader" in page.read_text()

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
        return _feedback(course, student)

    assert feedback("all_correct").count("Correct!") == len(expected["all_correct"])
    assert "this is the allowed mask" in feedback("classic_mistakes").lower() or "allowed" in feedback(
        "classic_mistakes"
    )
    assert "SyntaxError" in feedback("syntax_error")
    assert "time limit" in feedback("endless_loop")
    assert "TAMPERED" in feedback("replaces_checker") and "Flagged" in feedback("replaces_checker")
    assert "not a readable notebook" in feedback("corrupted")
    assert (course / "feedback" / "all_correct" / CHAPTER / f"{CHAPTER}.html").exists()
    assert "kernel died at exercise 3" in feedback("kernel_dies") and "please check the file" not in feedback(
        "kernel_dies"
    )

    try:
        grading.grade(course, submissions)  # graded again: the same grades, and still nothing changed
        assert _digest(untouched) == before, "grading left a file changed"
    finally:
        for path, data in saved.items():
            Path(path).write_bytes(data)
    assert (course / "grades_by_exercise.csv").read_text() == first


def _feedback(course: Path, student: str) -> str:
    return (course / "feedback" / student / CHAPTER / "feedback.md").read_text()


def _answer_index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _first_id(course: Path) -> str:
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return next(
        c.metadata.nbgrader["grade_id"] for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")
    )


class _Yes:
    def __call__(self, *args, **kwargs):
        return True


def _forgery(name: str, module: str):
    """A callable that copies a builtin's name, module, qualified name and type name, defined in a file that is not
    a notebook's: it passed a comparison of names and signatures."""
    space = {}
    source = "class builtin_function_or_method:\n    def __call__(self, *a, **k):\n        return True\n"
    exec(compile(source, "/usr/lib/python3/dist-packages/looks_real.py", "exec"), space)
    kind = space["builtin_function_or_method"]
    kind.__module__, kind.__qualname__ = "builtins", "builtin_function_or_method"
    fake = kind()
    fake.__module__, fake.__name__, fake.__qualname__ = module, name, name
    return fake


@pytest.mark.parametrize(
    "kind", ["function", "callable object", "partial", "another library's builtin", "a forgery of its signature"]
)
def test_the_hidden_check_flags_a_replaced_function_whatever_its_type(monkeypatch, kind):
    """torch.equal replaced by a lambda, an object with __call__, a partial, torch.allclose, or an object that copies
    its name, module and type's name: TAMPERED each time (compared by identity with what was recorded first)."""
    import functools

    import torch

    import transformer_lib as tl

    space = {}
    exec(grading._GUARD, space)
    check = space["_nbgrader_check"]
    monkeypatch.setitem(sys.modules, grading.CLEAN, None)  # no record yet (and none left after the test)
    assert check(None, None) > 100  # the record, before anything is replaced
    notebook = {"tl": tl, "answer": lambda size: ~tl.causal_mask(size)}
    calls = [("check_future_mask", ["answer"], {})]
    check(notebook, calls)  # nothing replaced: the right answer passes
    fake = {
        "function": lambda a, b: True,
        "callable object": _Yes(),
        "partial": functools.partial(torch.allclose, atol=1e9),
        "another library's builtin": torch.allclose,
        "a forgery of its signature": _forgery("equal", "torch"),
    }[kind]
    monkeypatch.setattr(torch, "equal", fake)
    with pytest.raises(AssertionError, match=r"TAMPERED: this notebook replaced torch\.equal"):
        check(notebook, calls)


_NO_RECORD = """
import sys, types
space = {}
exec(open(sys.argv[1]).read(), space)
check = space["_nbgrader_check"]
import transformer_lib as tl
fake = types.ModuleType(sys.argv[2])
fake.objects = "everything is clean"
for record in (None, fake):
    sys.modules[sys.argv[2]] = record
    try:
        check({"tl": tl, "answer": lambda size: ~tl.causal_mask(size)}, [("check_future_mask", ["answer"], {})])
        print("PASSED")
    except AssertionError as error:
        print(str(error).split(".")[0])
"""


def test_the_hidden_check_refuses_a_grading_kernel_without_its_record(tmp_path):
    """In a kernel the grader started (TL_GRADING_PACKAGE in the environment it started with), the record is made
    before the notebook's first cell: a notebook that removes it, or puts a record of its own in its place, is
    TAMPERED, not recorded afresh."""
    import os
    import subprocess

    guard = tmp_path / "guard.py"
    guard.write_text(grading._GUARD)
    env = dict(os.environ, TL_GRADING_PACKAGE=str(grading_guard.package_dir().parent))
    out = subprocess.run(
        [sys.executable, "-c", _NO_RECORD, str(guard), grading.CLEAN],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout.splitlines()
    assert out == ["TAMPERED: this notebook removed or replaced the grader's record of the clean library functions"] * 2


def test_the_file_reader_flags_exactly_what_was_replaced():
    """setattr with a built name replaces that checker; a line that reads CORRECT replaces nothing."""
    cell = nbformat.v4.new_code_cell(
        "E = tl.exercises\n"
        "setattr(E, 'check_' + 'future_mask', lambda *a, **k: E.CORRECT)\n"
        "print(E.CORRECT, tl.exercises.check_allowed_count)\n"
        "from transformer_lib.exercises import CORRECT\n"
        "vars(E)[f'check_{\"cached\"}_rows'] = print\n"
        "E._common.CORRECT = 'x'\n"
        "%time x = 1\n"
    )
    names = {"check_future_mask", "check_allowed_count", "check_cached_rows"}
    found = grading._static_findings(nbformat.v4.new_notebook(cells=[cell]), names)
    assert sorted(target for target, _ in found) == ["CORRECT", "check_cached_rows", "check_future_mask"], found


_REDIRECT = """
import json, os, pathlib, sys
space = {}
exec(open(sys.argv[1]).read(), space)
check = space["_nbgrader_check"]
fake = pathlib.Path(sys.argv[2]) / "transformer_lib"
(fake / "exercises").mkdir(parents=True)
(fake / "__init__.py").write_text("")
(fake / "exercises" / "__init__.py").write_text("CORRECT = 'Correct!'\\ndef check_future_mask(*a): return CORRECT\\n")
for name in [n for n in sys.modules if n.startswith("transformer_lib")]:
    del sys.modules[name]
sys.path.insert(0, sys.argv[2])  # the notebook points Python at a package of its own
check(None, None)  # the grader records the clean objects before the notebook's first cell
os.environ.pop("TL_GRADING_PACKAGE")  # and the notebook hides where the grader's copy is from os.environ
import transformer_lib as tl
try:
    check({"tl": tl, "answer": None}, [("check_future_mask", ["answer"], {})])
    print("PASSED")
except AssertionError as error:
    print(str(error))
"""


def test_the_hidden_check_reads_the_environment_the_kernel_started_with(tmp_path):
    """A notebook that puts a fake transformer_lib first on sys.path (and edits os.environ) is flagged: the check
    reads where the grader's copy is from the environment the kernel started with, which a notebook cannot edit."""
    import os
    import shutil
    import subprocess
    import sys

    guard = tmp_path / "guard.py"
    guard.write_text(grading._GUARD)
    private = tmp_path / "lib"
    shutil.copytree(Path(grading.__file__).parents[1] / "transformer_lib", private / "transformer_lib")
    env = dict(os.environ, PYTHONPATH=str(private), TL_GRADING_PACKAGE=str(private))
    out = subprocess.run(
        [sys.executable, "-c", _REDIRECT, str(guard), str(tmp_path / "fake")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "TAMPERED: this notebook made Python find transformer_lib at" in out, out
    assert str(tmp_path / "fake") in out


def test_the_hidden_check_flags_a_swapped_import_system(tmp_path, monkeypatch):
    """What the check itself calls is watched too: an importlib.import_module that hands the grader's second import
    fake checkers, or a finder of the notebook's own on sys.meta_path, is TAMPERED."""
    import importlib
    import types

    import transformer_lib as tl

    space = {}
    exec(grading._GUARD, space)
    check = space["_nbgrader_check"]
    monkeypatch.setitem(sys.modules, grading.CLEAN, None)
    check(None, None)
    notebook = {"tl": tl, "answer": lambda size: tl.causal_mask(size)}  # wrong: the allowed mask, not the blocked one
    calls = [("check_future_mask", ["answer"], {})]
    with pytest.raises(AssertionError, match="the allowed mask"):
        check(notebook, calls)  # graded, and wrong
    fake = types.ModuleType("fake")
    fake.check_future_mask = lambda *args: "Correct!"
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: fake if "_run_" in name else real(name, *a))
    with pytest.raises(AssertionError, match=r"TAMPERED: this notebook replaced importlib\.import_module"):
        check(notebook, calls)
    monkeypatch.setattr(importlib, "import_module", real)
    finder = {"__name__": "__main__"}  # a class written in a notebook cell
    exec(compile("class Finder:\n    def find_spec(self, *args):\n        return None\n", "<cell>", "exec"), finder)
    monkeypatch.setattr(sys, "meta_path", [finder["Finder"](), *sys.meta_path])
    with pytest.raises(AssertionError, match=r"TAMPERED: this notebook replaced sys\.meta_path"):
        check(notebook, calls)


def test_the_file_reader_flags_a_notebook_that_reaches_into_ipython():
    """A transformer of IPython's could rewrite the hidden cell before it runs, so no run-time check would see it:
    the file is read for it, written out or built from pieces. A plain answer is not flagged."""
    cells = [
        "get_ipython().input_transformers_post.append(lambda lines: ['pass'])",
        "shell = globals()['get_' + 'ipython']()",
        "setattr(shell, 'transform' + '_cell', str)",
        "from IPython import get_ipython as g",
        "%load_ext my_rewriter",
        "%config InteractiveShell.ast_node_interactivity = 'all'",
        "def my_future_mask(size):\n    return ~torch.ones(size, size, dtype=torch.bool).tril()",
        "%config InlineBackend.figure_format = 'retina'",  # how figures look: a learner's, not a hook
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    found = grading._static_findings(nb, {"check_future_mask"})
    assert sorted({line for target, line in found if target == "IPython"}) == sorted(cells[:6]), found
    assert all(target == "IPython" for target, _ in found)


_HOOKS = {
    "an input transformer": "get_ipython().input_transformers_post.append(lambda lines: lines)",
    "an AST transformer from a library": "import ast\nget_ipython().ast_transformers.append(ast.NodeTransformer())",
    "an event callback": "get_ipython().events.register('pre_run_cell', lambda *a: None)",
}


def test_the_hidden_check_flags_ipython_hooks_of_the_notebook():
    """In a real kernel: a clean one passes a right answer; each kind of hook the notebook adds is TAMPERED (each in
    a kernel of its own, so that no other hook is there to be seen)."""
    from nbclient import NotebookClient

    # a chapter's own callbacks are not the notebook's: pyplot registers one when it draws
    setup = "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()\nimport transformer_lib as tl\n"
    setup += "answer = lambda size: ~tl.causal_mask(size)\n" + grading._GUARD
    check = "_nbgrader_check(globals(), [('check_future_mask', ['answer'], {})])\nprint('graded')"
    for kind, hook in {"none": "pass", **_HOOKS}.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (setup, hook, check)])
        NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=60).execute()
        said = "".join(o.get("text", "") + o.get("evalue", "") for o in nb.cells[2].outputs)
        if kind == "none":
            assert said.strip() == "graded", said
        else:
            assert said.startswith("TAMPERED: this notebook replaced IPython's"), (kind, said)


@pytest.mark.slow
def test_the_trusted_mode_still_puts_back_and_flags(tmp_path, monkeypatch):
    """Without the sandbox (TRUSTED=1) a kernel can reach the instructor's files: the watch puts back what it wrote
    and flags it, and a manual score it sets in its private gradebook is not copied."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    course, out = tmp_path / "course", tmp_path / "submissions"
    grading.release(course, [CHAPTER[:2]], points=1, timeout=TIMEOUT)
    release = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    solved = _answers(nbformat.read(course / "source" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4))
    package = grading_guard.package_dir()
    vandal = f"""
import glob, os, pathlib, sqlite3
with open({str(package / "exercises" / "ch00_template.py")!r}, "a") as f:
    f.write("\\n# a student was here\\n")
pathlib.Path({str(out.resolve() / "all_stubs" / f"{CHAPTER}.ipynb")!r}).write_text("{{}}")
for db in glob.glob(os.path.join(os.getcwd(), "..", "..", "..", "gradebook.db")):
    sqlite3.connect(db).execute("UPDATE grade SET manual_score = 1").connection.commit()
"""
    for student, answers in [("aa_vandal", {}), ("all_stubs", None), ("all_correct", {})]:
        nb = nbformat.from_dict(release)
        for name, cell in _answers(nb).items():
            if answers is not None:
                cell.source = solved[name].source
        if student == "aa_vandal":
            first = next(iter(_answers(nb).values()))
            first.source = vandal + first.source
        (out / student).mkdir(parents=True)
        nbformat.write(nb, out / student / f"{CHAPTER}.ipynb")
    before = _digest([package, out])
    saved = {p: Path(p).read_bytes() for p in before if str(package) in p}
    try:
        grading.grade(course, out, trusted=True)
        assert _digest([package, out]) == before, "the watch did not put everything back"
    finally:
        for path, data in saved.items():
            Path(path).write_bytes(data)
    rows = _rows(course)
    assert "wrote" in rows["aa_vandal"]["flagged"] and "ch00_template.py" in rows["aa_vandal"]["flagged"]
    assert "all_stubs" in rows["aa_vandal"]["flagged"], rows["aa_vandal"]
    assert float(rows["aa_vandal"]["score"]) == 0
    assert float(rows["all_stubs"]["score"]) == 0 and not rows["all_stubs"]["flagged"]
    assert float(rows["all_correct"]["score"]) == 4 and not rows["all_correct"]["flagged"]


def test_grading_refuses_without_bubblewrap_and_says_what_to_do(tmp_path, monkeypatch, capsys):
    """No bwrap on PATH: make grade names the package to install and the trusted mode, and grades nothing."""
    import grading_sandbox

    monkeypatch.setattr(grading_sandbox.shutil, "which", lambda name: None)
    with pytest.raises(grading_sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        grading_sandbox.check_available()
    (tmp_path / "course" / "source").mkdir(parents=True)
    (tmp_path / "submissions").mkdir()
    assert grading.main(["--course", str(tmp_path / "course"), "grade", str(tmp_path / "submissions")]) == 2
    said = capsys.readouterr().err
    assert "bubblewrap" in said and "TRUSTED=1" in said, said


def test_the_sandbox_mounts_its_private_tmp_before_what_lives_under_tmp(monkeypatch):
    """bwrap mounts in order: a checkout (and its .venv) or a grading folder under /tmp must be bound after the
    private /tmp, or the kernel cannot find its Python (a fresh clone in /tmp graded nothing but dead kernels)."""
    import tempfile

    import grading_sandbox

    _need_bubblewrap()
    venv = tempfile.mkdtemp(prefix="tl-venv-", dir="/tmp")  # a Python environment that lives under /tmp
    monkeypatch.setattr(sys, "prefix", venv)
    run = Path("/tmp/tl-grading-example/run")
    args = grading_sandbox.command(["python"], run, Path("/tmp/tl-grading-example/lib"), Path("/tmp/x/home"))
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == "/tmp"
    binds = [i for i, a in enumerate(args) if a in ("--bind", "--ro-bind") and args[i + 1].startswith("/tmp/")]
    assert venv in [args[i + 1] for i in binds] and all(i > tmpfs for i in binds), args
    Path(venv).rmdir()
