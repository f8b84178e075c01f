"""A learner's first cells on Colab, in an environment that looks like Colab's.

Colab comes with torch, matplotlib, tqdm and ipywidgets 7.7 already installed and imported. The
setup cell must install transformer_lib (from a local path standing in for the git URL) without
touching those, since changing a package Colab has already imported asks for a runtime restart.
Then the template and the positional-encoding chapter, whose explorer uses ipywidgets, must run.

Nothing inside the kernel may wait on the network: the package is built into a wheel first (no
build isolation, so pip fetches no setuptools), and the kernel's pip runs with PIP_NO_INDEX, so a
missing dependency fails at once instead of retrying an index. A cell that hangs fails after
CELL_TIMEOUT_S with the notebook, the cell's number and its first line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

from kernel_start import STARTUP_TIMEOUT_S, IpcKernelManager

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [ROOT / "notebooks" / "00_template.ipynb", ROOT / "notebooks" / "03_positional_encoding.ipynb"]
COLAB = ["torch==2.13.0", "ipykernel", "ipywidgets==7.7.1", "matplotlib==3.10.0", "tqdm"]  # there before the learner
WATCHED = ("torch", "ipywidgets", "matplotlib", "tqdm")
CELL_TIMEOUT_S = 240  # the slowest cell (the setup cell's pip install) takes about 20 s

pytestmark = pytest.mark.slow


def _run(*args, **kwargs):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, timeout=900, **kwargs)


def _versions(python: Path, cwd: Path) -> dict[str, str]:
    frozen = _run(python, "-m", "pip", "list", "--format=freeze", cwd=cwd).stdout.lower().splitlines()
    found = dict(line.split("==", 1) for line in frozen if "==" in line)
    return {name: found.get(name) for name in WATCHED}


def _execute(path: Path, kernel: str, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=CELL_TIMEOUT_S,  # per cell
        startup_timeout=STARTUP_TIMEOUT_S,
        kernel_manager_class=IpcKernelManager,  # no TCP port to race the other worker's kernels for
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(cwd)}},
    )
    client.reset_execution_trackers()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            try:
                client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
            except CellTimeoutError:
                first = cell.source.strip().splitlines()[0] if cell.source.strip() else "(empty)"
                pytest.fail(f"{path.name}: cell {index} ({first!r}) hung for more than {CELL_TIMEOUT_S} s")
    return nb


def test_setup_cell_installs_the_package_leaves_colab_alone_and_the_explorer_runs(tmp_path, monkeypatch, pip_alone):
    venv = tmp_path / "colab"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", *COLAB)
    # run from tmp_path: from the repository root, `python -c` would import the source tree itself
    probe = subprocess.run([str(python), "-c", "import transformer_lib"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the Colab-like environment must not have transformer_lib yet"
    before = _versions(python, tmp_path)
    assert before["ipywidgets"] == "7.7.1" and before["matplotlib"] == "3.10.0"

    _run(python, "-m", "ipykernel", "install", "--prefix", tmp_path / "jupyter", "--name", "colab-sim")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter" / "share" / "jupyter"))
    # The checkout as a wheel, built from a copy (no build/ or egg-info left in the checkout) with this
    # environment's setuptools, so that no build step fetches anything.
    source, wheels = tmp_path / "source", tmp_path / "wheels"
    shutil.copytree(ROOT / "transformer_lib", source / "transformer_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, source)
    (wheel,) = wheels.glob("transformer_lib-*.whl")
    monkeypatch.setenv("TRANSFORMER_LIB_SOURCE", str(wheel))  # stands in for the git URL
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the kernel's pip never waits on an index
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)  # Colab has no constraints file

    executed = [_execute(path, "colab-sim", tmp_path) for path in NOTEBOOKS]

    for path, nb in zip(NOTEBOOKS, executed):
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{path.name}: {[e.ename + ': ' + e.evalue for e in errors]}"
    assert _versions(python, tmp_path) == before, "the setup cell changed a package Colab had already imported"
    installed = _run(python, "-c", "import transformer_lib, sys; print(transformer_lib.__file__)", cwd=tmp_path)
    assert str(venv) in installed.stdout, "the setup cell must have installed the package into the environment"
    printed = "".join(o.get("text", "") for c in executed[0].cells if c.cell_type == "code" for o in c.outputs)
    assert "our causal mask equals tl.causal_mask: True" in printed
    outputs = [o for c in executed[1].cells if c.cell_type == "code" for o in c.outputs]
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, "the positional-encoding explorer displayed no widget under ipywidgets 7.7.1"
