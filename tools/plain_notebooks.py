"""Write the chapter notebooks as Colab and GitHub show them best: no MyST syntax, same content.

    python tools/plain_notebooks.py          # check: exit 1 and list copies that are missing or stale
    python tools/plain_notebooks.py --write  # (re)write colab/*.ipynb from notebooks/*.ipynb

The website renders MyST (admonitions, dropdowns, numbered references, citations); Colab and GitHub
show it as raw text. The copies in colab/ carry the same cells and outputs, with:

- quiz answers (dropdown admonitions) as HTML <details>, collapsed until clicked;
- other admonitions (the pitfalls boxes) as block quotes with a bold title;
- each figure's caption in a markdown cell under it, numbered, and {numref} as "Figure N";
- {cite:p} and {cite:t} as author-year text from references.bib (read with pybtex);
- a glossary as a list of bold terms with their definitions, and {term} as the term in italics;
- solution cells in Colab's form view (hidden until opened), as JupyterLab hides them already.

The notebooks in notebooks/ stay the one source; a test checks that the copies are current.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import pybtex.database
import pybtex.plugin

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "colab"
ADMONITION = re.compile(
    r"```\{admonition\}[ \t]*(?P<title>[^\n]*)\n"  # the directive and its title
    r"(?P<options>(?::[a-z]+:[^\n]*\n)*)\n?"  # its options, such as :class: dropdown
    r"(?P<body>.*?)\n```",
    re.S,
)
GLOSSARY = re.compile(r"```\{glossary\}[ \t]*\n(?P<body>.*?)\n```", re.S)
TARGET = re.compile(r"^\((?P<label>[\w-]+)\)=[ \t]*$", re.M)
ROLE = re.compile(r"\{(?P<role>[a-z]+(?::[a-z]+)?)\}`(?P<target>[^`]+)`")


def bibliography(path: Path = ROOT / "references.bib") -> dict[str, tuple[str, str]]:
    """key -> (authors as cited, year), e.g. 'vaswani2017attention' -> ('Vaswani et al.', '2017')."""
    entries = {}
    text = pybtex.plugin.find_plugin("pybtex.backends", "text")()  # once: each lookup scans every installed package
    for key, entry in pybtex.database.parse_file(path).entries.items():
        authors, year = entry.persons.get("author"), entry.fields.get("year")
        if not (authors and year):
            continue
        # the surname with its "von" part, LaTeX accents as letters: M{\"u}ller -> Müller
        last = [" ".join(n.render(text) for n in p.rich_prelast_names + p.rich_last_names) for p in authors]
        cited = last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2 else f"{last[0]} et al."
        entries[key] = (cited, year)
    return entries


def _figures(nb) -> dict[str, int]:
    """Figure name -> its number in this notebook, in order of appearance."""
    names = [
        c.metadata["mystnb"]["figure"]["name"]
        for c in nb.cells
        if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})
    ]
    return {name: i + 1 for i, name in enumerate(names)}


def _admonition(match: re.Match) -> str:
    title = match["title"].strip() or "Note"
    body = match["body"].strip("\n")
    if ":class: dropdown" in match["options"]:
        return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"
    quoted = "\n".join(f"> {line}" if line else ">" for line in body.split("\n"))
    return f"> **{title}**\n>\n{quoted}"


def _glossary(match: re.Match) -> str:
    """A glossary's entries (a term on its own line, its definition indented below) as a list of bold terms."""
    items = []
    for entry in re.split(r"\n\s*\n", match["body"].strip("\n")):
        term, *definition = entry.strip("\n").split("\n")
        items.append(f"- **{term.strip()}**: " + " ".join(line.strip() for line in definition))
    return "\n".join(items)


def _page(path: str) -> Path:
    """The source file of a {doc} target, written relative to notebooks/ (``10_language_model``,
    ``../book/conventions``)."""
    base = (ROOT / "notebooks" / path).resolve()
    for suffix in (".ipynb", ".md"):
        if base.with_suffix(suffix).is_file():
            return base.with_suffix(suffix)
    raise ValueError(f"{{doc}} to {path!r}: no notebook or page of that name")


def page_title(path: str) -> str:
    """A page's own title, its first heading: what a reader of the Colab copy sees as the link."""
    page = _page(path)
    if page.suffix == ".ipynb":
        cells = nbformat.read(page, as_version=4).cells
        text = "\n".join("".join(c.source) for c in cells if c.cell_type == "markdown")
    else:
        text = page.read_text()
    heading = re.search(r"^#\s+(.+)$", text, flags=re.M)
    if heading is None:
        raise ValueError(f"{page} has no heading to name it by")
    return heading[1].strip()


