"""Grade a class with nbgrader: release the chapters' exercises, autograde submissions, feedback, CSV.

    python tools/grading.py release [--course course] [--chapters 00 05] [--points 1] [--timeout 15]
    python tools/grading.py grade SUBMISSIONS [--course course]

`release` writes an nbgrader course folder from the chapter notebooks (notebooks/NN_*.ipynb):
- source/NN_name/NN_name.ipynb, the instructor's assignment. Each exercise is two nbgrader cells: the
  answer cell (the chapter's stub, with the chapter's solution inside `### BEGIN/END SOLUTION`) and
  the chapter's own checker cell, a graded cell worth --points. Every other cell is read-only.
- release/NN_name/NN_name.ipynb, the student release written from it by `nbgrader generate_assignment`:
  solutions replaced by `raise tl.NotYetDone()`, the checker cells as in the chapter.
- gradebook.db, nbgrader's gradebook, and nbgrader_config.py (the per-cell time limit, --timeout).

A checker cell earns its points when it runs without error and the checker says "Correct!". Its
visible part is the chapter's cell, so a student sees the hint while working. Its hidden part (added
back by nbgrader when it grades) does not trust the notebook: it imports the checkers afresh from
their files, calls the same checker on the same arguments as the visible cell, and compares every
checker, `CORRECT` and library function the notebook could reach with that fresh copy, the torch, math,
numpy and builtin callables by identity with the objects recorded before the notebook's first cell ran. If the
notebook replaced one (a `check_*`, `CORRECT`, a function of transformer_lib, or a torch, math, numpy
or builtin callable, by anything: a function, a callable object, a partial, another library's function, a
forgery of its name and type),
or added a hook to IPython (an input or AST transformer, an event callback, its own cell runner), the
exercise gets no points and the cell says TAMPERED. A hook could rewrite the hidden part before it runs,
so `grade` also reads the student's cells for any line that reaches into IPython, and flags it.

`grade` collects SUBMISSIONS/<student>/NN_name.ipynb (or SUBMISSIONS/<student>/NN_name/NN_name.ipynb)
into submitted/, runs `nbgrader autograde` on each one in isolation (grading_guard.py: a private course per
submission, its kernel in a bubblewrap sandbox that sees only itself (grading_sandbox.py; --trusted runs it
without), and anything written to the course, the package, the submissions or tools/ put back and flagged;
read-only cells are restored from the gradebook, a missing checker cell is added back, each cell has --timeout
seconds, a dead kernel costs only the cells after it, a cell that ignores the interrupt has its kernel killed,
long outputs are cut to a head and a tail), flags tampering in the gradebook
(the checker cell is marked for manual grading and the answer cell gets a comment), then writes
- grades.csv: nbgrader's own export (one row per student and assignment);
- grades_by_exercise.csv: points per exercise, the flag, any error and a note (where a kernel died), one row
  per student and assignment;
- feedback/<student>/<assignment>/: nbgrader's HTML feedback and feedback.md, each checker's hint (never the
  hidden tests, nor an output that quotes them).
A submission that is not a notebook gets a clear error in both CSVs and its feedback; the others are graded.
"""

from __future__ import annotations

import argparse
import ast
import csv
import functools
import inspect
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat

import grading_guard
import grading_sandbox
import plain_notebooks
import student_edition

ROOT = Path(__file__).resolve().parent.parent
CODE_STUB = "raise tl.NotYetDone()  # your answer here"
TAMPERED = "TAMPERED"
TIMEOUT = 15  # seconds for an answer or checker cell (or one a student added) while grading
CHAPTER_TIMEOUT = 300  # seconds for the chapter's own read-only cells, some of which train (nbval's limit too)


# The hidden part of every graded checker cell. It runs in the student's kernel, so it imports
# nothing at module level and relies on no name of the notebook: it is copied into each cell.
# Called as _nbgrader_check(None, None) before any cell of the notebook runs (the grader does this in every
# kernel it starts: grading_guard.GuardedExecute), it records the clean library objects that step 3 compares
# by identity.
CLEAN = "_tl_grading_clean"  # the module in sys.modules that holds them


