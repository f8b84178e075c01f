"""Small fixes to the built website, loaded by _config.yml (sphinx.local_extensions).

- sphinx-thebe injects its configuration script twice, which throws "Identifier 'THEBE_JS_URL'
  has already been declared" on every page. Thebe is off in this book (launch buttons cover live
  use), so its scripts are dropped from every page.
- Colab and a plain JupyterLab cannot render MyST, so a notebook page's Colab and Binder buttons
  open the plain copy of the notebook in colab/ (written by tools/plain_notebooks.py from the same
  source) instead of notebooks/.
- docutils writes the bibliography as a `role="list"` whose entries carry `role="doc-biblioentry"`,
  a role ARIA has deprecated, and which leaves the list without list items. axe-core reports both
  (aria-deprecated-role, aria-required-children), so each entry becomes a `listitem`.
- The playgrounds' built files (the runtime from npm, the ONNX models, meta.json, expected.json),
  which tools/build_playground.py writes to _build/playground, are copied into the site's
  _static/playground/, next to the pages' own JavaScript from book/_static/playground/. Without
  them the playground pages say that they could not start; the Makefile says why, loudly.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def _is_thebe(script) -> bool:
    attributes = getattr(script, "attributes", {}) or {}
    text = f"{getattr(script, 'filename', '') or ''} {attributes.get('body', '')}"
    return "thebe" in text.lower()


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts:
        context["script_files"] = [s for s in scripts if not _is_thebe(s)]


def _colab_opens_the_plain_copy(app, pagename, templatename, context, doctree) -> None:
    def visit(node):
        if isinstance(node, dict):
            url = node.get("url")
            if isinstance(url, str) and "colab.research.google.com" in url and "/notebooks/" in url:
                node["url"] = url.replace("/notebooks/", "/colab/", 1)
            elif isinstance(url, str) and "mybinder.org" in url and "tree/notebooks/" in url:
                node["url"] = url.replace("tree/notebooks/", "tree/colab/", 1)  # JupyterLab on Binder
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(context.get("header_buttons", []))


def _bibliography_entries_are_list_items(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if isinstance(body, str) and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def _copy_playground(app, exception) -> None:
    built = Path(app.srcdir) / "_build" / "playground"
    if exception is None and app.builder.format == "html" and (built / "models" / "meta.json").is_file():
        site = Path(app.outdir) / "_static" / "playground"  # also holds the pages' own JavaScript: kept
        for folder in (f for f in built.iterdir() if f.is_dir()):  # models/, vendor/: replaced whole, so that a
            shutil.rmtree(site / folder.name, ignore_errors=True)  # file the build no longer writes is not served
        shutil.copytree(built, site, dirs_exist_ok=True)


def setup(app):
    app.connect("build-finished", _copy_playground)
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.connect("html-page-context", _colab_opens_the_plain_copy, priority=900)
    app.connect("html-page-context", _bibliography_entries_are_list_items, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