def page_url(path: str) -> str:
    """The page's address on the book's website (``html.baseurl`` in _config.yml)."""
    config = (ROOT / "_config.yml").read_text()
    base = re.search(r"^\s*baseurl:\s*(\S+)", config, flags=re.M)[1].rstrip("/")
    return f"{base}/{_page(path).relative_to(ROOT).with_suffix('.html').as_posix()}"


def plain_markdown(text: str, figures: dict[str, int], bib: dict[str, tuple[str, str]]) -> str:
    """One markdown cell without MyST syntax."""
    text = ADMONITION.sub(_admonition, text)
    text = GLOSSARY.sub(_glossary, text)

    def role(match: re.Match) -> str:
        kind, target = match["role"], match["target"]
        if kind == "numref":
            if target not in figures:
                raise ValueError(f"{{numref}} to {target!r}, which is not a figure of this notebook")
            return f"Figure {figures[target]}"
        if kind in ("cite:p", "cite:t"):
            keys = [k.strip() for k in target.split(",")]
            missing = [k for k in keys if k not in bib]
            if missing:
                raise ValueError(f"citation keys not in references.bib: {missing}")
            if kind == "cite:t":
                return "; ".join(f"{bib[k][0]} ({bib[k][1]})" for k in keys)
            return "(" + "; ".join(f"{bib[k][0]}, {bib[k][1]}" for k in keys) + ")"
        if kind == "doc":  # {doc}`name` or {doc}`text <path/name>`: a link to the page on the website
            link = re.fullmatch(r"(?P<text>.+?)\s*<(?P<path>[^>]+)>", target)
            path = link["path"] if link else target
            return f"[{link['text'] if link else page_title(path)}]({page_url(path)})"
        if kind == "ref":  # {ref}`text <label>`: a link to the anchor the label's line becomes, below
            link = re.fullmatch(r"(?P<text>.+?)\s*<(?P<label>[\w-]+)>", target)
            if link is None:
                raise ValueError(f"write {{ref}} with its text, `text <label>`, got {target!r}")
            return f"[{link['text']}](#{link['label']})"
        if kind == "term":  # {term}`word` or {term}`text <word>`: the text, in italics
            link = re.fullmatch(r"(?P<text>.+?)\s*<(?P<term>[^>]+)>", target)
            return f"*{link['text'] if link else target}*"
        raise ValueError(f"no plain form for the role {{{kind}}}")

    text = TARGET.sub(lambda m: f'<a id="{m["label"]}"></a>', text)  # a MyST target line (label)= -> an anchor
    return ROLE.sub(role, text)


def plain_notebook(nb, bib: dict[str, tuple[str, str]]):
    """A converted copy of one notebook (the argument is left unchanged)."""
    nb = nbformat.from_dict(nb)  # a deep copy
    figures = _figures(nb)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = plain_markdown(cell.source, figures, bib)
        cells.append(cell)
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            cell.metadata["cellView"] = "form"  # Colab: show the title, hide the code until opened
            if not cell.source.startswith("#@title"):
                cell.source = "#@title Solution (double-click to show the code)\n" + cell.source
        figure = cell.metadata.get("mystnb", {}).get("figure") if cell.cell_type == "code" else None
        if figure:
            caption = nbformat.v4.new_markdown_cell(f"*Figure {figures[figure['name']]}. {figure['caption']}*")
            caption.id = f"{cell.id}-caption"[:64]
            cells.append(caption)
    nb.cells = cells
    return nb


def expected(path: Path, bib: dict[str, tuple[str, str]]) -> str:
    """The exact text the copy of notebook `path` must have."""
    return nbformat.writes(plain_notebook(nbformat.read(path, as_version=4), bib)) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the copies instead of checking them")
    args = parser.parse_args()
    bib = bibliography()
    stale = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        target = OUT / path.name
        text = expected(path, bib)
        if args.write:
            OUT.mkdir(exist_ok=True)
            target.write_text(text)
        elif not target.is_file() or target.read_text() != text:
            stale.append(target.relative_to(ROOT).as_posix())
    if stale:
        print("stale or missing copies (run python tools/plain_notebooks.py --write):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
