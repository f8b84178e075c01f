"""Run notebooks' code cells in one plain Python process each, for a machine without Jupyter.

The GPU machines lent to this project have PyTorch, transformers and scikit-learn but no Jupyter
stack, and nbval with its dependencies does not fit beside the working tree in what travels there.
This runner executes each code cell in order in one namespace, with matplotlib's Agg backend,
skips IPython magics and shell lines, and where IPython is missing turns `from IPython.display
import ...` into stand-ins that show nothing.
It prints one line per notebook (cells run, the first failure if any, seconds) and exits non-zero
when any cell failed. It checks only that cells run and their own asserts hold; it does not
compare outputs (nbval does that where Jupyter exists).

    python tools/run_cells_plain.py notebooks/16_images_and_sound.ipynb [...]
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

_IPYTHON_DISPLAY = re.compile(r"^(\s*)from IPython\.display import (.+)$")


class _Shown:
    """Stands in for IPython.display's rich objects (Audio, HTML, ...): keeps what it was given."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _has_ipython() -> bool:
    try:
        import IPython.display  # noqa: F401
    except ImportError:
        return False
    return True


def _code(cell_source: str, ipython: bool) -> str:
    """The cell without magics and shell lines; without IPython, its display imports become stand-ins."""
    lines = []
    for line in cell_source.splitlines():
        if line.lstrip().startswith(("%", "!")):
            continue
        match = _IPYTHON_DISPLAY.match(line)
        if match and not ipython:
            indent, names = match.groups()
            for name in names.replace("(", "").replace(")", "").split(","):
                name = name.split(" as ")[-1].strip()
                value = "_display" if name == "display" else f"type({name!r}, (_Shown,), {{}})"
                lines.append(f"{indent}{name} = {value}")
            continue
        lines.append(line)
    return "\n".join(lines)


def run_notebook(path: Path) -> tuple[int, str | None, float]:
    """(code cells run, the first failure as text or None, seconds)."""
    notebook = json.loads(path.read_text())
    ipython = _has_ipython()
    namespace: dict = {"__name__": "__main__", "_Shown": _Shown, "_display": lambda *objects, **kwargs: None}
    if not ipython:
        namespace["display"] = namespace["_display"]
    start = time.perf_counter()
    ran = 0
    old_cwd = Path.cwd()
    os.chdir(path.parent)
    try:
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            try:
                exec(compile(_code(source, ipython), f"{path.name}[{index}]", "exec"), namespace)
            except Exception:
                first_line = source.splitlines()[0] if source else ""
                failure = f"cell {index} ({first_line!r}):\n{traceback.format_exc(limit=-4)}"
                return ran, failure, time.perf_counter() - start
            ran += 1
            import matplotlib.pyplot as plt

            plt.close("all")
    finally:
        os.chdir(old_cwd)
    return ran, None, time.perf_counter() - start


def main(paths: list[str]) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(Path.cwd()))
    failed = 0
    for name in paths:
        ran, failure, seconds = run_notebook(Path(name))
        status = "passed" if failure is None else "FAILED"
        print(f"{name}: {status}, {ran} code cells ran, {seconds:.1f} s", flush=True)
        if failure is not None:
            failed += 1
            print(failure, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
