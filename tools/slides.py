"""Write one reveal.js slide deck per chapter notebook, with its figures, that works offline.

    python tools/slides.py                      # every chapter: _build/slides/NN_name.slides.html, index.html
    python tools/slides.py --out /tmp/s 04 08   # only the chapters whose file names start with 04 and 08

Each deck is the chapter notebook with its stored outputs, exported by nbconvert's slides exporter:

- the markdown is the plain form of the Colab copies (tools/plain_notebooks.py), so no MyST shows;
- the setup cell (tag `nbval-skip`), solution cells and solution dropdowns are dropped, like in the
  student edition; widget outputs (no kernel in a slide) and checker outputs are dropped;
- a `#` or `##` heading starts a new slide, a `###` heading a sub-slide (reveal.js's vertical step),
  and a section taller than one screen goes on over sub-slides, cut between cells; a figure stays
  with the code that draws it and with its caption, and its alt text comes from the notebook;
- reveal.js (npm, pinned by package-lock.json) and MathJax 3 (the copy that the sphinx-mathjax-offline
  package ships for the website) are copied next to the decks: nothing is fetched from a CDN.
  nbconvert's template also loads require.js, jQuery and mermaid from CDNs; the template below
  drops them (nothing here needs them) and starts reveal.js and MathJax with plain script tags.
"""

from __future__ import annotations

import argparse
import html
import importlib.metadata
import re
import shutil
import struct
import sys
from base64 import b64decode
from pathlib import Path

import nbformat
from jinja2 import DictLoader
from nbconvert.exporters import SlidesExporter
from traitlets.config import Config

import plain_notebooks
import student_edition

ROOT = Path(__file__).resolve().parent.parent
REVEAL = ROOT / "node_modules" / "reveal.js" / "dist"
# MathJax 3, as the website has it: the copy that the sphinx-mathjax-offline package ships
MATHJAX = Path(importlib.metadata.distribution("sphinx-mathjax-offline").locate_file("sphinx-mathjax-offline"))
MATHJAX = MATHJAX / "static" / "mathjax"
DROPPED_TAGS = {"nbval-skip", "solution", "remove-cell"}
SOLUTION_DETAILS = re.compile(r"<details>\s*<summary>\s*Solution.*?</details>\n?", re.S)
HEADING = re.compile(r"(<a id=[^\n]*\n)?(?P<hashes>#{1,6}) ")
TITLE = re.compile(r"(> )?\*\*[^*\n]+\*\*|[^\n]*:")
NBVAL = re.compile(r"^# NBVAL_[A-Z_]+\n(# why:[^\n]*\n)?")  # nbval's marker and its reason: not for a slide
WIDGET = "application/vnd.jupyter.widget-view+json"
# the chapters' line on where the hidden solutions are: a deck has no "Show code cell source" button
SHOW_SOLUTION = re.compile(
    r"On the website, click \*Show code\s+cell source\*.*?double-click\s+the solution's title\.", re.S
)
WHERE_SOLUTIONS = (
    "The solutions are not on the slides. They are on the chapter's page of the website, under each "
    "exercise, and in the instructor's copy of the assignment (`course/source/`, from `make assignment`)."
)
WIDTH, HEIGHT = 1280, 800  # the slide's size in CSS pixels; reveal.js scales it to the screen
# What a slide holds, measured on the rendered decks, to cut a long section between cells:
TEXT_LINE, TEXT_WIDTH, CODE_LINE = 28, 105, 21  # px of a line of text, its characters; px of a line of code
ROOM = HEIGHT - 80  # px of a slide that content may fill
FIGURE_MAX = 440  # px: the tallest a figure is drawn (TEMPLATE's CSS), so that its code and caption fit beside it

# nbconvert's reveal template, without its CDN scripts (require.js, jQuery, mermaid, the widget
# manager) and with MathJax 3 from a local copy instead of MathJax 2 from cdnjs.
TEMPLATE = """{%- extends 'index.html.j2' -%}
{% block html_head_js %}{% endblock html_head_js %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block html_head_js_mathjax %}
<script>
window.MathJax = {
  tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
        processEscapes: true, processEnvironments: true},
  chtml: {fontURL: "mathjax/output/chtml/fonts/woff-v2"},
  options: {ignoreHtmlClass: "tex2jax_ignore|jp-OutputArea"}
};
</script>
<script defer src="{{ resources.mathjax_url }}"></script>
{% endblock html_head_js_mathjax %}
{% block html_head_css %}
<link rel="icon" href="data:,">
<style>
.reveal .slides section { text-align: left; }
.reveal .slides > section > section { height: 100%; overflow-y: auto; }
.reveal .slides h1, .reveal .slides h2, .reveal .slides h3 { text-transform: none; }
.reveal .slides .jp-RenderedImage img { max-height: 440px; width: auto; } /* FIGURE_MAX */
.reveal .slides blockquote { width: auto; margin: 0.5em 0; padding: 0.2em 0.8em; font-style: normal; }
:root { --jp-content-font-size1: 22px; --jp-code-font-size: 18px; --jp-cell-prompt-width: 0px; }
.jp-InputPrompt, .jp-OutputPrompt { display: none; }
</style>
{% endblock html_head_css %}
{% block data_png scoped %}
<div class="jp-RenderedImage jp-OutputArea-output">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
     alt="{{ cell.metadata.get('mystnb', {}).get('image', {}).get('alt', '') | escape_html }}">
</div>
{% endblock data_png %}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script>
Reveal.initialize({
  controls: true, progress: true, hash: true, center: false,
  navigationMode: "linear",  // the arrow keys (and a clicker) visit every slide, sub-slides too
  slideNumber: "{{ resources.reveal.number }}", transition: "{{ resources.reveal.transition }}",
  width: {{ resources.reveal.width }}, height: {{ resources.reveal.height }}
});
</script>
{% endblock footer_js %}
"""

INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Transformers, built and seen: slides</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 44em; margin: 2em auto; padding: 0 1em; line-height: 1.5; }}
li {{ margin: 0.3em 0; }}
</style>
</head>
<body>
<main>
<h1>Transformers, built and seen: slides</h1>
<p>One deck per chapter, made from the chapter's notebook with its stored outputs (tools/slides.py).
Arrow keys or Space step through a deck; Esc shows the overview. Nothing here needs the internet.</p>
<ul>
{items}
</ul>
</main>
</body>
</html>
"""


def _png_height(data: str) -> int:
    """The height in pixels of a base64 PNG (read from its IHDR chunk)."""
    return struct.unpack(">I", b64decode(data[:64])[20:24])[0]


def _text_height(text: str) -> int:
    """About how many pixels a piece of markdown takes on a slide."""
    height = 0
    for line in text.split("\n"):
        if line.startswith("#"):
            height += 2 * TEXT_LINE
        elif line.strip():
            height += TEXT_LINE * -(-len(line) // TEXT_WIDTH)  # wrapped lines, rounded up
        else:
            height += TEXT_LINE // 2  # a paragraph's margin
    return height


def _height(cell) -> int:
    """About how many pixels `cell` takes on a slide: enough to decide where a long section is cut."""
    if cell.cell_type == "markdown":
        return _text_height(cell.source)
    height = CODE_LINE * (cell.source.count("\n") + 1) + 2 * CODE_LINE  # and the box around it
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data:
            height += min(FIGURE_MAX, _png_height(data["image/png"])) + CODE_LINE
        elif "text/html" in data:
            height += HEIGHT  # an animation (a slider figure): a sub-slide of its own
        elif out.get("output_type") == "stream":
            height += CODE_LINE * (out["text"].count("\n") + 1)
        elif "text/plain" in data:
            height += CODE_LINE * (data["text/plain"].count("\n") + 1)
    return height


def _heading(text: str) -> int:
    """The level of the heading that `text` opens with (after an anchor line), or 0."""
    match = HEADING.match(text)
    return len(match["hashes"]) if match else 0


def _blocks(text: str) -> list[tuple[str, str]]:
    """Markdown cut at its blank lines (in a block quote too), never inside code, <details> or $$ math.

    Each block comes with the separator that stood before it ("" or ">"), to join them back unchanged."""
    blocks, lines, sep, fence, details, math = [], [], "", False, 0, False
    for line in text.split("\n"):
        stripped = line.strip()
        if not (fence or details or math) and stripped in ("", ">"):
            if lines:
                blocks.append((sep, "\n".join(lines)))
                lines = []
            sep = stripped
            continue
        lines.append(line)
        if stripped.lstrip("> ").startswith("```"):
            fence = not fence
        elif not fence:
            details += stripped.count("<details") - stripped.count("</details>")
            math ^= stripped.count("$$") % 2 == 1
    if lines:
        blocks.append((sep, "\n".join(lines)))
    return blocks


def _split(cell) -> list:
    """A markdown cell as one or more cells: cut before each heading, and where it would overflow a slide."""
    chunks: list[list[tuple[str, str]]] = []
    height = 0
    for sep, block in _blocks(cell.source):
        block_height = _text_height(block)
        if not chunks or _heading(block) or height + block_height > ROOM:
            carried = []
            if chunks and len(chunks[-1]) > 1 and TITLE.fullmatch(chunks[-1][-1][1]) and not _heading(block):
                carried = [chunks[-1].pop()]  # a box's title goes with what follows it
            chunks.append(carried)
            height = sum(_text_height(b) for _, b in carried)
        chunks[-1].append((sep, block))
        height += block_height
    texts = []
    for chunk in chunks:
        text = chunk[0][1]
        for sep, block in chunk[1:]:
            text += ("\n>\n" if sep == ">" else "\n\n") + block
        texts.append(text)
    cells = []
    for i, text in enumerate(texts):
        part = nbformat.from_dict(cell)
        part.source = text
        if i:
            part.id = f"{cell.id[:58]}-{i}"
        cells.append(part)
    return cells


def slide_notebook(nb, bib: dict[str, tuple[str, str]]):
    """A copy of chapter notebook `nb` ready for the slides exporter: plain markdown, slide types set."""
    nb = nbformat.from_dict(nb)
    nb.metadata.pop("widgets", None)  # widget state: there is no kernel behind a slide
    kept = []
    for cell in nb.cells:
        if DROPPED_TAGS & set(cell.metadata.get("tags", [])):
            continue
        if cell.cell_type == "markdown":
            cell.source = student_edition.SOLUTION_DROPDOWN.sub("", cell.source)
        kept.append(cell)
    nb.cells = kept
    nb = plain_notebooks.plain_notebook(nb, bib)

    cells, used = [], 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = SHOW_SOLUTION.sub(WHERE_SOLUTIONS, SOLUTION_DETAILS.sub("", cell.source))
            parts = _split(cell) if cell.source.strip() else []
        else:
            tags = set(cell.metadata.get("tags", []))
            outputs = [o for o in cell.outputs if WIDGET not in o.get("data", {})]
            cell.outputs = [] if tags & {"remove-output", "checker"} else outputs
            cell.source = NBVAL.sub("", cell.source)
            parts = [cell]
        for part in parts:
            height = _height(part)
            is_caption = part.get("id", "").endswith("-caption")  # plain_notebooks puts it under its figure
            level = _heading(part.source) if part.cell_type == "markdown" else 0
            if level in (1, 2):
                kind = "slide"
            elif level == 3 or (used and used + height > ROOM and not is_caption):
                kind = "subslide"
            else:
                kind = "-"
            used = height if kind != "-" else used + height
            part.metadata["slideshow"] = {"slide_type": kind}
            cells.append(part)
    nb.cells = cells
    return nb


def exporter() -> SlidesExporter:
    """nbconvert's slides exporter, pointed at the local reveal.js and MathJax."""
    c = Config()
    c.SlidesExporter.reveal_url_prefix = "reveal.js"
    c.SlidesExporter.reveal_theme = "white"  # its fonts ship with reveal.js (simple.css imports Google Fonts)
    c.SlidesExporter.reveal_transition = "slide"
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_width = str(WIDTH)
    c.SlidesExporter.reveal_height = str(HEIGHT)
    c.SlidesExporter.mathjax_url = "mathjax/tex-chtml-full.js"
    for trait in ("require_js_url", "jquery_url", "mermaid_js_url", "mermaid_layout_elk_js_url"):
        setattr(c.SlidesExporter, trait, "")  # not used by TEMPLATE; empty, so no CDN address is left
    c.SlidesExporter.jupyter_widgets_base_url = ""
    loader = DictLoader({"offline_slides.html.j2": TEMPLATE})
    return SlidesExporter(config=c, extra_loaders=[loader], template_file="offline_slides.html.j2")


