"""Grade each submission in isolation: nothing one student's code does can change another student's grade.

For every submission, `Guard.autograde`:

1. builds a private course: a temporary folder with nbgrader's config, the assignment's source, a gradebook
   that holds the assignment and no student, and this one submission. nbgrader (the executing client, the
   gradebook, the hidden tests) runs there, in the grader's own process;
2. starts the student's kernel in an operating-system sandbox (grading_sandbox.py, bubblewrap): it sees the
   system and the Python environment read-only, a pristine copy of transformer_lib read-only, a private home
   folder and /tmp, and nothing else (no course, no submissions, no checkout, no network), and every process it
   starts dies with it. In the trusted mode (no bwrap, an instructor's explicit choice) the kernel runs as the
   instructor with a private home folder and a private package copy first on its PYTHONPATH, and step 3 is the
   only wall;
3. watches everything that matters, before and after the kernel runs: the course folder (gradebook, source,
   release, submitted, autograded, feedback), the package's files, the submissions folder and tools/, by
   size, times of change and inode; the private copy likewise; and the Python environment's site-packages.
   A file changed, added or removed in the course, the package, the submissions or tools/ is put back as it
   was, and the submission is flagged with the list. A change to the private copy is flagged too. A change
   to site-packages cannot be put back from here: grading stops and says which files changed. (In the sandbox
   none of these can be reached: the watch is a second wall and the trusted mode's only one.)
4. copies the graded notebook and the auto-graded scores back into the real course, from the grader's own
   process, after the kernel has gone. Manual scores are never copied: they are the instructor's.

The kernel's notebook runs through `GuardedExecute`, which records the clean library objects before any cell of
the notebook runs (the hidden checks compare with them by identity), grades every cell that ran before a kernel
died or was stopped, kills a kernel whose cell ignores the interrupt after its time limit, and marks the rest as
not run; and `CapOutput`, which keeps a bounded head and tail of any long output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import stat
import sysconfig
import tempfile
import time
from functools import cache
from importlib.util import find_spec
from pathlib import Path

import nbformat

import grading_sandbox

ROOT = Path(__file__).resolve().parent.parent
DEAD = "DeadKernelError"
STOPPED = "KernelStopped"  # a cell past its time limit ignored the interrupt: the kernel and its processes were killed
NOT_RUN = "NotRunError"
GRACE = 5  # seconds a cell has to stop after the interrupt, before its kernel is killed
BUDGET = 1800  # seconds for a whole submission; the cells after it are not run
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
    LimitOutput, and its feedback preprocessors after HideHidden (defined on first use: nbgrader is the grading
    extra's, not the book's): (autograde, feedback)."""
    from queue import Empty

    from jupyter_core.utils import ensure_async
    from nbclient.exceptions import DeadKernelError
    from nbgrader.converters import Autograde, GenerateFeedback
    from nbgrader.preprocessors import Execute, LimitOutput, NbGraderPreprocessor
    from traitlets import Any

    class GuardedExecute(Execute):
        """nbgrader's Execute, but the clean library objects are recorded before the notebook's first cell, a kernel
        that dies costs only the cells after it, and one whose cell ignores the interrupt is killed."""

        manager = Any(None, allow_none=True, help="the kernel manager class (the sandbox's), or None").tag(config=True)

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if self.manager is not None:  # nbgrader's Execute sets its own class as a keyword, over any config
                self.kernel_manager_class = self.manager

        def preprocess(self, nb, resources=None, km=None):
            self._died_at, self._stopped, self._recorded, self._started = None, False, False, time.monotonic()
            return super().preprocess(nb, resources, km)

        def _record_clean_objects(self):
            """Run the hidden check's recording step in the fresh kernel, outside the notebook (silent: no history, no
            output, no cell of the notebook)."""
            import grading

            code = f"{grading._GUARD}\n\n_nbgrader_check(None, None)\ndel _nbgrader_check"
            reply = self.wait_for_reply(self.kc.execute(code, silent=True, store_history=False, allow_stdin=False))
            content = (reply or {}).get("content", {})
            if content.get("status") != "ok":
                raise RuntimeError(f"the grader could not start its check in the kernel: {content.get('evalue')}")
            self._recorded = True

        async def _async_handle_timeout(self, timeout, cell=None):
            """Interrupt; a cell that has not stopped GRACE seconds later gets its kernel (and sandbox) killed."""
            self.log.error("Timeout waiting for execute reply (%is): interrupting the kernel", timeout)
            await ensure_async(self.km.interrupt_kernel())
            try:
                await ensure_async(self.kc.shell_channel.get_msg(timeout=GRACE))  # the interrupted cell's reply
            except Empty:
                self.log.error("the cell ignored the interrupt: killing its kernel")
                await ensure_async(self.km.shutdown_kernel(now=True))
                raise DeadKernelError("stopped") from None
            return {"content": {**self.error_on_timeout, "status": "error"}}

        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type != "code":
                return cell, resources
            if self._died_at is not None:  # no kernel left: a graded cell with no error would get its points
                why = "was stopped" if self._stopped else "died"
                cell.outputs = [_error(NOT_RUN, f"not run: the kernel {why} earlier, in cell {self._died_at}")]
                return cell, resources
            if time.monotonic() - self._started > BUDGET:
                cell.outputs = [_error(NOT_RUN, f"not run: the submission's {BUDGET} s were spent")]
                return cell, resources
            try:
                if not self._recorded:
                    self._record_clean_objects()
                return super().preprocess_cell(cell, resources, index)
            except DeadKernelError as error:
                self._died_at, self._stopped = index, str(error) == "stopped"
                if self._stopped:
                    self.log.error("cell %d ignored the interrupt after its time limit; its kernel was killed", index)
                    message = (
                        "this cell ran past its time limit and ignored the interrupt, so the grader killed its "
                        "kernel and every process it started"
                    )
                    cell.outputs.append(_error(STOPPED, message))
                else:
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

    class HideHidden(NbGraderPreprocessor):
        """For the feedback: no hidden test, and no output that quotes one (for_feedback)."""

        def preprocess(self, nb, resources):
            for_feedback(nb)
            return nb, resources

    default = list(Autograde.class_traits()["autograde_preprocessors"].default())
    swap = {Execute: GuardedExecute, LimitOutput: CapOutput}
    feedback = list(GenerateFeedback.class_traits()["preprocessors"].default())
    return [swap.get(p, p) for p in default], [HideHidden, *feedback]


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


