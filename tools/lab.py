"""Start JupyterLab the way a learner should meet the book: on colab/, the chapters in plain Markdown.

    make lab                     # or: .venv/bin/python tools/lab.py [extra JupyterLab options]

notebooks/ holds the same cells in MyST, the source of the website; JupyterLab shows its roles
({numref}, {cite}, dropdown admonitions) as raw text. So JupyterLab is started at the repository
root (notebooks/ stays reachable for authors) and opens on colab/. tests/browser/test_jupyterlab.py
starts it with the same arguments.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_FOLDER = "colab"


def lab_arguments(root: Path = ROOT) -> list[str]:
    """The JupyterLab options `make lab` uses: serve `root`, open the file browser on colab/."""
    return [f"--ServerApp.root_dir={root}", f"--LabApp.default_url=/lab/tree/{FIRST_FOLDER}"]


def main(argv: list[str]) -> None:
    command = [sys.executable, "-m", "jupyterlab", *lab_arguments(), *argv]
    os.execv(sys.executable, command)  # JupyterLab replaces this process, so Ctrl-C reaches it


if __name__ == "__main__":
    main(sys.argv[1:])
