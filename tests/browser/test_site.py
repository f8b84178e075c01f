"""The built website as a reader sees it, in headless Chromium with the network closed."""

from __future__ import annotations

import shutil
import urllib.parse
from pathlib import Path

import pytest

from static_server import serve

from .checks import (
    heading_problems,
    image_problems,
    link_problems,
    math_problems,
    network_problems,
    repository_url,
    toc_pages,
)
from .conftest import ARTIFACTS, SITE, settle

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.browser
PAGES = toc_pages()
_LINK_CACHE: dict = {}


def _open(page, site_url, path):
    response = page.goto(f"{site_url}/{path}", wait_until="load")
    assert response is not None and response.status == 200, f"{path} did not load"
    settle(page)
    return page


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_cleanly(page, site_url, path):
    _open(page, site_url, path)
    problems = math_problems(page) + image_problems(page) + heading_problems(page)
    problems += link_problems(page, site_url, _LINK_CACHE) + network_problems(page)
    assert not problems, f"{path}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", [p for p in PAGES if p.startswith("notebooks/")])
def test_notebook_page_has_a_colab_link_to_its_notebook_on_main(page, site_url, path):
    _open(page, site_url, path)
    owner_repo = urllib.parse.urlparse(repository_url()).path.strip("/")
    plain_copy = path.replace("notebooks/", "colab/", 1).replace(".html", ".ipynb")  # tools/plain_notebooks.py
    expected = f"https://colab.research.google.com/github/{owner_repo}/blob/main/{plain_copy}"
    links = page.eval_on_selector_all("a[href*='colab.research.google.com']", "els => els.map(e => e.href)")
    assert expected in links, f"{path}: expected a Colab link {expected}, found {links}"
    assert (ROOT / plain_copy).is_file(), f"the Colab link opens {plain_copy}, which the repository lacks"
    binder = page.eval_on_selector_all("a[href*='mybinder.org']", "els => els.map(e => e.href)")
    assert any(f"urlpath=tree/{plain_copy}" in link for link in binder), f"{path}: Binder links {binder}"


def test_search_finds_positional_encoding(page, site_url):
    _open(page, site_url, "search.html?q=positional+encoding")
    page.wait_for_selector("ul.search li", timeout=20000)
    results = page.eval_on_selector_all("ul.search li a", "els => els.map(e => e.textContent)")
    assert any("Positional encoding" in r for r in results), f"search results: {results}"


def test_every_page_weighs_under_2_mb(site_url, request):
    weights = {}
    for path in PAGES:
        html = SITE / path
        weights[path] = html.stat().st_size + sum(
            (SITE / path).parent.joinpath(img).stat().st_size
            for img in set(__import__("re").findall(r'<img[^>]+src="([^"]+)"', html.read_text()))
            if (SITE / path).parent.joinpath(img).is_file()
        )
    request.config.page_weights = weights  # printed in the terminal summary (conftest.py)
    heavy = {p: s for p, s in weights.items() if s > 2_000_000}
    assert not heavy, f"pages over 2 MB: {heavy}"


def test_no_page_shows_a_code_cell_that_holds_only_a_comment():
    """Read from the built pages: every code cell's text, and none that is comments alone (a placeholder)."""
    import html as entities
    import re

    cells = re.compile(r'<div class="cell_input[^"]*"[^>]*>.*?<pre>(.*?)</pre>', re.S)
    stray = {}
    for path in PAGES:
        for code in cells.findall((SITE / path).read_text()):
            lines = [line.strip() for line in entities.unescape(re.sub(r"<[^>]+>", "", code)).splitlines()]
            if all(line.startswith("#") for line in lines if line) and any(lines):
                stray.setdefault(path, []).append(" ".join(lines)[:80])
    assert not stray, f"code cells that hold only a comment: {stray}"


def test_screenshots_of_home_and_a_notebook(page, site_url):
    ARTIFACTS.mkdir(exist_ok=True)
    for name, path in (("home", "index.html"), ("notebook", "notebooks/03_positional_encoding.html")):
        _open(page, site_url, path)
        page.screenshot(path=str(ARTIFACTS / f"screenshot-{name}.png"))
        assert (ARTIFACTS / f"screenshot-{name}.png").stat().st_size > 20_000


def test_settle_waits_for_the_page_at_the_end_of_a_chain_of_redirects(browser, tmp_path):
    """settle() once failed with "Execution context was destroyed" on index.html, which redirects: it tried three
    times. Here five pages each navigate away while settle waits on them (their typesetting never finishes), so
    every wait's context is destroyed; settle must follow them to the last page and return there, settled."""
    hold = "<script>window.MathJax = {startup: {promise: new Promise(() => {})}};"  # settle waits on this forever
    for i in range(5):
        go = f"addEventListener('load', () => setTimeout(() => location.replace('{i + 1}.html'), 200));</script>"
        (tmp_path / f"{i}.html").write_text(f"<h1>{i}</h1>{hold}{go}")
    (tmp_path / "5.html").write_text("<h1>five</h1>")
    with serve(tmp_path) as base:
        context = browser.new_context()
        pg = context.new_page()
        pg.in_flight = set()  # as the page fixture keeps it
        pg.goto(f"{base}/0.html", wait_until="load")
        settle(pg, timeout_s=30)
        assert pg.url == f"{base}/5.html" and pg.text_content("h1") == "five"
        context.close()


def test_checks_catch_a_broken_image_and_a_broken_link(browser, site_url, tmp_path):
    """The checks above must be able to fail: serve a page with a missing image and a dead link."""
    (tmp_path / "ok.html").write_text("<h1>ok</h1>")
    (tmp_path / "broken.html").write_text(
        '<main><h1>t</h1><img src="missing.png" alt="a picture"><img src="ok.png" alt="">'
        '<a href="nowhere.html">dead</a><a href="ok.html#nope">bad anchor</a></main>'
    )
    shutil.copy(next(SITE.joinpath("_images").glob("*.png")), tmp_path / "ok.png")
    with serve(tmp_path) as base:
        context = browser.new_context()
        pg = context.new_page()
        pg.goto(f"{base}/broken.html", wait_until="load")
        images = image_problems(pg)
        links = link_problems(pg, base, {})
        context.close()
    assert any("missing.png" in p for p in images), images
    assert any("without alt text: ok.png" in p for p in images), images
    assert any("nowhere.html" in p for p in links) and any("#nope" in p for p in links), links
