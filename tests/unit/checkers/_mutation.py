"""What every chapter's mutation suite shares: a notebook's solution as a function, and the rejection check.

Imported by name (pytest puts this folder on sys.path, as it has no __init__.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import exercises as ex

NOTEBOOKS = Path(__file__).parents[3] / "notebooks"


def notebook_solution(notebook: str, name: str, **names) -> Callable:
    """The function `name` as `notebooks/<notebook>.ipynb`'s solution cell defines it.

    Only the cell's imports and definitions run (what it prints or asserts does not), with tl,
    torch, math, F and `names` as its globals.
    """
    for cell in json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in source:
            lines, keep = [], False
            for line in source.splitlines():
                keep = line.startswith(("def ", "@", "import ", "from ", " ", "\t")) or (keep and not line)
                if keep:
                    lines.append(line)
            namespace = {"tl": tl, "torch": torch, "math": math, "F": F, **names}
            exec("\n".join(lines), namespace)
            return namespace[name]
    raise LookupError(f"no solution cell defines {name} in {notebook}.ipynb")


def rejected_as(feedback: str, mistake: str) -> None:
    """The checker said no, and its verdict names this mistake (its id; the hint's wording is free)."""
    assert feedback != ex.CORRECT
    assert getattr(feedback, "mistake", None) == mistake, f"{getattr(feedback, 'mistake', None)!r}: {feedback}"


def raising(error: Exception) -> Callable:
    """A learner's function that raises `error` whatever it is given."""

    def fn(*args, **kwargs):
        raise error

    return fn
