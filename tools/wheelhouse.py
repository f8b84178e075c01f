"""Write a wheelhouse: every wheel a lab machine without internet needs to run the book's notebooks.

    python tools/wheelhouse.py                 # _build/wheelhouse/ (what `make wheelhouse` runs)
    python tools/wheelhouse.py --out DIR

On the lab machine, with the folder copied there as `wheelhouse/` (book/instructors.md):

    python3 -m venv .venv && .venv/bin/pip install --no-index --find-links wheelhouse "transformer_lib[book]"

transformer_lib's own wheel is built from a copy of the package (pyproject.toml, README.md and
transformer_lib/, checkpoints and texts included), so no build/ folder or egg-info lands in the
checkout. Then `pip download` fetches the wheels of everything its `book` extra needs, pinned by
constraints.txt, as CI tests them. torch is the build that tools/torch_index.py picks: the CPU build on a
machine without an NVIDIA GPU (a CPU lab's), or the one TORCH_BACKEND names (cuda, cu126, ...). A dependency that
the registry has only as source is built into a wheel here, so the lab machine builds nothing.
Wheels fit one Python version and platform: prepare on the same ones as the lab machines have.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch_index

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
EXTRA = "book"


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def build_package(out: Path) -> Path:
    """transformer_lib's wheel, built from a copy of the package in a temporary folder, written to `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "transformer_lib-source"
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, source / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
        shutil.copytree(ROOT / "transformer_lib", source / "transformer_lib", ignore=ignore)
        # the build backend (setuptools, pyproject.toml's build-system) is this environment's: no download
        _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(source))
    wheels = sorted(out.glob("transformer_lib-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one transformer_lib wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "wheelhouse")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)  # no wheel left over from an older pin
    out.mkdir(parents=True)
    package = build_package(out)
    backend = os.environ.get("TORCH_BACKEND", "auto")
    torch_args = torch_index.pip_arguments(
        backend,
        system=platform.system(),
        gpu=backend.strip().lower() == "auto" and torch_index.has_nvidia_gpu(),
        sources=torch_index.pip_sources(),
        version=torch_index.pinned_version(CONSTRAINTS),
    )
    pins = ["--constraint", str(CONSTRAINTS), *torch_args]
    _pip("download", "--quiet", "--dest", str(out), *pins, f"{package}[{EXTRA}]")
    for sdist in sorted([*out.glob("*.tar.gz"), *out.glob("*.zip")]):  # published as source only: build it here
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(sdist))
        sdist.unlink()
    wheels = sorted(out.glob("*.whl"))
    others = sorted(p.name for p in out.iterdir() if p.suffix != ".whl")
    if others:
        raise SystemExit(f"the wheelhouse holds files that are not wheels: {others}")
    size = sum(w.stat().st_size for w in wheels)
    print(f"wrote {len(wheels)} wheels, {size / 1e6:.0f} MB, to {out}")
    print(f'install offline: pip install --no-index --find-links {out.name} "transformer_lib[{EXTRA}]"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
