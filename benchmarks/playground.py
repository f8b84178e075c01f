"""Print how much faster the language-model playground writes with its KV cache than without. Not a test.

    python benchmarks/playground.py [--repeats 3]

Serves the built site (_build/html, from `make book`) on 127.0.0.1, opens the language-model page
in headless Chromium (Playwright driving the system's Chromium, as the browser tests do) twice:
as it is, with the cache (the prompt fed once, then one character per call), and with ?cache=0,
which feeds the whole text with an empty past at every step, as the page did before it kept a
cache. Both write the same greedy text (temperature 0) from the same prompt. The model has 128
positions, so the longest text is an 8-character prompt and 120 new characters (not 200).

Times are medians over the repeats, run alternately: "model" is the time inside session.run,
"writing" the whole loop as the reader waits for it, painting each character included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "tools"))

from chromium import HEADLESS_ARGS, browser_path  # noqa: E402  (tools/, as the browser tests import them)
from static_server import serve  # noqa: E402

PAGE = "book/playground/language_model.html"
ANSWERED = "() => window.playgroundTimings?.shakespeare_char?.first_answer_ms !== undefined"


def _open(browser, base_url: str, query: str):
    """The page, with the model loaded and its own first answer written (that run warms the runtime up)."""
    page = browser.new_context().new_page()
    page.goto(f"{base_url}/{PAGE}{query}", wait_until="load")
    page.wait_for_function(ANSWERED, timeout=120_000)
    return page


def _write(page, prompt: str, n: int) -> dict:
    """Write n characters greedily after `prompt`; -> the page's record of the run, with the text."""
    page.fill("#lm-prompt", prompt)
    page.fill("#lm-length", str(n))
    page.eval_on_selector("#lm-temperature", "e => { e.value = '0'; e.dispatchEvent(new Event('input')); }")
    page.eval_on_selector("#lm-status", "e => { e.textContent = ''; }")
    page.click("#lm-generate")
    page.wait_for_function("() => document.getElementById('lm-status').textContent !== ''", timeout=300_000)
    status = page.text_content("#lm-status")
    if not status.startswith("Done"):
        raise SystemExit(f"the page did not finish writing: {status}")
    run = page.evaluate("() => window.playgroundTimings.shakespeare_char.last_run")
    return {**run, "text": page.text_content("#lm-generated")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    built = SITE / "_static" / "playground"
    if not (built / "expected.json").is_file():
        print(f"no playground in {SITE}: run `make book` first (it needs npm)", file=sys.stderr)
        return 1
    path = browser_path()
    if path is None:
        print("no Chromium found (set CHROMIUM_PATH or `apt-get install chromium`)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    case = json.loads((built / "expected.json").read_text())["shakespeare_char"]["longest"]
    prompt, n = case["prompt"], case["new"]
    meta = json.loads((built / "models" / "meta.json").read_text())["shakespeare_char"]
    runs: dict[str, list[dict]] = {"with the cache": [], "without (?cache=0)": []}
    with serve(SITE) as base_url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=HEADLESS_ARGS)
        pages = {
            "with the cache": _open(browser, base_url, ""),
            "without (?cache=0)": _open(browser, base_url, "?cache=0"),
        }
        for _ in range(args.repeats):
            for name, page in pages.items():  # alternately, so that drift hits both alike
                runs[name].append(_write(page, prompt, n))
        browser.close()

    print(
        f"Language-model playground ({meta['file']}, {meta['bytes'] / 1e6:.2f} MB) in headless Chromium, wasm, 1 thread"
    )
    print(
        f"{len(prompt)}-character prompt {prompt!r} and {n} new characters at temperature 0: the longest text the "
        f"model writes ({meta['max_len']} positions; 200 characters would not fit). Medians of {args.repeats} runs."
    )
    print(f"{'':22} {'model (session.run)':>20} {'writing (the loop)':>20}  tokens fed per step")
    median = {}
    for name, rs in runs.items():
        median[name] = (statistics.median(r["run_ms"] for r in rs), statistics.median(r["total_ms"] for r in rs))
        fed = rs[0]["fed"]
        shown = f"{fed[0]}, then {fed[1]}" if len(set(fed[1:])) == 1 else f"{fed[0]}, {fed[1]}, ..., {fed[-1]}"
        print(f"{name:22} {median[name][0]:17.0f} ms {median[name][1]:17.0f} ms  {shown}")
    (cached_run, cached_total), (plain_run, plain_total) = median.values()
    speed = (plain_run / cached_run, plain_total / cached_total)
    print(f"speed-up with the cache: {speed[0]:.1f}x in the model, {speed[1]:.1f}x in writing")
    texts = {r["text"] for rs in runs.values() for r in rs}
    same = len(texts) == 1
    print(f"texts identical (with and without the cache, every run): {'yes' if same else 'NO'}")
    print(f"text equals PyTorch's greedy text (expected.json): {'yes' if texts == {case['text']} else 'NO'}")
    return 0 if same and texts == {case["text"]} else 1


if __name__ == "__main__":
    sys.exit(main())