def _nbgrader_check(ns, calls):
    """Grade one checker cell: run the pristine checkers on the notebook's arguments; refuse tampering."""
    import importlib
    import os
    import sys
    import types
    import uuid

    def initial_env():
        """The environment the kernel started with (the grader's), which the notebook cannot change: os.environ can be
        edited by the notebook, /proc/self/environ cannot."""
        try:
            with open("/proc/self/environ", "rb") as f:
                pairs = [item.decode(errors="replace").split("=", 1) for item in f.read().split(b"\0") if b"=" in item]
            return dict(pairs)
        except OSError:  # not Linux: the live environment is all there is
            return dict(os.environ)

    started = initial_env()

    def code(obj):
        try:
            obj = getattr(obj, "__func__", obj)
            while hasattr(obj, "__wrapped__"):
                obj = obj.__wrapped__
            return getattr(obj, "__code__", None)
        except Exception:  # an object whose attributes cannot be read (a torch class proxy)
            return None

    def notebook_made(obj, depth=0):
        """Whether code written in the notebook stands behind obj: a function, a partial, a callable object."""
        try:
            if depth > 4 or obj is None:
                return False
            if getattr(type(obj), "__module__", "") == "__main__":  # an instance of a notebook's class
                return True
            filename = getattr(code(obj), "co_filename", "") if isinstance(obj, types.FunctionType) else ""
            if "ipykernel_" in filename or filename.startswith("<") and not filename.startswith("<frozen "):
                return True
            inner = [getattr(obj, name, None) for name in ("__wrapped__", "__func__", "func")]
            return any(x is not obj and notebook_made(x, depth + 1) for x in inner if callable(x))
        except Exception:
            return False

    def same(now, clean):
        """The very object recorded before the notebook ran: identity, never names or signatures, which a forgery
        can copy. A bound method is made anew at each lookup, so it is the same function on the same object."""
        if now is clean:
            return True
        if type(now) is types.MethodType and type(clean) is types.MethodType:
            return now.__func__ is clean.__func__ and now.__self__ is clean.__self__
        return False

    def spaces():
        modules = ["builtins", "math", "operator", "torch", "torch.nn.functional", "torch.linalg", "numpy"]
        # and what this check itself calls: a notebook that swaps importlib.import_module could hand it fake checkers
        modules += ["importlib", "importlib.util", "json", "os", "posixpath", "types", "uuid"]
        found = [(m, vars(sys.modules[m])) for m in modules if m in sys.modules]
        torch = sys.modules.get("torch")
        if torch is not None:
            found += [("torch.Tensor", vars(torch.Tensor)), ("torch.nn.Module", vars(torch.nn.Module))]
        return found

    grading = "TL_GRADING_PACKAGE" in started  # a kernel the grader started (the variable is set outside it)
    record = sys.modules.get("_tl_grading_clean")
    if ns is None or record is None and not grading:  # record the clean objects (in a grading run: before any cell)
        for name in ["json", "math", "operator", "importlib.util", "posixpath", "numpy", "torch.nn.functional"]:
            try:
                importlib.import_module(name)
            except ImportError:  # numpy and torch are the book's; a bare kernel may lack them
                pass
        record = types.ModuleType("_tl_grading_clean")
        record.objects = {f"{m}.{a}": o for m, space in spaces() for a, o in list(space.items()) if callable(o)}
        sys.modules[record.__name__] = record
        if ns is None:
            return len(record.objects)
    clean = getattr(record, "objects", None) if isinstance(record, types.ModuleType) else None
    if type(clean) is not dict:
        raise AssertionError(
            f"{TAMPERED}: this notebook removed or replaced the grader's record of the clean library functions. The "
            "exercise gets no points and the submission is flagged for the instructor."
        )

    def fresh(prefix, alias_library):
        """A new copy of transformer_lib.exercises from its files (the library itself live, or fresh too)."""
        # found as the import system finds it (an editable install has its own finder), not from sys.modules
        spec = next(
            filter(None, (getattr(f, "find_spec", lambda *a: None)("transformer_lib", None) for f in sys.meta_path))
        )
        private = started.get("TL_GRADING_PACKAGE", "")  # the folder that holds the grader's copy
        # the package's file and every folder its modules come from: all inside the grader's copy
        places = [os.path.realpath(p) for p in [spec.origin or "", *(spec.submodule_search_locations or [])]]
        outside = [p for p in places if not p.startswith(os.path.realpath(private) + os.sep)]
        if private and outside:
            location = outside[0]
            raise AssertionError(
                f"{TAMPERED}: this notebook made Python find transformer_lib at {location}, not the grader's copy. The "
                "exercise gets no points and the submission is flagged for the instructor."
            )
        package = types.ModuleType(prefix)
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules[prefix] = package
        if alias_library:  # the checkers see the live library: the classes and functions the notebook uses
            for name, module in list(sys.modules.items()):
                if name.startswith("transformer_lib.") and not name.startswith("transformer_lib.exercises"):
                    sys.modules[prefix + name[len("transformer_lib") :]] = module
        return importlib.import_module(prefix + ".exercises")

    tag = uuid.uuid4().hex
    ref_prefix, run_prefix = "_nbgrader_ref_" + tag, "_nbgrader_run_" + tag
    try:
        reference = fresh(ref_prefix, alias_library=False)
        correct = reference.CORRECT
        names = {name for name, _, _ in calls}
        found = []
        # 1. every function, method and constant of transformer_lib that the checkers load, as in their files
        own = {getattr(reference, name).__module__ for name in names}  # the chapters of this cell's checkers
        for name in [n for n in sys.modules if n.startswith(ref_prefix + ".")]:
            if ".exercises.ch" in name and name not in own:
                continue  # another chapter's checkers and helpers: not this exercise's
            # the live module; one the notebook has not loaded yet (exercises and viz load on first use) is
            # imported now, from the same files as the reference
            live = importlib.import_module("transformer_lib" + name[len(ref_prefix) :])
            for attr, obj in vars(sys.modules[name]).items():
                here = getattr(live, attr, None)
                where = "transformer_lib" + name[len(ref_prefix) :] + "." + attr
                if attr.startswith("__") or attr.startswith("check_") and attr not in names:
                    continue  # another exercise's checker: that exercise's cell looks at it
                if isinstance(obj, types.FunctionType):
                    if code(here) != code(obj) or not isinstance(here, types.FunctionType):
                        found.append(where)
                elif isinstance(obj, type) and obj.__module__ == name:
                    for key, value in vars(obj).items():
                        if isinstance(value, types.FunctionType) and code(vars(here).get(key)) != code(value):
                            found.append(where + "." + key)
                elif isinstance(obj, str | int | float) and not isinstance(obj, bool) and here != obj:
                    found.append(where)
        # 2. the notebook's own names: tl, the checkers and CORRECT as the cell would see them
        tl = ns.get("tl")
        for name in names:
            if code(getattr(getattr(tl, "exercises", None), name, None)) != code(getattr(reference, name)):
                found.append("tl.exercises." + name)
            if name in ns and code(ns[name]) != code(getattr(reference, name)):
                found.append(name + " in the notebook")
        for value, where in ((ns.get("CORRECT", correct), "CORRECT in the notebook"), (tl, "tl")):
            if where == "tl":
                value = getattr(getattr(tl, "exercises", None), "CORRECT", None)
                where = "tl.exercises.CORRECT"
            if type(value) is not str or value != correct:
                found.append(where)
        # 3. library functions replaced, whatever the replacement is: notebook code (a function, a partial, an object
        # with __call__), or any other object, another library's callable with a copied name and signature too
        # finders and path hooks of the notebook's own: they could serve a fake package under the grader's names
        for label, hooks in (("sys.meta_path", sys.meta_path), ("sys.path_hooks", sys.path_hooks)):
            found += [f"{label} (with notebook code)" for hook in list(hooks) if notebook_made(hook)]
        # IPython's cell transformers, event callbacks and cell runners: one of the notebook's (or a library
        # function it put there) could rewrite or skip a graded cell. A clean kernel has IPython's own, and
        # those of the libraries a chapter loads.
        shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
        if shell is not None:
            own = ("IPython.", "ipykernel", "matplotlib", "ipywidgets", "comm")  # matplotlib: pyplot registers one
            manager = getattr(shell, "input_transformer_manager", None)
            hooks = [("input_transformers_post", getattr(shell, "input_transformers_post", []))]  # (label, its entries)
            hooks += [
                (a, getattr(manager, a, [])) for a in ("cleanup_transforms", "line_transforms", "token_transformers")
            ]
            hooks += [("ast_transformers", getattr(shell, "ast_transformers", []))]
            hooks += [(f"{e} event", c) for e, c in getattr(getattr(shell, "events", None), "callbacks", {}).items()]
            for label, entries in hooks:
                for hook in list(entries):
                    where = getattr(hook, "__module__", None) or type(hook).__module__ or ""
                    if notebook_made(hook) or not where.startswith(own):
                        found.append(f"IPython's {label} (with {getattr(hook, '__name__', type(hook).__name__)})")
            for name in ("run_cell", "run_cell_async", "transform_cell", "run_ast_nodes", "run_code", "_run_cell"):
                method = getattr(type(shell), name, None)
                if name in vars(shell) or method is not None and not getattr(method, "__module__", "").startswith(own):
                    found.append(f"IPython's shell.{name}")
        for label, space in spaces():
            for attr, obj in list(space.items()):
                where = f"{label}.{attr}"
                if notebook_made(obj):
                    found.append(f"{where} (with notebook code)")
                elif where in clean and not same(obj, clean[where]):
                    named = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
                    found.append(f"{where} (with another object: {named})")
        if found:
            raise AssertionError(
                f"{TAMPERED}: this notebook replaced {', '.join(sorted(set(found)))}. The exercise gets no points "
                "and the submission is flagged for the instructor."
            )
        # 4. the same checker calls as the visible cell, with checkers fresh from their files
        checkers = fresh(run_prefix, alias_library=True)
        for name, args, kwargs in calls:
            result = getattr(checkers, name)(
                *[eval(a, ns) for a in args], **{k: eval(v, ns) for k, v in kwargs.items()}
            )
            if type(result) is not str or result != correct:
                raise AssertionError(result)
    finally:
        for name in [n for n in sys.modules if n.startswith((ref_prefix, run_prefix))]:
            del sys.modules[name]


