"""Grade each submission in isolation: nothing one student's code does can change another student's grade.

A student's notebook runs in a kernel as the instructor, with the rights the instructor has. So tools/grading.py
does not run it in the course folder. For every submission, `Guard.autograde`:

1. builds a private course: a temporary folder with nbgrader's config, the assignment's source, a gradebook
   that holds the assignment and no student, and this one submission. The kernel runs there: the real
   gradebook and the other students' notebooks are not in its folder;
2. gives the kernel a private copy of transformer_lib, first on its PYTHONPATH, copied from a snapshot taken
   when grading began. A write to a checker file changes that copy only, and the copy is thrown away;
3. watches everything that matters, before and after the kernel runs: the course folder (gradebook, source,
   release, submitted, autograded, feedback), the package's files, the submissions folder and tools/, by
   size, times of change and inode; the private copy likewise; and the Python environment's site-packages.
   A file changed, added or removed in the course, the package, the submissions or tools/ is put back as it
   was, and the submission is flagged with the list. A change to the private copy is flagged too. A change
   to site-packages cannot be put back from here: grading stops and says which files changed;
4. copies the graded notebook and the grades back into the real course, from the grader's own process,
   after the kernel has gone.

The kernel's notebook runs through `GuardedExecute`, which grades every cell that ran before a kernel died and
marks the rest as not run, and `CapOutput`, which keeps a bounded head and tail of any long output.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import sysconfig
import tempfile
from functools import cache
from importlib.util import find_spec
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
DEAD = "DeadKernelError"
NOT_RUN = "NotRunError"
HEAD, TAIL = 6_000, 3_000  # characters kept of a long output: its start and its end
IGNORED = {"__pycache__"}  # Python's own caches, written by imports: not a student's doing


def package_dir() -> Path:
    """The transformer_lib folder that this Python imports (the checkout for an editable install)."""
    spec = find_spec("transformer_lib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("transformer_lib is not installed in this environment (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _walk(root: Path):
    """The regular files under root (root itself if it is one), Python's caches left out: (path, lstat)."""
    if root.is_file():
        yield str(root), root.lstat()
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED]
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                yield path, st


