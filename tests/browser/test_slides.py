"""The chapters' slide decks (tools/slides.py, `make slides`), stepped through with the keyboard in Chromium.

The decks are built here, into a temporary folder, so that the test needs no make target before it.
The folder is served on 127.0.0.1 and every request outside it is refused and recorded: a deck that
wants anything from a CDN fails. The decks need reveal.js from npm (`npm ci`); without it they are
skipped loudly, and under CI=true that is a failure, as for a missing Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import slides  # tools/slides.py
from static_server import serve

from .checks import image_problems
from .conftest import _missing

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """Every chapter's deck and the index page, built by tools/slides.py into a fresh folder, served."""
    if not (slides.REVEAL / "reveal.js").is_file():
        _missing("reveal.js is not installed (node_modules/reveal.js is missing); run `npm ci`")
    out = tmp_path_factory.mktemp("slides")
    assert slides.main(["--out", str(out)]) == 0
    with serve(out) as base_url:
        yield out, base_url


@pytest.fixture
def deck_page(browser, decks):
    """A page that may fetch only from the served folder: anything else is aborted and recorded."""
    _, base_url = decks
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.outside, pg.failed, pg.errors = [], [], []

    def route(r):
        url = r.request.url
        if url.startswith(base_url + "/") or url.startswith("data:"):
            r.continue_()
        else:
            pg.outside.append(url)
            r.abort()

    pg.route("**/*", route)
    pg.on("requestfailed", lambda req: pg.failed.append(req.url))
    pg.on("response", lambda resp: pg.failed.append(f"{resp.status} {resp.url}") if resp.status >= 400 else None)
    pg.on("console", lambda msg: pg.errors.append(msg.text) if msg.type == "error" else None)
    pg.on("pageerror", lambda err: pg.errors.append(str(err)))
    yield pg
    context.close()


def _open(page, base_url: str, name: str) -> None:
    response = page.goto(f"{base_url}/{name}.slides.html", wait_until="load")
    assert response is not None and response.status == 200, f"{name} did not load"
    page.wait_for_function("() => window.Reveal && Reveal.isReady() && window.MathJax && MathJax.startup")
    page.evaluate("() => MathJax.startup.promise")  # every formula typeset


POSITION = """() => ({
    past: Reveal.getSlidePastCount(), total: Reveal.getTotalSlides(), last: Reveal.isLastSlide(),
    progress: Reveal.getProgress(),
    bar: parseFloat(/scaleX\\(([^)]*)\\)/.exec(document.querySelector('.progress span').style.transform)[1]),
    number: document.querySelector('.slide-number').textContent.replace(/\\s+/g, ''),
})"""
RAW = """() => [...document.querySelectorAll('.jp-MarkdownOutput')].map(e => {
    const c = e.cloneNode(true);
    c.querySelectorAll('code, pre, mjx-container').forEach(x => x.remove());
    return c.textContent;
}).filter(t => /\\$[^$\\s][^$]*\\$|\\\\\\(|\\{(admonition|numref|cite)/.test(t))"""


def _problems(page, name: str) -> list[str]:
    out = [f"{name}: request outside the folder: {u}" for u in page.outside]
    out += [f"{name}: failed request: {u}" for u in page.failed]
    out += [f"{name}: console error: {e}" for e in page.errors]
    return out


def test_index_links_every_chapter_deck(deck_page, decks):
    out, base_url = decks
    response = deck_page.goto(f"{base_url}/index.html", wait_until="load")
    assert response is not None and response.status == 200
    links = deck_page.eval_on_selector_all("main a", "els => els.map(e => e.getAttribute('href'))")
    assert links == [f"{c}.slides.html" for c in CHAPTERS]
    assert all((out / link).is_file() for link in links)
    assert not _problems(deck_page, "index.html")


@pytest.mark.parametrize("name", CHAPTERS)
def test_deck_steps_through_offline_with_math_and_figures(deck_page, decks, name):
    _, base_url = decks
    _open(deck_page, base_url, name)
    figures = deck_page.eval_on_selector_all(".jp-RenderedImage img", "els => els.length")
    math = deck_page.eval_on_selector_all("mjx-container", "els => els.length")
    errors = deck_page.eval_on_selector_all("mjx-merror", "els => els.map(e => e.textContent)")
    raw = deck_page.evaluate(RAW)
    assert figures > 0, f"{name}: no figure on any slide"
    assert math > 0 or name.startswith("00"), f"{name}: no typeset math"
    assert not errors, f"{name}: MathJax errors {errors}"
    assert not raw, f"{name}: raw TeX or MyST left on a slide: {[t[:200] for t in raw]}"

    start = deck_page.evaluate(POSITION)
    assert start["past"] == 0 and start["number"] == f"1/{start['total']}" and start["total"] > 5, start
    seen, previous = 1, start
    keys = ["ArrowRight", "Space"]  # a presenter's clicker sends one or the other
    while not previous["last"]:
        deck_page.keyboard.press(keys[seen % 2])
        now = deck_page.evaluate(POSITION)
        assert now["past"] == previous["past"] + 1, f"{name}: {keys[seen % 2]} after slide {seen} gave {now}"
        assert now["number"] == f"{now['past'] + 1}/{now['total']}", now
        assert now["progress"] > previous["progress"] and now["bar"] > previous["bar"], (previous, now)
        seen, previous = seen + 1, now
        assert seen <= start["total"], f"{name}: more key presses than slides"
    assert seen == start["total"], f"{name}: visited {seen} of {start['total']} slides"
    assert previous["bar"] == 1, previous
    current = deck_page.evaluate("() => Reveal.getCurrentSlide().textContent")
    assert re.search(r"\w", current), "the last slide is empty"
    problems = image_problems(deck_page) + _problems(deck_page, name)
    assert not problems, "\n".join(problems)