def hidden_lines(nb) -> set[str]:
    """The lines of a notebook's hidden tests long enough to recognise (the grader's check, the calls)."""
    found = set()
    for cell in nb.cells:
        for block in HIDDEN.findall(cell.get("source", "")):
            found |= {line.strip() for line in block.splitlines() if len(line.strip()) >= 24}
    return found


def for_feedback(nb) -> None:
    """What a student may see of a graded notebook: each checker cell without its hidden part, and no output that
    quotes it (a traceback through the hidden check, or a cell that printed the kernel's input history)."""
    secret = hidden_lines(nb)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.source = HIDDEN.sub("", cell.source).rstrip("\n")
        for output in cell.get("outputs", []):
            if output.output_type == "error":  # the verdict stays; the frames (the hidden code's lines) go
                output.traceback = [f"{output.ename}: {output.evalue}"]
            text = json.dumps(output)
            if any(line in text or json.dumps(line)[1:-1] in text for line in secret):
                withheld = "[output withheld by the grader: it quoted the grader's hidden check]"
                output.clear()
                output.update(nbformat.v4.new_output("stream", name="stdout", text=withheld))


def _error(ename: str, evalue: str):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def dead_kernel(nb) -> tuple[int, str, bool] | None:
    """Where a graded notebook's kernel died or was stopped: (cell index, the cell's first line, whether the grader
    stopped it), or None."""
    for index, cell in enumerate(nb.cells):
        names = {o.get("ename") for o in cell.get("outputs", [])}
        if names & {DEAD, STOPPED}:
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            return index, first.strip()[:80], STOPPED in names
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
    """Copy one submission's auto-graded scores and comments from a private gradebook into the course's gradebook.
    Manual scores, manual comments and flags are the instructor's: whatever the private gradebook says of them is
    not copied (grading.grade sets them where it flags an exercise)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{private_db}") as mine:
        sub = mine.find_submission(assignment, student)
        grades = [
            (nb.name, g.name, g.auto_score, g.manual_score, g.needs_manual_grade, g.extra_credit)
            for nb in sub.notebooks
            for g in nb.grades
        ]
        comments = [(nb.name, c.name, c.auto_comment) for nb in sub.notebooks for c in nb.comments]
        timestamp = sub.timestamp
    with Gradebook(f"sqlite:///{main_db}") as gb:
        gb.update_or_create_student(student)
        with contextlib.suppress(MissingEntry):
            gb.remove_submission(assignment, student)
        gb.add_submission(assignment, student, timestamp=timestamp)
        for nb_name, name, auto, _manual, _needs, _extra in grades:  # the auto-graded score alone
            g = gb.find_grade(name, nb_name, assignment, student)
            g.auto_score, g.manual_score, g.needs_manual_grade, g.extra_credit = auto, None, False, None
        for nb_name, name, auto in comments:
            c = gb.find_comment(name, nb_name, assignment, student)
            c.auto_comment, c.manual_comment = auto, None
        gb.db.commit()


class EnvironmentChanged(RuntimeError):
    """A submission wrote to the Python environment itself, which the grader cannot put back."""


class Guard:
    """The grader's side of isolation: a sandbox per kernel, a pristine package, a watch over what matters, a
    private course each. `trusted=True` runs the kernels without the sandbox (book/instructors.md)."""

    def __init__(self, course: Path, submissions: Path, trusted: bool = False, memory_mb: int | None = None):
        self.course, self.submissions = course.resolve(), submissions.resolve()
        self.trusted, self.memory_mb = trusted, memory_mb or grading_sandbox.MEMORY_MB
        if not trusted:
            grading_sandbox.check_available()  # the same clear error where the guard is used on its own
        self.tmp = Path(tempfile.mkdtemp(prefix="tl-grading-"))
        self.package = package_dir()
        self.pristine = self.tmp / "pristine" / "transformer_lib"
        shutil.copytree(self.package, self.pristine, ignore=shutil.ignore_patterns("__pycache__"))
        self.template = self.tmp / "gradebook.db"
        _empty_gradebook(self.course / "gradebook.db", self.template)
        self.fonts = grading_sandbox.matplotlib_cache(self.tmp / "matplotlib")
        # the grader's own snapshot is watched too: every later submission's private package and gradebook are
        # copied from it (in the trusted mode a kernel can reach it, a few folders above its own run)
        shared = [self.pristine.parent, self.template]
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
        if self.trusted:  # a copy the kernel could write to (the sandbox mounts the snapshot itself, read-only)
            shutil.copytree(self.pristine, here / "lib" / "transformer_lib")
        grading_sandbox.prepare_home(here / "home", self.fonts)
        (here / "kernel").mkdir()
        return here

    def autograde(self, api_for, assignment: str, student: str) -> dict:
        """Grade one submission in its private course; what nbgrader said and what the kernel wrote.
        `api_for(course_folder, kernel_manager_class)` gives nbgrader's API for the private course."""
        here = self._private_course(assignment, student)
        private = [here / "lib"]
        before, mine, folders = fingerprint(self.watched), fingerprint(private), _folders(self.watched)
        saved = {p: Path(p).read_bytes() for p in before}  # to put back what the kernel changes
        if self.trusted:  # the kernel inherits these: its own home folder and package copy, nothing more
            home = here / "home"
            path = os.pathsep.join(filter(None, [str(here / "lib"), os.environ.get("PYTHONPATH")]))
            env = {"PYTHONPATH": path, "TL_GRADING_PACKAGE": str(here / "lib"), "HOME": str(home)}
            env |= {"IPYTHONDIR": str(home / ".ipython"), "MPLCONFIGDIR": str(home / ".config" / "matplotlib")}
            manager = None
        else:  # the sandbox sets the kernel's whole environment itself
            env = {}
            manager = grading_sandbox.sandboxed_kernel_manager(
                here / "kernel", self.pristine.parent, here / "home", self.memory_mb, log=here / "kernel.log"
            )
        with environ(**env):
            done = api_for(here / "course", manager).autograde(assignment, student, force=True, create=True)
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
