"""A learner's first cell on Colab: a bare environment with only torch and ipykernel.

The notebook's own setup cell must install transformer_lib (from a local path standing in for the
git URL) and the whole notebook must then run in that environment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "00_template.ipynb"

pytestmark = pytest.mark.slow


def _run(*args, **kwargs):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, timeout=900, **kwargs)


def test_setup_cell_installs_the_package_then_the_notebook_runs(tmp_path, monkeypatch):
    venv = tmp_path / "colab"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "torch==2.13.0", "ipykernel", "-c", ROOT / "constraints.txt")
    # run from tmp_path: from the repository root, `python -c` would import the source tree itself
    probe = subprocess.run([str(python), "-c", "import transformer_lib"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the bare environment must not have transformer_lib yet"

    _run(python, "-m", "ipykernel", "install", "--prefix", tmp_path / "jupyter", "--name", "colab-sim")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter" / "share" / "jupyter"))
    monkeypatch.setenv("TRANSFORMER_LIB_SOURCE", str(ROOT))
    monkeypatch.setenv("PIP_CONSTRAINT", str(ROOT / "constraints.txt"))

    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, kernel_name="colab-sim", timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    installed = subprocess.run([str(python), "-c", "import transformer_lib, sys; print(transformer_lib.__file__)"],
                               capture_output=True, text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert str(venv) in installed.stdout, "the setup cell must have installed the package into the bare environment"
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "our causal mask equals tl.causal_mask: True" in printed