_GUARD = inspect.getsource(_nbgrader_check).replace("{TAMPERED}", TAMPERED)


def _hidden_test(calls: list[tuple[str, list[str], dict[str, str]]]) -> str:
    return (
        "### BEGIN HIDDEN TESTS\n"
        "# The grader's own check (tools/grading.py): the same checker, imported afresh, on the same arguments.\n"
        f"{_GUARD}\n\n"
        f"_nbgrader_check(globals(), {calls!r})\n"
        "del _nbgrader_check\n"
        "### END HIDDEN TESTS"
    )


def _checker_calls(source: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """The checker calls of a checker cell: (name, argument sources, keyword argument sources)."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name.startswith("check_"):
                kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
                calls.append((name, [ast.unparse(a) for a in node.args], kwargs))
    return calls


def _solution_code(source: str, name: str) -> tuple[str, str | None]:
    """The definitions of a chapter's solution cell (its prints and asserts left out), and its function."""
    tree = ast.parse(source)
    lines = source.splitlines()
    kept = []
    for line in lines:  # the leading comment: what the solution shows
        if not line.startswith("#") or line.startswith(("#@title", "# NBVAL", "# why:")):
            break
        kept.append(line)
    function = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            blank = kept and not kept[-1].startswith("#") and not isinstance(node, ast.Import | ast.ImportFrom)
            kept += ([""] if blank else []) + lines[start - 1 : node.end_lineno]
            if isinstance(node, ast.FunctionDef) and (function is None or node.name == f"solution_{name}"):
                function = node.name
    return "\n".join(kept).strip("\n"), function


def _answer_cell(exercise: str, solution: str, short: str) -> str:
    """The exercise stub with the solution inside nbgrader's solution markers, in place of `return None`."""
    tree = ast.parse(exercise)
    define = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    code, function = _solution_code(solution, short)
    last = define.body[-1] if define else None
    is_stub = isinstance(last, ast.Return) and isinstance(last.value, ast.Constant) and last.value.value is None
    if define is None or function is None or not is_stub:  # not the usual stub: the whole cell is the answer
        return f"### BEGIN SOLUTION\n{code}\n### END SOLUTION"
    a = define.args
    call = [p.arg for p in a.posonlyargs + a.args] + ([f"*{a.vararg.arg}"] if a.vararg else [])
    call += [f"{p.arg}={p.arg}" for p in a.kwonlyargs] + ([f"**{a.kwarg.arg}"] if a.kwarg else [])
    lines = exercise.splitlines()
    indent = " " * last.col_offset
    body = f"### BEGIN SOLUTION\n{code}\n\nreturn {function}({', '.join(call)})\n### END SOLUTION"
    return "\n".join(lines[: last.lineno - 1] + [textwrap.indent(body, indent)] + lines[last.end_lineno :])


def _nbgrader(cell, grade_id: str, *, solution=False, grade=False, locked=False, points=None) -> None:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if grade:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta


def assignment_notebook(nb: nbformat.NotebookNode, points: float = 1) -> nbformat.NotebookNode:
    """The instructor's nbgrader assignment of one chapter: answer cells with solutions, graded checker cells."""
    nb = nbformat.from_dict(nb)
    cells, number, short = [], 0, ""
    pending_answer = None
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if "solution" in tags and pending_answer is not None:
            pending_answer.source = _answer_cell(pending_answer.source, cell.source, short)
            pending_answer = None
            continue
        if "solution" in tags:
            continue
        if cell.cell_type == "markdown":
            cell.source = student_edition.SOLUTION_DROPDOWN.sub("", cell.source)
        if "exercise" in tags:
            number += 1
            name = re.search(r"def (\w+)\(", cell.source)
            short = re.sub(r"^my_", "", name.group(1)) if name else f"answer{number}"
            _nbgrader(cell, f"ex{number}_{short}", solution=True)
            pending_answer = cell
        elif "checker" in tags and number:
            calls = _checker_calls(cell.source)
            if calls:
                cell.source = cell.source.rstrip("\n") + "\n\n" + _hidden_test(calls)
            _nbgrader(cell, f"ex{number}_{short}_check", grade=True, locked=True, points=points)
        else:
            _nbgrader(cell, f"cell_{len(cells):02d}", locked=True)
        cells.append(cell)
    nb.cells = cells
    return nb


def _cell_timeout(cell, answers: int = TIMEOUT, chapter: int = CHAPTER_TIMEOUT) -> int:
    """The time limit of a cell: the chapter's read-only cells get longer than the students' cells."""
    meta = cell.metadata.get("nbgrader", {})
    return chapter if meta.get("locked") and not meta.get("grade") else answers


def _config(course: Path, timeout: int) -> None:
    (course / "nbgrader_config.py").write_text(
        textwrap.dedent(f"""\
        # Written by tools/grading.py release; see book/instructors.md, "Grading a class with nbgrader".
        import os

        c = get_config()  # noqa: F821
        c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))  # this folder, wherever it is moved
        c.ClearSolutions.code_stub = {{"python": {CODE_STUB!r}}}
        c.Execute.interrupt_on_timeout = True  # a cell past its time limit fails; the rest is graded
        c.Execute.timeout = {timeout}


        def cell_timeout(cell):  # {timeout} s: answers, checkers and added cells; {CHAPTER_TIMEOUT} s: the chapter
            meta = cell.metadata.get("nbgrader", {{}})
            return {CHAPTER_TIMEOUT} if meta.get("locked") and not meta.get("grade") else {timeout}


        c.Execute.timeout_func = cell_timeout
        c.OverwriteCells.add_missing_cells = True  # a deleted checker cell is added back and graded
        """)
    )


def _venv_on_path() -> None:
    """nbgrader runs `alembic` (its gradebook's migrations) from PATH: this Python's own scripts folder first."""
    scripts = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != scripts:
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def _api(course: Path, timeout: int | None = None, kernel_manager=None):
    """nbgrader's Python API on the course folder, configured by its nbgrader_config.py; its kernels started by
    `kernel_manager` (a jupyter_client class: the sandbox's) where one is given."""
    _venv_on_path()
    import nbgrader.api
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    if not hasattr(nbgrader.api.get_alembic_version, "cache_info"):  # one `alembic heads`, not one a gradebook
        nbgrader.api.get_alembic_version = functools.cache(nbgrader.api.get_alembic_version)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    if timeout:
        config.Execute.timeout = timeout
        config.Execute.timeout_func = functools.partial(_cell_timeout, answers=timeout)
    autograde, feedback = grading_guard.preprocessors()
    config.Autograde.autograde_preprocessors = autograde  # clean objects recorded, dead kernels, long outputs
    config.GenerateFeedback.preprocessors = feedback  # no hidden test in what a student reads
    config.GuardedExecute.manager = kernel_manager
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(course.resolve())
    return NbGraderAPI(coursedir=coursedir, config=config)


def _failure(result: dict) -> str:
    """The cause of an nbgrader API call's failure: the last `SomeError: ...` line of its error or log."""
    text = "\n".join(filter(None, [result.get("log"), result.get("error")])) or "unknown error"
    causes = re.findall(r"^\s*(\w*(?:Error|Exception|Exit)\b.*)$", text, flags=re.M)
    lines = text.strip().splitlines()
    return (causes or lines or ["unknown error"])[-1].strip()[:300]


def _chapters(selected: list[str] | None) -> list[Path]:
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if not selected or any(p.stem.startswith(s) for s in selected)]


