"""Strict nbval must fail when a notebook's stored output no longer matches what its code prints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "notebooks" / "00_template.ipynb"


def _run_nbval(path: Path) -> subprocess.CompletedProcess:
    sanitize = ["--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg")]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", str(path), *sanitize]
    command += ["--rootdir", str(path.parent)]
    return subprocess.run(command, capture_output=True, text=True, cwd=path.parent, timeout=300)


def test_unchanged_copy_passes_and_an_edited_output_fails(tmp_path):
    good = tmp_path / "good.ipynb"
    shutil.copy(TEMPLATE, good)
    assert _run_nbval(good).returncode == 0

    nb = nbformat.read(TEMPLATE, as_version=4)
    for cell in nb.cells:
        streams = [o for o in cell.get("outputs", []) if o.output_type == "stream"]
        if cell.cell_type == "code" and streams:
            streams[0].text = streams[0].text.replace("1", "7", 1)
            break
    stale = tmp_path / "stale.ipynb"
    nbformat.write(nb, stale)
    result = _run_nbval(stale)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "mismatch" in result.stdout.lower() or "failed" in result.stdout.lower()


def test_the_sanitizer_makes_a_gpu_tensor_print_as_on_the_cpu_and_nothing_else():
    """nbval reads regex/replace pairs with its own parser; a pair it cannot read would be silently ignored."""
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text())

    def sanitize(text: str) -> str:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    # reprs as PyTorch prints them on a CPU and, in the first GPU run (docs/gpu.md), on a GPU
    pairs = [
        (
            "tensor([[1, 0],\n        [1, 1]], dtype=torch.int32)",
            "tensor([[1, 0],\n        [1, 1]], device='cuda:0', dtype=torch.int32)",
        ),
        ("tensor([[17,  0,  0]])", "tensor([[17,  0,  0]], device='cuda:0')"),
    ]
    for cpu, gpu in pairs:
        assert sanitize(gpu) == sanitize(cpu) == cpu
    assert sanitize("on device='cuda:0' here") == "on device='cuda:0' here"  # only a tensor's repr changes
