"""The copies in colab/ read well where MyST is not rendered (Colab, GitHub) and match their source."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import plain_notebooks

ROOT = Path(__file__).resolve().parents[2]

SOURCES = sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [p.name for p in SOURCES]
BIB = plain_notebooks.bibliography()
MYST = re.compile(r"```\{|\{[a-z]+(?::[a-z]+)?\}`|^:class:|^\([\w-]+\)=", re.M)  # directives, roles, options, targets


def _markdown(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_copy_is_current(path):
    copy = plain_notebooks.OUT / path.name
    assert copy.is_file(), f"colab/{path.name} is missing: run python tools/plain_notebooks.py --write"
    assert copy.read_text() == plain_notebooks.expected(path, BIB), (
        f"colab/{path.name} is stale: run python tools/plain_notebooks.py --write"
    )


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_no_myst_syntax_is_left_and_answers_are_collapsed(path):
    source = nbformat.read(path, as_version=4)
    copy = nbformat.read(plain_notebooks.OUT / path.name, as_version=4)
    for text in _markdown(copy):
        assert not MYST.search(text), f"colab/{path.name}: MyST syntax left in {text[:120]!r}"
    answers = sum(t.count("{admonition} Answer") for t in _markdown(source))
    assert answers >= 3 and "\n".join(_markdown(copy)).count("<summary>Answer</summary>") == answers
    dollars = [t.count("$") for t in _markdown(source)]
    kept = sum(t.count("$") for t in _markdown(copy) if not t.startswith("*Figure "))  # captions are new cells
    assert sum(dollars) == kept, "math must survive the conversion"
    figures = [c for c in source.cells if "figure" in c.metadata.get("mystnb", {})]
    captions = [t for t in _markdown(copy) if t.startswith("*Figure ")]
    assert len(captions) == len(figures), "every figure needs its caption under it"
    solutions = [c for c in copy.cells if "solution" in c.metadata.get("tags", [])]
    assert solutions and all(c.metadata.get("cellView") == "form" and c.source.startswith("#@title") for c in solutions)


def test_conversion_of_each_construct():
    figures, bib = {"fig-a": 1, "fig-b": 2}, {"k1": ("Vaswani et al.", "2017"), "k2": ("Ba et al.", "2016")}
    text = (
        "See {numref}`fig-b` and {cite:p}`k1,k2`; {cite:t}`k1` said so.\n\n"
        "```{admonition} Answer\n:class: dropdown\n\nYes, $x^2$.\n```\n\n"
        "```{admonition} Pitfalls\n:class: warning\n\n- one\n- two\n```"
    )
    plain = plain_notebooks.plain_markdown(text, figures, bib)
    assert "See Figure 2 and (Vaswani et al., 2017; Ba et al., 2016); Vaswani et al. (2017) said so." in plain
    assert "<details>\n<summary>Answer</summary>\n\nYes, $x^2$.\n\n</details>" in plain
    assert "> **Pitfalls**\n>\n> - one\n> - two" in plain
    with pytest.raises(ValueError, match="not a figure"):
        plain_notebooks.plain_markdown("{numref}`fig-z`", figures, bib)
    with pytest.raises(ValueError, match="not in references.bib"):
        plain_notebooks.plain_markdown("{cite:p}`nobody2020`", figures, bib)
    with pytest.raises(ValueError, match="no plain form"):
        plain_notebooks.plain_markdown("{eq}`one`", figures, bib)
    linked = plain_notebooks.plain_markdown("(sec-a)=\n## A\n\nSee {ref}`the norm <sec-a>`.", figures, bib)
    assert linked == '<a id="sec-a"></a>\n## A\n\nSee [the norm](#sec-a).'
    with pytest.raises(ValueError, match="text <label>"):
        plain_notebooks.plain_markdown("{ref}`sec-a`", figures, bib)
    terms = "A {term}`head` and {term}`Heads <head>`.\n\n"
    terms += "```{glossary}\nhead\n  One part\n  of a layer.\n\nstream\n  A sum.\n```"
    glossary = plain_notebooks.plain_markdown(terms, figures, bib)
    assert glossary == "A *head* and *Heads*.\n\n- **head**: One part of a layer.\n- **stream**: A sum."


def test_a_page_reference_becomes_a_link_titled_as_the_page():
    """{doc} names another chapter or page: the copy links it on the website, by its title, never by file name."""
    site = "https://transformers-built-and-seen.github.io/transformers-built-and-seen"
    plain = plain_notebooks.plain_markdown("the model of {doc}`10_language_model`.", {}, {})
    assert plain == f"the model of [A language model on Shakespeare]({site}/notebooks/10_language_model.html)."
    plain = plain_notebooks.plain_markdown("see {doc}`the page <../book/conventions>`", {}, {})
    assert plain == f"see [the page]({site}/book/conventions.html)"
    with pytest.raises(ValueError, match="no notebook or page"):
        plain_notebooks.plain_markdown("{doc}`99_nothing`", {}, {})


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_no_copy_names_a_chapter_by_its_file(path):
    """'the model of 10 language model' was what a bare page name read like."""
    copy = ROOT / "colab" / path.name
    text = "".join("".join(c.source) for c in nbformat.read(copy, as_version=4).cells if c.cell_type == "markdown")
    names = [p.stem.replace("_", " ") for p in SOURCES]
    assert not [n for n in names if re.search(rf"(?<![/\w]){re.escape(n)}(?![\w.])", text)]


def test_the_bibliography_is_read_with_accents_and_et_al():
    assert BIB["vaswani2017attention"] == ("Vaswani et al.", "2017")
    assert BIB["press2017using"] == ("Press and Wolf", "2017")
    assert BIB["muller2019does"][0] == "Müller et al."