def release(course: Path, chapters: list[str] | None = None, points: float = 1, timeout: int = TIMEOUT) -> list[str]:
    """Write the instructor's assignments and the student release of the chosen chapters; their names."""
    course.mkdir(parents=True, exist_ok=True)
    _config(course, timeout)
    bib = plain_notebooks.bibliography()
    names = []
    for path in _chapters(chapters):
        nb = assignment_notebook(nbformat.read(path, as_version=4), points)
        nb = plain_notebooks.plain_notebook(nb, bib)  # students open it in Jupyter: no MyST syntax
        (course / "source" / path.stem).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, course / "source" / path.stem / path.name)
        done = _api(course).generate_assignment(path.stem, force=True)
        if not done["success"]:
            raise RuntimeError(
                f"nbgrader generate_assignment {path.stem} failed:\n{done.get('log', '')}{done['error']}"
            )
        print(f"wrote {course / 'release' / path.stem / path.name}")
        names.append(path.stem)
    return names


def _collect(submissions: Path, course: Path, assignments: list[str]) -> dict[tuple[str, str], str]:
    """Copy each student's notebooks into submitted/; the problems found, by (student, assignment)."""
    problems = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()):
        student = student_dir.name
        for assignment in assignments:
            found = sorted(student_dir.rglob(f"{assignment}.ipynb"))
            target = course / "submitted" / student / assignment
            shutil.rmtree(target, ignore_errors=True)
            if not found:
                problems[student, assignment] = "no submission"
                continue
            try:
                nbformat.validate(nbformat.reads(found[0].read_text(encoding="utf-8"), as_version=4))
            except Exception as error:  # not JSON, not a notebook: this student only
                detail = str(error).splitlines()[0][:200]
                problems[student, assignment] = f"not a readable notebook ({type(error).__name__}: {detail})"
                continue
            target.mkdir(parents=True)
            shutil.copy(found[0], target / found[0].name)
    return problems


