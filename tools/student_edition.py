"""Write the student edition of every chapter notebook: solutions removed, checkers kept.

    python tools/student_edition.py --out _build/student

In each notebook:
- cells tagged `solution` are removed, and so are markdown solution dropdowns;
- exercise stubs (`exercise` tag) raise a friendly `tl.NotYetDone` instead of returning None;
- checker cells get the `raises-exception` tag, so running the notebook top to bottom goes on past
  an unfinished exercise;
- outputs and execution counts are cleared;
- like the copies for Colab, the markdown has no MyST syntax (tools/plain_notebooks.py), since
  students open these files in Jupyter or on Colab.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

import plain_notebooks

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_DROPDOWN = re.compile(r"```\{admonition\} Solution.*?\n```\n?", re.S)


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` for students, transformed as described in the module docstring."""
    nb = nbformat.from_dict(nb)
    kept = []
    exercise = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "solution" in tags:
            continue
        if cell.cell_type == "markdown":
            cell.source = SOLUTION_DROPDOWN.sub("", cell.source)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if "exercise" in tags:
                exercise += 1
                name = re.search(r"def (\w+)\(", cell.source)
                what = f"Exercise {exercise} ({name.group(1) if name else 'your answer'})"
                cell.source = cell.source.replace("return None", f'raise tl.NotYetDone("{what}")')
            if "checker" in tags:
                cell.metadata["tags"] = tags + ["raises-exception"]
        kept.append(cell)
    nb.cells = kept
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "student")
    args = parser.parse_args(argv)
    out = args.out / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    bib = plain_notebooks.bibliography()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        plain = plain_notebooks.plain_notebook(nbformat.read(path, as_version=4), bib)
        nbformat.write(student_notebook(plain), out / path.name)
        print(f"wrote {(out / path.name).relative_to(args.out.parent) if args.out.is_absolute() else out / path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
