"""The lab-machine recipe of book/instructors.md, as written: a wheelhouse, then an install with no index.

`make wheelhouse` (tools/wheelhouse.py) writes the wheels; on a machine without internet a fresh
virtual environment installs `transformer_lib[book]` from that folder alone. Here pip sees no index,
no find-links but the wheelhouse, and no configuration file, and the package is then used from a
folder outside the checkout: a shipped checkpoint, the corpus, and Jupyter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import wheelhouse  # tools/wheelhouse.py

ROOT = Path(__file__).resolve().parents[2]

USE = """
import pathlib, sys
import transformer_lib as tl
from transformer_lib import recipes
where = pathlib.Path(tl.__file__).resolve()
assert pathlib.Path(sys.prefix) in where.parents, f"imported from {where}, not from the lab's environment"
assert callable(recipes.shakespeare_lm) and callable(recipes.shakespeare_data)
model, meta = tl.load_checkpoint("bracket_classifier")
assert sum(p.numel() for p in model.parameters()) > 0
text = tl.corpus.shakespeare("train")
assert len(text) > 100_000, len(text)
print("ok", type(model).__name__, len(text))
"""


def _build_folders() -> dict[str, int]:
    """What a build in the checkout would leave (build/, dist/, egg-info), with their times of change."""
    found = [*ROOT.glob("build"), *ROOT.glob("build/*"), *ROOT.glob("dist"), *ROOT.glob("*.egg-info")]
    return {p.name: p.stat().st_mtime_ns for p in found}


@pytest.mark.slow
def test_lab_machine_installs_the_book_from_the_wheelhouse_alone(tmp_path, pip_alone):
    house = tmp_path / "wheelhouse"
    before = _build_folders()
    assert wheelhouse.main(["--out", str(house)]) == 0
    assert _build_folders() == before, "building the wheel wrote into the checkout"
    wheels = sorted(p.name for p in house.iterdir())
    assert all(name.endswith(".whl") for name in wheels), wheels
    assert any(name.startswith("transformer_lib-") for name in wheels)

    lab = tmp_path / "lab"  # the lab machine: outside the checkout, the wheelhouse copied beside
    lab.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env |= {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=lab, env=env, check=True)
    pip = [".venv/bin/python", "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(house)]
    done = subprocess.run([*pip, "transformer_lib[book]"], cwd=lab, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    used = subprocess.run([".venv/bin/python", "-c", USE], cwd=lab, env=env, capture_output=True, text=True)
    assert used.returncode == 0 and used.stdout.startswith("ok"), used.stdout + used.stderr[-3000:]
    for tool in ("jupyter", "jupyter-lab"):
        assert (lab / ".venv" / "bin" / tool).is_file(), f"{tool} is not installed"
    lab_version = [".venv/bin/jupyter", "lab", "--version"]
    version = subprocess.run(lab_version, cwd=lab, env=env, capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
