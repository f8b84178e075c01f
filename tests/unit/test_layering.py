"""The package's layering: modules sit below every chapter that uses them, and no two import each other.

Read from the source (imports under TYPE_CHECKING included): a cycle or an upward import is a design fault
even when Python happens to resolve it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "transformer_lib"
# the modules of chapters 1 to 11 (the 2017 model and its training), and the later chapters' own modules
CORE = [
    "config",
    "tokenization",
    "corpus",
    "embedding",
    "positional",
    "attention",
    "masks",
    "layers",
    "encoder",
    "decoder",
    "models",
    "decoding",
    "tasks",
    "training",
]
LATER = [
    "moe",
    "lora",
    "quantization",
    "inside",
    "surgery",
    "bert",
    "pretraining",
    "vit",
    "speech",
    "chat",
    "alignment",
    "evidence",
    "ctc",
    "bart",
    "wav2vec2",
    "codec",
    "viola",
    "flash",
    "flash_triton",
    "clip",
    "speculative",
    "arithmetic",
    "evaluation",
    "reasoning",
    "latent",
    "streaming",
    "hf",
    "export",
    "recipes",
    "exercises",
    "viz",
]


def _imports(path: Path) -> set[str]:
    """The transformer_lib modules a file imports (relative imports resolved), by top-level name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import moe, lora
                found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transformer_lib."):
            found.add(node.module.split(".")[1])
    return found


def _graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path) & set(modules) for name, path in modules.items()}


def test_no_module_of_chapters_1_to_11_imports_a_later_chapters_module():
    graph = _graph()
    upward = {m: sorted(graph[m] & set(LATER)) for m in CORE if m in graph and graph[m] & set(LATER)}
    assert not upward, f"2017 modules importing later chapters' modules: {upward}"


def test_no_import_cycle():
    graph = _graph()

    def reach(start):
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        return seen

    cycles = sorted(m for m in graph if m in reach(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_the_reader_sees_relative_imports():
    """The test above can fail: it finds the imports a module really has."""
    assert {"layers", "attention", "config"} <= _graph()["encoder"]
    assert "layers" in _graph()["moe"]


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_importing_the_package_loads_neither_the_figures_nor_the_checkers():
    """`import transformer_lib` stays light: viz (with matplotlib's pyplot) and exercises load on first use."""
    import subprocess
    import sys

    code = (
        "import sys, transformer_lib as tl\n"
        "print(sorted(m for m in ('transformer_lib.viz', 'transformer_lib.exercises', 'matplotlib.pyplot') "
        "if m in sys.modules))\n"
        "tl.exercises.CORRECT, tl.NotYetDone\n"
        "print('transformer_lib.exercises' in sys.modules, 'transformer_lib.viz' in sys.modules)\n"
        "tl.plot_mask\n"
        "print('transformer_lib.viz' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:3] == ["[]", "True False", "True"]


def test_the_root_names_are_the_modules_own_lists():
    import importlib

    import transformer_lib as tl

    for module in tl._ROOT:
        names = importlib.import_module(f"transformer_lib.{module}").__all__
        assert set(names) <= set(tl.__all__), module
        assert all(getattr(tl, n) is getattr(importlib.import_module(f"transformer_lib.{module}"), n) for n in names)
    assert len(tl.__all__) == len(set(tl.__all__)), "a name exported by two modules"