def _outcome(cell) -> tuple[str, bool]:
    """A graded cell's hint (its error, or what it printed) and whether it says TAMPERED."""
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream").strip()
    if not errors:
        return printed or "(no output)", False
    error = errors[-1]
    if error.ename == "CellTimeoutError":
        return "The cell ran past the time limit and was stopped (an endless loop?).", False
    if error.ename in (grading_guard.DEAD, grading_guard.STOPPED, grading_guard.NOT_RUN):
        return f"Not graded: {error.evalue}.", False
    hint = f"{error.evalue}" if error.ename == "AssertionError" else f"{error.ename}: {error.evalue}"
    return hint, TAMPERED in error.evalue


def _constant_text(node) -> str | None:
    """The string a name expression always has ('check_' + 'mask', f'check_{"mask"}'), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant_text(node.left), _constant_text(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_constant_text(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return "".join(parts) if None not in parts else None
    return None


def _assigned_names(tree) -> list[tuple[str, int]]:
    """Every name a piece of code binds or replaces, with its line: assignments, definitions, setattr, imports."""
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr | ast.For):
            targets = [node.target]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append((node.name, node.lineno))
        elif isinstance(node, ast.Import | ast.ImportFrom):  # only a rename binds something else to the name
            found += [(a.asname, node.lineno) for a in node.names if a.asname and a.asname != a.name]
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("setattr", "__setattr__"):
                text = _constant_text(node.args[1])
                if text is not None:
                    found.append((text, node.lineno))
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Name):
                    found.append((part.id, node.lineno))
                elif isinstance(part, ast.Attribute):
                    found.append((part.attr, node.lineno))
                elif isinstance(part, ast.Subscript) and _constant_text(part.slice) is not None:
                    found.append((_constant_text(part.slice), node.lineno))  # vars(E)["check_x"] = ...
    return found


# What a notebook would touch to rewrite or skip a graded cell from inside IPython (an input or AST transformer, an
# event callback, the shell's cell runner), and the magics that load code IPython runs as an extension or script or
# configure the shell itself (`%config InlineBackend...`, which only sets how figures look, is not among them).
_IPYTHON_REACH = {
    "get_ipython",
    "input_transformers_post",
    "input_transformers_cleanup",
    "input_transformer_manager",
    "ast_transformers",
    "transform_cell",
    "run_cell",
    "run_ast_nodes",
    "register_magic_function",
    CLEAN,  # the grader's record of the clean library objects
}
_IPYTHON_MAGICS = ("%load_ext", "%reload_ext", "%run", "%config InteractiveShell", "%config IPKernelApp")


def _ipython_reach(tree) -> list[int]:
    """The lines of a cell that reach into IPython itself: its names (written or built from constants), or an
    import of IPython or ipykernel."""
    lines = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
        elif _constant_text(node) is not None:
            names = [_constant_text(node)]
        if any(n in _IPYTHON_REACH or n.split(".")[0] in ("IPython", "ipykernel") for n in names):
            lines.append(node.lineno)
    return lines


def _static_findings(nb, checker_names: set[str]) -> list[tuple[str, str]]:
    """What the student's own cells replace of the checkers or CORRECT, read from the file: (target, line). The
    target "IPython" is a line that reaches into IPython itself, which could rewrite any graded cell.

    Read from the syntax tree: `setattr(E, 'check_' + 'mask', lambda *a: E.CORRECT)` replaces check_mask
    only (reading CORRECT replaces nothing). A name that is computed at run time is left to the hidden check.
    """
    found = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("locked") or meta.get("grade"):
            continue  # read-only and graded cells were restored from the gradebook
        source = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.split("\n"))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # it cannot run either
        lines = cell.source.split("\n")
        found += [("IPython", lines[n - 1].strip()) for n in _ipython_reach(tree)]
        found += [("IPython", line.strip()) for line in lines if line.lstrip().startswith(_IPYTHON_MAGICS)]
        for name, lineno in _assigned_names(tree):
            target = "CORRECT" if name in ("CORRECT", "_common") else name
            if target in checker_names or target == "CORRECT":
                found.append((target, lines[lineno - 1].strip()))
    return list(dict.fromkeys(found))  # E._common.CORRECT = ... names CORRECT twice


def grade(
    course: Path, submissions: Path, timeout: int | None = None, trusted: bool = False, memory_mb: int | None = None
) -> list[dict]:
    """Autograde every submission into the gradebook, each kernel in its sandbox (none if `trusted`); write the CSVs
    and the feedback; the rows."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.plugins import CsvExportPlugin

    if not trusted:
        grading_sandbox.check_available()  # before anything is written: a clear error, not a half-graded class
    _venv_on_path()
    course = course.resolve()
    assignments = sorted(p.name for p in (course / "source").iterdir() if p.is_dir())
    problems = _collect(submissions, course, assignments)
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir())
    api = _api(course, timeout)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            if not any(s.id == student for s in gb.students):
                gb.add_student(student)
    # each submission in its own private course, with its own copy of the package, under watch (grading_guard)
    guard = grading_guard.Guard(course, submissions, trusted=trusted, memory_mb=memory_mb)
    wrote, notes = {}, {}
    try:
        for assignment in assignments:
            for student in students:
                if (student, assignment) in problems:
                    continue
                result = guard.autograde(lambda folder, km: _api(folder, timeout, km), assignment, student)
                done, wrote[student, assignment] = result["done"], result["wrote"]
                if wrote[student, assignment]:
                    print(
                        f"{student} {assignment}: FLAGGED, wrote to {', '.join(wrote[student, assignment])} "
                        "(put back as it was)",
                        file=sys.stderr,
                    )
                if not done["success"]:
                    problems[student, assignment] = f"nbgrader could not grade it ({_failure(done)})"
                    print(f"{student} {assignment}: {problems[student, assignment]}", file=sys.stderr)
                    continue
                path = course / "autograded" / student / assignment / f"{assignment}.ipynb"
                graded = nbformat.read(path, as_version=4)
                died = grading_guard.dead_kernel(graded)
                if died:
                    notes[student, assignment] = _died_note(graded, *died)
                    cause = (
                        "the grader killed it: the cell ignored the interrupt after its time limit"
                        if died[2]
                        else "DeadKernelError: the kernel process ended; an os._exit, a crash or memory"
                    )
                    print(f"{student} {assignment}: {notes[student, assignment]} ({cause})", file=sys.stderr)
    finally:
        guard.close()
    rows = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for assignment in assignments:
            source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
            graded = [c.metadata.nbgrader for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
            checker_names = {n for c in source.cells for n in re.findall(r"tl\.exercises\.(check_\w+)", c.source)}
            for student in students:
                row = {"student_id": student, "assignment": assignment, "score": 0.0}
                row["max_score"] = sum(float(g["points"]) for g in graded)
                row["flagged"], row["error"], hints = "", problems.get((student, assignment), ""), {}
                row["note"] = notes.get((student, assignment), "")
                path = course / "autograded" / student / assignment / f"{assignment}.ipynb"
                if not row["error"] and path.exists():
                    nb = nbformat.read(path, as_version=4)
                    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
                    statics = _static_findings(nb, checker_names)
                    flags = []
                    for meta in graded:
                        grade_id, answer_id = meta["grade_id"], meta["grade_id"].removesuffix("_check")
                        hint, tampered = _outcome(cells[grade_id]) if grade_id in cells else ("(cell missing)", False)
                        failed = [o for o in cells.get(answer_id, {}).get("outputs", []) if o.output_type == "error"]
                        if failed and not tampered:  # e.g. a syntax error: say so before the checker's NameError
                            hint = f"Your answer cell raised {failed[-1].ename}: {failed[-1].evalue}. Then: {hint}"
                        lines = [
                            line for target, line in statics if target in (_checker_of(source, grade_id), "CORRECT")
                        ]
                        reach = [line for target, line in statics if target == "IPython"]
                        if lines and not tampered:  # seen in the file though not at run time (e.g. after its check)
                            tampered, hint = True, f"{TAMPERED}: the notebook replaces its checker: {'; '.join(lines)}"
                        elif reach and not tampered:  # a cell rewritten by IPython never runs its check at all
                            why = "reaches into IPython or the grader's record, which can rewrite or skip graded cells"
                            tampered, hint = True, f"{TAMPERED}: the notebook {why}: {'; '.join(reach)}"
                        try:
                            g = gb.find_grade(grade_id, assignment, assignment, student)
                        except MissingEntry:
                            g = None
                        if tampered:
                            flags.append(answer_id)
                            if g is not None:
                                g.manual_score, g.needs_manual_grade = 0.0, True
                                _comment(gb, answer_id, assignment, student, hint)
                        points = float(g.score) if g is not None else 0.0
                        row[answer_id] = points
                        row["score"] += points
                        hints[answer_id] = (points, float(meta["points"]), hint, tampered)
                    written = wrote.get((student, assignment))
                    if written:  # it wrote to the grader's files: nothing it did is trusted, every exercise is 0
                        hint = f"{TAMPERED}: the notebook wrote to {', '.join(written)} (put back as it was)"
                        for meta in graded:
                            answer_id = meta["grade_id"].removesuffix("_check")
                            g = gb.find_grade(meta["grade_id"], assignment, assignment, student)
                            g.manual_score, g.needs_manual_grade = 0.0, True
                            _comment(gb, answer_id, assignment, student, hint)
                            row["score"] -= row[answer_id]
                            row[answer_id] = 0.0
                            hints[answer_id] = (0.0, float(meta["points"]), hint, True)
                        flags = sorted(set(flags) | {"wrote " + ", ".join(written)})
                    gb.db.commit()
                    row["flagged"] = "TAMPERED: " + " ".join(flags) if flags else ""
                else:
                    row["error"] = row["error"] or "not graded"
                    row.update({meta["grade_id"].removesuffix("_check"): 0.0 for meta in graded})
                row["_hints"] = hints
                rows.append(row)
    _write_csv(course / "grades_by_exercise.csv", rows)
    for row in rows:  # nbgrader's HTML feedback first: it empties the folder; our markdown goes in after it
        if not row["error"]:
            api.generate_feedback(row["assignment"], row["student_id"], force=True)
        source = nbformat.read(course / "source" / row["assignment"] / f"{row['assignment']}.ipynb", as_version=4)
        _feedback(course, row["student_id"], row["assignment"], row, row["_hints"], grading_guard.hidden_lines(source))
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        CsvExportPlugin(to=str(course / "grades.csv")).export(gb)  # nbgrader's own export
    return rows


def _died_note(graded, index: int, first_line: str, stopped: bool = False) -> str:
    """Where the kernel died or was stopped, as a student reads it: the exercise and the cell's first line (graded:
    the notebook as it ran, in the student's order of cells)."""
    ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in graded.cells]
    number = re.match(r"ex(\d+)_", ids[index]) if index < len(ids) else None
    if number is None:  # a cell of the chapter's or the student's own: name the next exercise
        later = [re.match(r"ex(\d+)_", i) for i in ids[index:]]
        number = next((m for m in later if m), None)
        where = f"before exercise {number.group(1)}" if number else "after the last exercise"
    else:
        where = f"at exercise {number.group(1)}"
    if stopped:
        return (
            f"the grader stopped the kernel {where}: the cell that starts `{first_line}` ran past its time limit and "
            "ignored the interrupt; the cells after it were not run"
        )
    return f"the kernel died {where}, in the cell that starts `{first_line}`; the cells after it were not run"


