"""Take the README's screenshots of the four playgrounds from the built site, in headless Chromium.

    python tools/playground_screenshots.py [--out docs/screenshots]

Needs a site built with its playgrounds (`make book` with npm) and Chromium. Each page is opened
with the network closed, given an input, and photographed once its answer is complete.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from chromium import HEADLESS_ARGS, browser_path
from static_server import serve

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"

# page, the model key the page reports its times under, and the inputs to type before the picture (field, text)
SHOTS = [
    ("numbers", "numbers_to_words", [("#numbers-input", "57913")]),
    ("masks", "masks", []),
    ("language_model", "shakespeare_char", []),
    ("brackets", "bracket_classifier", [("#brackets-text", "[[()]]([])")]),
]
STATUS = {
    "numbers": "numbers-status",
    "masks": "masks-status",
    "language_model": "lm-status",
    "brackets": "brackets-status",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    if not (SITE / "_static" / "playground" / "models" / "meta.json").is_file():
        print("no playground in _build/html: run `make book` with npm installed first", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with serve(SITE) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path(), headless=True, args=HEADLESS_ARGS)
        for name, key, steps in SHOTS:
            page = browser.new_page(viewport={"width": 1000, "height": 900}, device_scale_factor=1)
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.abort())
            page.goto(f"{base}/book/playground/{name}.html", wait_until="load")
            answered = "k => (window.playgroundTimings || {})[k]?.first_answer_ms !== undefined"
            page.wait_for_function(answered, arg=key, timeout=120_000)
            status = STATUS[name]
            for selector, value in steps:
                page.eval_on_selector(f"#{status}", "e => { e.textContent = ''; }")  # the page writes it when done
                page.fill(selector, value)
                page.press(selector, "Enter")
                page.wait_for_function("id => document.getElementById(id).textContent !== ''", arg=status)
            path = args.out / f"playground-{name}.png"
            page.locator(".playground").screenshot(path=str(path))
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e3:.0f} kB")
            page.close()
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
