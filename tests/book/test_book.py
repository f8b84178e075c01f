"""The book's frame: config, toc, bibliography and the two commands."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _config():
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def test_config_has_what_the_book_needs():
    cfg = _config()
    assert cfg["only_build_toc_files"] is True
    assert cfg["repository"]["branch"] == "main" and cfg["repository"]["url"].startswith("https://")
    assert cfg["launch_buttons"]["colab_url"] and cfg["launch_buttons"]["binderhub_url"]
    assert cfg["launch_buttons"].get("thebe") is False
    assert cfg["bibtex_bibfiles"] == ["references.bib"]
    exts = set(cfg["parse"]["myst_enable_extensions"])
    assert {"amsmath", "dollarmath", "colon_fence", "deflist", "substitution"} <= exts
    assert "sphinx-mathjax-offline" in cfg["sphinx"]["extra_extensions"]


def test_repository_url_is_written_once():
    url = _config()["repository"]["url"]
    holders = []
    for path in ROOT.rglob("*"):
        if any(part in (".venv", "_build", ".git", "node_modules") for part in path.parts) or not path.is_file():
            continue
        if path.suffix in (".py", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".ipynb", ".md"):
            if url in path.read_text(errors="ignore") and path.name != "_config.yml":
                holders.append(str(path.relative_to(ROOT)))
    # notebooks carry the URL only inside the generated setup cell, which a test compares to the config;
    # colab/ holds generated copies of those notebooks, which another test compares to their source
    assert all(h.startswith(("notebooks/", "colab/")) for h in holders), f"the repository URL is repeated in {holders}"


def test_every_cited_key_is_in_the_bibliography():
    bib = (ROOT / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    cited = set()
    for path in list((ROOT / "book").glob("*.md")) + list((ROOT / "notebooks").glob("*.ipynb")):
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", path.read_text()):
            cited |= {k.strip() for k in group.split(",")}
    assert cited, "the book cites nothing"
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"
    for needed in (
        "vaswani2017attention",
        "devlin2019bert",
        "baevski2020wav2vec",
        "dosovitskiy2021image",
        "radford2019language",
        "lewis2020bart",
        "radford2023robust",
        "he2016deep",
        "ba2016layer",
    ):
        assert needed in keys


def test_constraints_pin_torch_and_jupyter_book_1():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split("\n") if "==" in line)
    assert pins["torch"] == "2.13.0"
    assert pins["jupyter-book"].startswith("1.")


def test_ci_script_runs_make_test():
    run = (ROOT / ".ci" / "run").read_text()
    assert "make test" in run and "set -e" in run