def _checker_of(source, grade_id: str) -> str:
    for cell in source.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            found = re.search(r"(check_\w+)", cell.source)
            return found.group(1) if found else grade_id
    return grade_id


def _comment(gb, answer_id: str, assignment: str, student: str, text: str) -> None:
    from nbgrader.api import MissingEntry

    try:
        gb.find_comment(answer_id, assignment, assignment, student).manual_comment = text
    except MissingEntry:
        pass


def _feedback(course: Path, student: str, assignment: str, row: dict, hints: dict, secret: set[str]) -> None:
    """feedback.md: the score, the flag or error, each exercise's points and hint (a hint that quotes a line of the
    hidden checks, `secret`, is withheld)."""
    lines = [f"# Feedback on {assignment} for {student}", ""]
    lines.append(f"**Score: {row['score']:g} / {row['max_score']:g}**")
    if row["error"].startswith(("not a readable notebook", "no submission")):
        lines += ["", f"**Not graded: {row['error']}.** Please check the file you handed in and ask your instructor."]
    elif row["error"]:
        lines += ["", f"**Not graded: {row['error']}.** Your instructor has the details."]
    if row.get("note"):
        lines += ["", f"**Note:** {row['note']}. The exercises before it were graded."]
    if row["flagged"]:
        flagged = (
            "this notebook replaced a checker, `CORRECT` or a library function, or wrote to the grader's files; "
            "those exercises get no points"
        )
        lines += ["", f"**Flagged for your instructor:** {flagged} ({row['flagged']})."]
    if hints:
        lines += ["", "| exercise | points | checker says |", "|---|---|---|"]
        for answer_id, (points, out_of, hint, tampered) in hints.items():
            if any(line in hint for line in secret):  # the answer printed the cell it ran in (its input history)
                hint = "[withheld by the grader: it quoted the grader's hidden check]"
            hint = " ".join(hint.split()).replace("|", "\\|")
            lines.append(f"| {answer_id}{' (flagged)' if tampered else ''} | {points:g} / {out_of:g} | {hint} |")
    folder = course / "feedback" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "feedback.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields = ["student_id", "assignment", "score", "max_score", "flagged", "error", "note"]
    fields += sorted({k for r in rows for k in r if k not in fields and not k.startswith("_")})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in sorted(rows, key=lambda r: (r["assignment"], r["student_id"])):
            writer.writerow({k: (f"{v:g}" if isinstance(v, float) else v) for k, v in row.items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, default=ROOT / "course", help="the nbgrader course folder")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="write the assignments and the student release")
    rel.add_argument("--chapters", nargs="*", help="chapter numbers or names (default: every chapter)")
    rel.add_argument("--points", type=float, default=1, help="points per exercise (default 1)")
    rel.add_argument(
        "--timeout",
        type=int,
        default=TIMEOUT,
        help=f"seconds for an answer or checker cell when grading ({TIMEOUT}; the chapter's own: {CHAPTER_TIMEOUT})",
    )
    gr = sub.add_parser("grade", help="autograde SUBMISSIONS/<student>/NN_name.ipynb; write CSVs and feedback")
    gr.add_argument("submissions", type=Path)
    gr.add_argument("--timeout", type=int, help="seconds per cell (default: the one given to release)")
    gr.add_argument(
        "--trusted",
        action="store_true",
        help="run the kernels without the bubblewrap sandbox (a class you trust; book/instructors.md says what it "
        "gives up)",
    )
    gr.add_argument("--memory", type=int, help=f"MB of address space per kernel (default {grading_sandbox.MEMORY_MB})")
    args = parser.parse_args(argv)
    if args.command == "release":
        release(args.course, args.chapters, args.points, args.timeout)
        print(f"student release: {args.course / 'release'}")
        return 0
    try:
        rows = grade(args.course, args.submissions, args.timeout, trusted=args.trusted, memory_mb=args.memory)
    except grading_sandbox.SandboxUnavailable as error:
        print(f"make grade: {error}", file=sys.stderr)
        return 2
    for row in sorted(rows, key=lambda r: (r["assignment"], r["student_id"])):
        note = " ".join(x for x in (row["flagged"], row["error"], row["note"]) if x)
        print(f"{row['assignment']}  {row['student_id']:<20} {row['score']:g} / {row['max_score']:g}  {note}")
    print(
        f"wrote {args.course / 'grades.csv'}, {args.course / 'grades_by_exercise.csv'} and {args.course / 'feedback'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
