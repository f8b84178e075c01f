"""Which build of torch pip should install here: print the pip arguments that select it (maybe none).

    python3 tools/torch_index.py            # what `make install`, `make book`, `make test` and `make wheelhouse` use
    TORCH_BACKEND=cuda python3 tools/torch_index.py

PyPI's torch for Linux is the CUDA build: gigabytes of NVIDIA libraries that a laptop or a CPU lab never uses.
The CPU build lives on PyTorch's own index. So, with TORCH_BACKEND unset or `auto`:
- on Linux with no NVIDIA GPU (no /dev/nvidia0, no working nvidia-smi), the CPU index is added with
  `--extra-index-url`, unless pip's own configuration already offers the CPU wheel of the pinned version
  (a find-links folder or a local index holding it, or the CPU index itself), as CI's machines do: then
  nothing is added, so the install never waits on an index the machine cannot reach;
- with a GPU, or on macOS and Windows (where PyPI's wheel has no CUDA in it), nothing is added.
TORCH_BACKEND=cpu asks for the CPU build anyway; TORCH_BACKEND=cuda for PyPI's default (CUDA on Linux);
TORCH_BACKEND=cu126 (or another cuXYZ) for that CUDA build from PyTorch's index. Stdlib only: it runs
before the virtual environment has anything in it.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
INDEX = "https://download.pytorch.org/whl/"
BACKENDS = "auto, cpu, cuda or cuXYZ (cu126, cu128, ...)"


def pinned_version(constraints: Path = ROOT / "constraints.txt") -> str | None:
    """The torch version that the constraints file pins (`torch==2.13.0` gives '2.13.0'), or None."""
    if not constraints.exists():
        return None
    found = re.search(r"^torch==([^\s;#]+)", constraints.read_text(), flags=re.M)
    return found.group(1) if found else None


def has_nvidia_gpu() -> bool:
    """True when this machine shows an NVIDIA GPU: a device node, or nvidia-smi that lists one."""
    if Path("/dev/nvidia0").exists():
        return True
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def pip_sources(python: str = sys.executable) -> list[str]:
    """Every find-links and index URL that pip's configuration (files and PIP_* variables) names."""
    try:
        listed = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    sources = []
    for line in listed.splitlines():  # e.g. global.find-links='/opt/wheels' or :env:.extra-index-url='a b'
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] in ("find-links", "index-url", "extra-index-url"):
            sources += value.strip().strip("'\"").split()
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        sources += os.environ.get(name, "").split()
    return sources


def offers_cpu_wheel(source: str, version: str | None) -> bool:
    """Whether one find-links folder or index offers the CPU build of torch `version` (any version if None)."""
    if source.rstrip("/").startswith(INDEX + "cpu"):
        return True
    path = Path(unquote(urlparse(source).path)) if source.startswith("file:") else Path(source)
    if "://" in source and not source.startswith("file:"):
        return False  # a remote index that is not PyTorch's CPU index: nothing to read without the network
    wanted = re.compile(rf"torch-{re.escape(version) if version else '[0-9.]+'}\+cpu-.*\.whl")
    candidates = [path, path / "torch", path / "torch" / "index.html"]
    for candidate in candidates:
        if candidate.is_dir() and any(wanted.fullmatch(p.name) for p in candidate.iterdir()):
            return True
        if candidate.is_file() and wanted.search(candidate.read_text(errors="replace")):
            return True
    return False


def pip_arguments(backend: str, *, system: str, gpu: bool, sources: list[str], version: str | None) -> list[str]:
    """The pip arguments that install the chosen build of torch: the decision of this tool, with no I/O."""
    backend = (backend or "auto").strip().lower()
    if backend not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cu\d{3}", backend):
        raise ValueError(f"TORCH_BACKEND must be one of {BACKENDS}; got {backend!r}")
    if backend == "cuda" or (backend == "auto" and (gpu or system != "Linux")):
        return []  # PyPI's own wheel: CUDA on Linux, CPU-only on macOS and Windows
    if backend.startswith("cu"):
        return ["--extra-index-url", INDEX + backend]
    if any(offers_cpu_wheel(source, version) for source in sources):
        return []  # pip's configuration already has the CPU wheel: ask no index it may not reach
    return ["--extra-index-url", INDEX + "cpu"]


def main() -> int:
    backend = os.environ.get("TORCH_BACKEND", "auto")
    try:
        arguments = pip_arguments(
            backend,
            system=platform.system(),
            gpu=backend.strip().lower() == "auto" and has_nvidia_gpu(),
            sources=pip_sources(),
            version=pinned_version(),
        )
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(" ".join(arguments))
    return 0


if __name__ == "__main__":
    sys.exit(main())
