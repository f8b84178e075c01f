"""The Makefile's help lists every target a reader can run, and the npm guard is written once."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    phony = set()
    for block in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", text, flags=re.M):
        phony |= set(block.replace("\\\n", " ").split())
    return phony


def test_help_lists_every_phony_target():
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    listed = set(re.findall(r"make ([a-z][a-z-]*)", out))
    targets = _targets()
    assert {"book", "test", "check", "grade", "lint-js", "slides"} <= targets  # the reader of the Makefile works
    assert not targets - listed - {"help"}, f"targets missing from make help: {sorted(targets - listed)}"


def test_the_npm_guard_is_written_once():
    text = (ROOT / "Makefile").read_text()
    assert text.count('elif [ "$$CI" = "true" ]') == 1
    assert text.count("\t$(call with_npm,") == 3  # the playgrounds, the JavaScript lint, the slides