def fingerprint(roots: list[Path]) -> dict[str, tuple[int, int, int, int]]:
    """Every file under the roots, by path: (size, mtime, ctime, inode). Any write changes ctime."""
    return {
        path: (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        for root in roots
        if root.exists()
        for path, st in _walk(root)
    }


def _folders(roots: list[Path]) -> set[str]:
    walks = [os.walk(root) for root in roots if root.is_dir()]
    return {os.path.join(folder, d) for walk in walks for folder, dirs, _ in walk for d in dirs}


def changed(before: dict, after: dict) -> list[str]:
    """The paths written, added or removed between two fingerprints."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@contextlib.contextmanager
def environ(**values: str):
    """Set environment variables (the kernel inherits them) for the duration of the block."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cap(text: str, head: int = HEAD, tail: int = TAIL) -> str:
    if len(text) <= head + tail + 200:
        return text
    cut = len(text) - head - tail
    lines = text.count("\n", head, len(text) - tail)
    note = f"\n... [{cut:,} characters ({lines:,} lines) cut by the grader: the output was too long] ...\n"
    return text[:head] + note + text[-tail:]


@cache
def preprocessors():
    """nbgrader's autograding preprocessors, with GuardedExecute and CapOutput in place of Execute and
    LimitOutput (defined on first use: nbgrader is the grading extra's, not the book's)."""
    from nbclient.exceptions import DeadKernelError
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute, LimitOutput, NbGraderPreprocessor

    class GuardedExecute(Execute):
        """nbgrader's Execute, but a kernel that dies costs only the cells after it."""

        def preprocess(self, nb, resources=None, km=None):
            self._died_at = None
            return super().preprocess(nb, resources, km)

        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type != "code":
                return cell, resources
            if self._died_at is not None:  # no kernel left: a graded cell with no error would get its points
                cell.outputs = [_error(NOT_RUN, f"not run: the kernel died earlier, in cell {self._died_at}")]
                return cell, resources
            try:
                return super().preprocess_cell(cell, resources, index)
            except DeadKernelError as error:
                self._died_at = index
                self.log.error("the kernel died in cell %d: %s", index, error)
                cell.outputs.append(_error(DEAD, f"the kernel died while this cell ran ({error})"))
                return cell, resources

    class CapOutput(NbGraderPreprocessor):
        """Keep a bounded head and tail of every long output, and say how much was cut."""

        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type != "code":
                return cell, resources
            merged = []
            for output in cell.outputs:  # a print loop leaves many stream outputs: one per stream is enough
                if merged and output.output_type == "stream" and merged[-1].output_type == "stream":
                    if merged[-1].name == output.name:
                        merged[-1].text += output.text
                        continue
                merged.append(output)
            for output in merged:
                if "text" in output:
                    output.text = _cap(output.text)
                if "evalue" in output:
                    output.evalue = _cap(output.evalue)
                if "traceback" in output:
                    lines = [_cap(line, 2_000, 1_000) for line in output.traceback]
                    output.traceback = lines if len(lines) <= 60 else lines[:30] + ["... (cut) ..."] + lines[-29:]
                for mime, value in list(output.get("data", {}).items()):
                    if isinstance(value, str) and len(value) > HEAD + TAIL:
                        if mime.startswith("text/"):
                            output.data[mime] = _cap(value)
                        else:  # an image or other binary: cutting it would break it
                            del output.data[mime]
                            output.data.setdefault("text/plain", f"[a {mime} output of {len(value):,} bytes cut]")
            cell.outputs = merged
            return cell, resources

    default = list(Autograde.class_traits()["autograde_preprocessors"].default())
    swap = {Execute: GuardedExecute, LimitOutput: CapOutput}
    return [swap.get(p, p) for p in default]


def _error(ename: str, evalue: str):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def dead_kernel(nb) -> tuple[int, str] | None:
    """Where a graded notebook's kernel died: (cell index, the cell's first line), or None."""
    for index, cell in enumerate(nb.cells):
        if any(o.get("ename") == DEAD for o in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            return index, first.strip()[:80]
    return None


def _empty_gradebook(source: Path, target: Path) -> None:
    """A copy of the gradebook with every assignment and no student (no other student's grades to read)."""
    from nbgrader.api import Gradebook

    shutil.copy(source, target)
    with Gradebook(f"sqlite:///{target}") as gb:
        for student in list(gb.students):
            gb.remove_student(student.id)
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute("VACUUM")  # no deleted row left in the file's free pages


def transfer(private_db: Path, main_db: Path, assignment: str, student: str) -> None:
    """Copy one submission's grades and comments from a private gradebook into the course's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{private_db}") as mine:
        sub = mine.find_submission(assignment, student)
        grades = [
            (nb.name, g.name, g.auto_score, g.manual_score, g.needs_manual_grade, g.extra_credit)
            for nb in sub.notebooks
            for g in nb.grades
        ]
        comments = [(nb.name, c.name, c.auto_comment, c.manual_comment) for nb in sub.notebooks for c in nb.comments]
        flagged = {nb.name: nb.flagged for nb in sub.notebooks}
        timestamp = sub.timestamp
    with Gradebook(f"sqlite:///{main_db}") as gb:
        gb.update_or_create_student(student)
        with contextlib.suppress(MissingEntry):
            gb.remove_submission(assignment, student)
        gb.add_submission(assignment, student, timestamp=timestamp)
        for nb_name, name, auto, manual, needs, extra in grades:
            g = gb.find_grade(name, nb_name, assignment, student)
            g.auto_score, g.manual_score, g.needs_manual_grade, g.extra_credit = auto, manual, needs, extra
        for nb_name, name, auto, manual in comments:
            c = gb.find_comment(name, nb_name, assignment, student)
            c.auto_comment, c.manual_comment = auto, manual
        for nb_name, value in flagged.items():
            gb.find_submission_notebook(nb_name, assignment, student).flagged = value
        gb.db.commit()


class EnvironmentChanged(RuntimeError):
    """A submission wrote to the Python environment itself, which the grader cannot put back."""


class Guard:
    """The grader's side of isolation: a pristine package, a watch over what matters, a private course each."""

    def __init__(self, course: Path, submissions: Path, reference: dict[str, str]):
        self.course, self.submissions = course.resolve(), submissions.resolve()
        self.tmp = Path(tempfile.mkdtemp(prefix="tl-grading-"))
        self.package = package_dir()
        self.pristine = self.tmp / "pristine" / "transformer_lib"
        shutil.copytree(self.package, self.pristine, ignore=shutil.ignore_patterns("__pycache__"))
        self.reference = self.tmp / "reference.json"
        self.reference.write_text(json.dumps(reference, sort_keys=True))
        self.template = self.tmp / "gradebook.db"
        _empty_gradebook(self.course / "gradebook.db", self.template)
        # the grader's own snapshot is watched too: every later submission's private package, reference and
        # gradebook are copied from it, and a kernel can reach it (it sits a few folders above its own run)
        shared = [self.pristine.parent, self.reference, self.template]
        roots = [self.course, self.package, self.submissions, ROOT / "tools", *shared]
        self.watched = [r for i, r in enumerate(roots) if r not in roots[:i]]
        paths = sysconfig.get_paths()
        self.environment = sorted({Path(paths["purelib"]), Path(paths["platlib"])})
        self._env_print = fingerprint(self.environment)

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _private_course(self, assignment: str, student: str) -> Path:
        here = self.tmp / "runs" / f"{student}-{assignment}"
        shutil.rmtree(here, ignore_errors=True)
        course = here / "course"
        (course / "source").mkdir(parents=True)
        shutil.copy(self.course / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(self.course / "source" / assignment, course / "source" / assignment)
        shutil.copy(self.template, course / "gradebook.db")
        shutil.copytree(self.course / "submitted" / student / assignment, course / "submitted" / student / assignment)
        shutil.copytree(self.pristine, here / "lib" / "transformer_lib")
        shutil.copy(self.reference, here / "reference.json")
        return here

    def autograde(self, api_for, assignment: str, student: str) -> dict:
        """Grade one submission in its private course; what nbgrader said and what the kernel wrote."""
        here = self._private_course(assignment, student)
        private = [here / "lib", here / "reference.json"]
        before, mine, folders = fingerprint(self.watched), fingerprint(private), _folders(self.watched)
        saved = {p: Path(p).read_bytes() for p in before}  # to put back what the kernel changes
        path = os.pathsep.join(filter(None, [str(here / "lib"), os.environ.get("PYTHONPATH")]))
        with environ(PYTHONPATH=path, TL_GRADING_REFERENCE=str(here / "reference.json")):
            done = api_for(here / "course").autograde(assignment, student, force=True, create=True)
        wrote = changed(before, fingerprint(self.watched))
        for p in wrote:  # put back: changed and removed files from the bytes read before; added files removed
            target = Path(p)
            target.unlink(missing_ok=True)  # a link or a read-only file left in its place goes too
            if p in saved:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(saved[p])
        for folder in sorted(_folders(self.watched) - folders, key=len, reverse=True):
            shutil.rmtree(folder, ignore_errors=True)  # a folder the kernel made (a new "student")
        if any(Path(p).exists() != (p in saved) or p in saved and Path(p).read_bytes() != saved[p] for p in wrote):
            raise RuntimeError(f"could not put back the files that {student}'s notebook changed: {wrote}")
        own = [str(Path(p).relative_to(here)) for p in changed(mine, fingerprint(private))]
        env_now = fingerprint(self.environment)
        touched = changed(self._env_print, env_now)
        if touched:
            raise EnvironmentChanged(
                f"{student}'s notebook ({assignment}) changed the Python environment, which the grader cannot "
                f"put back: {touched[:10]}. Reinstall it (make install, or the wheelhouse) and grade again."
            )
        if done["success"]:
            graded = here / "course" / "autograded" / student / assignment
            target = self.course / "autograded" / student / assignment
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for name in [f"{assignment}.ipynb", "timestamp.txt"]:  # nothing else the kernel left there
                if (graded / name).is_file():
                    shutil.copy(graded / name, target / name)
            transfer(here / "course" / "gradebook.db", self.course / "gradebook.db", assignment, student)
        shutil.rmtree(here, ignore_errors=True)
        return {"done": done, "wrote": [_short(p, self.watched) for p in wrote] + own}


def _short(path: str, roots: list[Path]) -> str:
    """A path as an instructor reads it: relative to the watched folder that holds it."""
    for root in roots:
        if Path(path) == root or root in Path(path).parents:
            return f"{root.name}/{Path(path).relative_to(root)}" if Path(path) != root else root.name
    return path