def copy_assets(out: Path) -> None:
    """Copy what the decks load (reveal.js with its white theme, MathJax 3 with its fonts) into `out`."""
    if not (REVEAL / "reveal.js").is_file():
        raise SystemExit(f"reveal.js not found in {REVEAL}: run `npm ci` (it is pinned in package.json)")
    reveal = out / "reveal.js" / "dist"
    shutil.rmtree(out / "reveal.js", ignore_errors=True)
    (reveal / "theme").mkdir(parents=True)
    for name in ("reveal.js", "reveal.css", "theme/white.css"):
        shutil.copy2(REVEAL / name, reveal / name)
    shutil.copytree(REVEAL / "theme" / "fonts" / "source-sans-pro", reveal / "theme" / "fonts" / "source-sans-pro")
    shutil.copy2(REVEAL.parent / "LICENSE", out / "reveal.js" / "LICENSE")
    mathjax = out / "mathjax"
    shutil.rmtree(mathjax, ignore_errors=True)
    fonts = Path("output") / "chtml" / "fonts" / "woff-v2"
    shutil.copytree(MATHJAX / fonts, mathjax / fonts)
    shutil.copy2(MATHJAX / "tex-chtml-full.js", mathjax / "tex-chtml-full.js")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "slides")
    parser.add_argument("chapters", nargs="*", help="chapter numbers (file name prefixes) to export; all if none")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        paths = [p for p in paths if any(p.name.startswith(c) for c in args.chapters)]
        if not paths:
            raise SystemExit(f"no chapter notebook starts with {args.chapters}")
    args.out.mkdir(parents=True, exist_ok=True)
    copy_assets(args.out)
    bib = plain_notebooks.bibliography()
    slides = exporter()
    items = []
    for path in paths:
        nb = slide_notebook(nbformat.read(path, as_version=4), bib)
        body, _ = slides.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
        target = args.out / f"{path.stem}.slides.html"
        target.write_text(body)
        title = nb.cells[0].source.split("\n")[0].lstrip("# ").strip()
        items.append(f'<li><a href="{target.name}">{path.stem[:2]}. {html.escape(title)}</a></li>')
        print(f"wrote {target}")
    (args.out / "index.html").write_text(INDEX.format(items="\n".join(items)))
    print(f"wrote {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
