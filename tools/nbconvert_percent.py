"""Author notebooks as plain text: convert between percent-format .py and .ipynb.

    python tools/nbconvert_percent.py to-ipynb notebooks/src.py notebooks/01_x.ipynb
    python tools/nbconvert_percent.py to-py notebooks/01_x.ipynb /tmp/01_x.py

Cells start with `# %%` (code) or `# %% [markdown]` (markdown, each line prefixed by `# `).
A marker may carry metadata as JSON after the keyword `meta=`, for example
`# %% meta={"tags": ["remove-input"]}`. Outputs are not kept: run `make execute` afterwards.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

MARKER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: meta=(?P<meta>\{.*\}))?\s*$")


def py_to_notebook(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    kind, meta, lines = None, {}, []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.split("\n"))
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        cell.metadata.update(meta)
        nb.cells.append(cell)

    for line in text.split("\n"):
        m = MARKER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            meta = json.loads(m.group("meta")) if m.group("meta") else {}
            lines = []
        else:
            lines.append(line)
    flush()
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def notebook_to_py(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        meta = {k: v for k, v in cell.metadata.items() if k not in ("execution",)}
        suffix = f" meta={json.dumps(meta, ensure_ascii=False)}" if meta else ""
        if cell.cell_type == "markdown":
            body = "\n".join(("# " + line).rstrip() for line in cell.source.split("\n"))
            parts.append(f"# %% [markdown]{suffix}\n{body}")
        else:
            parts.append(f"# %%{suffix}\n{cell.source}")
    return "\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("to-ipynb", "to-py"):
        print(__doc__)
        return 2
    src, dst = Path(argv[1]), Path(argv[2])
    if argv[0] == "to-ipynb":
        nbformat.write(py_to_notebook(src.read_text()), dst)
    else:
        dst.write_text(notebook_to_py(nbformat.read(src, as_version=4)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
