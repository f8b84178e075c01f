"""Fixtures for the browser tests: a local server over _build/html and a headless Chromium.

The tests drive Debian's Chromium through Playwright (launched with `executable_path`); they never
download a browser. With no browser on the machine they are skipped with a loud message, except
under CI=true, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from chromium import HEADLESS_ARGS, browser_path  # tools/chromium.py (pytest's pythonpath has tools/)
from static_server import serve

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "test-artifacts"


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests must run in CI)")
    pytest.skip(f"BROWSER TESTS SKIPPED: {reason}")


@pytest.fixture(scope="session")
def site_url():
    if not (SITE / "index.html").is_file():
        _missing(f"no built site at {SITE}; run `make book` first")
    with serve(SITE) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def browser():
    path = browser_path()
    if path is None:
        _missing("no Chromium found (looked for /usr/bin/chromium; set CHROMIUM_PATH or `apt-get install chromium`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=HEADLESS_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, site_url):
    """A page with the network closed: any request that is not to the local server is aborted and recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.external_requests = []
    pg.failed_requests = []
    pg.console_errors = []

    def route(r):
        if r.request.url.startswith(site_url) or r.request.url.startswith("data:"):
            r.continue_()
        else:
            pg.external_requests.append(r.request.url)
            r.abort()

    pg.route("**/*", route)
    pg.in_flight = set()  # requests sent and not yet finished or failed (settle() waits for none)
    pg.on("request", lambda req: pg.in_flight.add(req))
    pg.on("requestfinished", lambda req: pg.in_flight.discard(req))
    pg.on("requestfailed", lambda req: pg.in_flight.discard(req))
    pg.on("requestfailed", lambda req: pg.failed_requests.append(req.url))
    pg.on("console", lambda msg: pg.console_errors.append(msg.text) if msg.type == "error" else None)
    pg.on("pageerror", lambda err: pg.console_errors.append(str(err)))
    yield pg
    context.close()


_SETTLED = """async () => {
    if (document.readyState !== "complete") await new Promise(r => addEventListener("load", r, {once: true}));
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));  // laid out: fonts requested
    await document.fonts.ready;
    return true;
}"""


# What Playwright says when a navigation replaces the document that page.evaluate runs in
_NAVIGATED = ("context was destroyed", "Cannot find context with specified id")


def settle(page, timeout_s: float = 60.0) -> None:
    """Wait until the page is loaded, typeset, its fonts are in and no request is in flight.

    Playwright's "networkidle" waits for half a second of silence after the last request, on every
    page; this waits for the events themselves, so a settled page costs no idle time. A page that
    navigates meanwhile (a redirect, or several) is waited for in turn, up to `timeout_s`. A request
    still open after `timeout_s` fails the test and is named.
    """
    deadline = time.monotonic() + timeout_s
    while True:  # a page that redirects (index.html) destroys the context the wait runs in: wait on the next one
        try:
            page.evaluate(_SETTLED)
            break
        except Exception as error:  # playwright's Error: "Execution context was destroyed" by a navigation
            if not any(words in str(error) for words in _NAVIGATED) or time.monotonic() > deadline:
                raise
            # The load state may still be the old document's when the error arrives, so this can return at once;
            # the short pause and the loop (not a fixed number of tries) cover that race and chains of redirects.
            page.wait_for_load_state("load")
            page.wait_for_timeout(20)
    while page.in_flight:
        if time.monotonic() > deadline:
            pytest.fail(f"{page.url}: requests still open after {timeout_s:.0f} s: {[r.url for r in page.in_flight]}")
        page.wait_for_timeout(20)


def pytest_terminal_summary(terminalreporter, config):
    weights = getattr(config, "page_weights", None)
    if weights:
        terminalreporter.section("page weight: HTML plus its images (limit 2 MB per page)")
        for path, size in sorted(weights.items()):
            terminalreporter.write_line(f"{size / 1e6:6.2f} MB  {path}")
    times = getattr(config, "playground_times", None)
    if times:
        import json

        meta = json.loads((SITE / "_static" / "playground" / "models" / "meta.json").read_text())
        terminalreporter.section("playgrounds: files fetched, load and first-answer times (headless Chromium)")
        terminalreporter.write_line(f"{meta['runtime_bytes'] / 1e6:6.2f} MB  onnxruntime-web (once per visit)")
        for key, t in sorted(times.items()):
            terminalreporter.write_line(
                f"{meta[key]['bytes'] / 1e6:6.2f} MB  {key}: loaded in {t['load_ms']} ms, "
                f"first answer in {t['first_answer_ms']} ms"
            )
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "playground-times.json").write_text(json.dumps(times, indent=1))
    agreement = getattr(config, "playground_agreement", None)
    if agreement:
        import json

        meta = json.loads((SITE / "_static" / "playground" / "models" / "meta.json").read_text())
        terminalreporter.section(
            "playgrounds: answers that agree with PyTorch fp32 (in the page; in the build's trial)"
        )
        for key, (agree, total) in sorted(agreement.items()):
            trial = meta[key]["int8"]
            terminalreporter.write_line(
                f"{key}: {agree} of {total} in the page, {meta[key]['file']} ({meta[key]['bytes'] / 1e6:.2f} MB); "
                f"int8 {trial['agree']} of {trial['inputs']} in the build, {trial['shipped']} shipped "
                f"(int8 {trial['int8_bytes'] / 1e6:.2f} MB, fp32 {trial['fp32_bytes'] / 1e6:.2f} MB)"
            )
    skipped = terminalreporter.stats.get("skipped", [])
    if any("BROWSER TESTS SKIPPED" in str(r.longrepr) for r in skipped):
        terminalreporter.section("BROWSER TESTS SKIPPED", sep="!", red=True, bold=True)
        terminalreporter.write_line("The website was not tested in a browser. Install Chromium to run them:")
        terminalreporter.write_line("    sudo apt-get install chromium     (Debian/Ubuntu)")
