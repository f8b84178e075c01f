"""Page checks shared by the browser tests. Each returns a list of problems (empty = fine)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from setup_cell import repository_url  # noqa: F401  (the one reader of _config.yml's URL)

ROOT = Path(__file__).resolve().parents[2]


def toc_pages() -> list[str]:
    """Every page of the table of contents, as a path under _build/html (e.g. 'book/intro.html')."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def visit(entries):
        for entry in entries:
            files.append(entry["file"])
            visit(entry.get("sections", []))

    for part in toc.get("parts", []):
        visit(part["chapters"])
    return [f"{Path(f).with_suffix('').as_posix()}.html" for f in files]


def image_problems(page) -> list[str]:
    images = page.eval_on_selector_all(
        "img", "els => els.map(e => ({src: e.getAttribute('src'), ok: e.complete && e.naturalWidth > 0, alt: e.alt}))"
    )
    out = [f"image does not load: {i['src']}" for i in images if not i["ok"]]
    out += [f"image without alt text: {i['src']}" for i in images if not (i["alt"] or "").strip()]
    return out


def math_problems(page) -> list[str]:
    total = page.eval_on_selector_all(".math", "els => els.length")
    if not total:
        return []
    try:
        page.wait_for_function(
            "() => [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-container'))", timeout=20000
        )
    except Exception:  # noqa: BLE001 - a timeout means some math stayed raw
        raw = page.eval_on_selector_all(".math", "els => els.filter(e => !e.querySelector('mjx-container')).length")
        return [f"{raw} of {total} math elements were not rendered by MathJax"]
    return []


def heading_problems(page) -> list[str]:
    levels = page.eval_on_selector_all(
        "main h1, main h2, main h3, main h4, main h5, main h6", "els => els.map(e => Number(e.tagName[1]))"
    )
    out = []
    if levels and levels[0] != 1:
        out.append(f"the first heading is h{levels[0]}, not h1")
    for prev, cur in zip(levels, levels[1:]):
        if cur > prev + 1:
            out.append(f"heading level jumps from h{prev} to h{cur}")
    return out


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""


def link_problems(page, base_url: str, cache: dict) -> list[str]:
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    out = []
    for href in sorted(set(hrefs)):
        if not href.startswith(base_url):
            continue
        target, _, fragment = href.partition("#")
        if target.endswith("/"):
            target += "index.html"
        if target not in cache:
            cache[target] = _fetch(target)
        status, body = cache[target]
        if status != 200:
            out.append(f"broken link: {href} (HTTP {status})")
        elif fragment and not re.search(rf'id="{re.escape(fragment)}"', body):
            out.append(f"broken anchor: {href}")
    return out


def network_problems(page) -> list[str]:
    out = [f"request to outside the site: {u}" for u in page.external_requests]
    out += [f"request failed: {u}" for u in page.failed_requests if u not in page.external_requests]
    out += [f"console error: {e}" for e in page.console_errors]
    return out
