"""Print how fast the language-model playground answers and writes, cache or not, beside PyTorch on the CPU. Not a test.

    python benchmarks/playground.py [--repeats 3]

Serves the built site (_build/html, from `make book`) on 127.0.0.1 and opens the language-model page in headless
Chromium (Playwright driving the system's Chromium, as the browser tests do). The page runs onnxruntime-web's wasm
backend (its default; WebGPU is not used) on 1 thread. Two measurements, each beside PyTorch in this process:

1. Time to first answer. `--repeats` fresh page loads, each in a new browser context (nothing cached in memory):
   the runtime and the model load (loadModel), then the page writes its first answer, its own default prompt and
   length (defaults.json) sampled at its default temperature. An init script stamps `performance.now()` (which
   counts from the navigation's start) at the moment the page records its first answer. PyTorch: a fresh
   `tl.load_checkpoint` (its imports done before), then `model.generate` on the same prompt and settings.
2. Writing speed. One page as it is, with the cache (the prompt fed once, then one character per call), and one
   with ?cache=0, which feeds the whole text with an empty past at every step, as the page did before it kept a
   cache; both write the same greedy text (temperature 0). The model has 128 positions, so the longest text is an
   8-character prompt and 120 new characters (not 200). PyTorch: `model.generate(..., temperature=0.0,
   use_cache=True)` and `use_cache=False`, at 1 thread (as the page) and at torch's default thread count.

Times are medians over the repeats, the page's runs alternately with and without the cache: "model" is the time
inside session.run, "writing" the whole loop as the reader waits for it, painting each character included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

import transformer_lib as tl

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "tools"))

from chromium import HEADLESS_ARGS, browser_path  # noqa: E402  (tools/, as the browser tests import them)
from static_server import serve  # noqa: E402

PAGE = "book/playground/language_model.html"
ANSWERED = "() => window.playgroundTimings?.shakespeare_char?.first_answer_ms !== undefined"
# Run before the page's scripts: playground.js keeps `window.playgroundTimings ??= {}`, so it takes this object,
# which stamps performance.now() (milliseconds since the navigation's start) when a model's timings are set (the
# model loaded) and when its first_answer_ms is set (the first answer written). It changes nothing the page does.
STAMPS = """
window.playgroundStamps = {};
window.playgroundTimings = new Proxy({}, {
  set(target, key, value) {
    if (value !== null && typeof value === "object" && !("first_answer_ms" in value)) {
      const stamps = (window.playgroundStamps[key] ??= {});
      stamps.loaded_at ??= performance.now();
      let first;
      Object.defineProperty(value, "first_answer_ms", {
        get: () => first,
        set: (ms) => { first = ms; stamps.answered_at ??= performance.now(); },
        enumerable: true, configurable: true,
      });
    }
    target[key] = value;
    return true;
  },
});
"""


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("median of no values")
    return statistics.median(values)


def per_second(tokens: int, ms: float) -> float:
    """Tokens written in `ms` milliseconds -> tokens per second."""
    if ms <= 0:
        raise ValueError(f"a time must be positive, got {ms} ms")
    return tokens / ms * 1000.0


def fed_summary(fed: Sequence[int]) -> str:
    """The tokens fed at each step -> "8, then 1" (a cache) or "8, 9, ..., 127" (the whole text each step)."""
    if len(fed) < 2:
        return ", ".join(map(str, fed))
    return f"{fed[0]}, then {fed[1]}" if len(set(fed[1:])) == 1 else f"{fed[0]}, {fed[1]}, ..., {fed[-1]}"


def speed_cell(ms: float | None, tokens: int) -> str:
    """One time and its rate, fixed width: "  145 ms  828 tok/s", or blanks with a dash when there is no time."""
    if ms is None:
        return f"{'-':>8}{'':12}"
    return f"{ms:5.0f} ms {per_second(tokens, ms):5.0f} tok/s"


def _fresh_answer(browser, base_url: str) -> dict:
    """A fresh page load in a new browser context, up to its first answer: -> load_ms, first_answer_ms (the page's
    own), loaded_at and answered_at (ms from the navigation's start)."""
    context = browser.new_context()
    context.add_init_script(STAMPS)
    page = context.new_page()
    page.goto(f"{base_url}/{PAGE}", wait_until="load")
    page.wait_for_function(ANSWERED, timeout=120_000)
    record = page.evaluate(
        "() => ({...window.playgroundTimings.shakespeare_char, ...window.playgroundStamps.shakespeare_char})"
    )
    context.close()
    return record


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


def _ms_since(start: float) -> float:
    """Milliseconds since `start`, a time.perf_counter() reading."""
    return (time.perf_counter() - start) * 1000.0


def _torch_first_answer(ids: list[int], n: int, defaults: dict, repeats: int) -> tuple[float, float]:
    """A fresh tl.load_checkpoint, then n new ids sampled as the page's defaults ask (seeded) -> medians in ms of
    (loading, generating)."""
    top_k = defaults["lm-topk"] or None  # the page's 0: off
    top_p = defaults["lm-topp"] if defaults["lm-topp"] < 1 else None  # the page's 1: off
    prompt = torch.tensor([ids])  # (1, T0)
    loads, answers = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        model, _ = tl.load_checkpoint("shakespeare_char")
        loads.append(_ms_since(start))
        rng = torch.Generator().manual_seed(defaults["lm-seed"])
        start = time.perf_counter()
        model.generate(prompt, n, temperature=defaults["lm-temperature"], top_k=top_k, top_p=top_p, rng=rng)
        answers.append(_ms_since(start))
    return median(loads), median(answers)


def _torch_greedy(model, ids: list[int], n: int, use_cache: bool, repeats: int) -> tuple[float, list[int]]:
    """n new ids greedily after `ids` -> (median milliseconds of model.generate, the new ids of the last run)."""
    prompt = torch.tensor([ids])  # (1, T0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = model.generate(prompt, n, temperature=0.0, use_cache=use_cache)  # (1, T0 + n)
        times.append(_ms_since(start))
    return median(times), out[0, len(ids) :].tolist()


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
    defaults = json.loads((built / "defaults.json").read_text())["language_model"]
    meta = json.loads((built / "models" / "meta.json").read_text())["shakespeare_char"]
    encode = {c: i for i, c in enumerate(meta["itos"])}
    runs: dict[str, list[dict]] = {"with the cache": [], "without (?cache=0)": []}
    with serve(SITE) as base_url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=HEADLESS_ARGS)
        fresh = [_fresh_answer(browser, base_url) for _ in range(args.repeats)]
        pages = {
            "with the cache": _open(browser, base_url, ""),
            "without (?cache=0)": _open(browser, base_url, "?cache=0"),
        }
        for _ in range(args.repeats):
            for name, page in pages.items():  # alternately, so that drift hits both alike
                runs[name].append(_write(page, prompt, n))
        browser.close()

    # PyTorch on the CPU, in this process (torch and transformer_lib imported above), after the browser has closed
    threads = torch.get_num_threads()
    counts = [1] if threads == 1 else [1, threads]
    first_ids, first_n = [encode[c] for c in defaults["lm-prompt"]], defaults["lm-length"]
    greedy_ids = [encode[c] for c in prompt]
    model, _ = tl.load_checkpoint("shakespeare_char")
    torch_first, torch_greedy = {}, {}
    for count in counts:
        torch.set_num_threads(count)
        torch_first[count] = _torch_first_answer(first_ids, first_n, defaults, args.repeats)
        for use_cache in (True, False):
            torch_greedy[count, use_cache] = _torch_greedy(model, greedy_ids, n, use_cache, args.repeats)
    torch.set_num_threads(threads)

    def plural(count: int) -> str:
        return f"{count} thread{'s' if count > 1 else ''}"

    print(
        f"Language-model playground ({meta['file']}, {meta['bytes'] / 1e6:.2f} MB) in headless Chromium, beside "
        f"PyTorch {torch.__version__} on the CPU (in this process)."
    )
    print(
        "The page runs onnxruntime-web's wasm backend (the default; WebGPU is not used), with 1 thread. "
        f"Medians of {args.repeats} runs."
    )
    print(
        f"1. Time to first answer: the page's default prompt {defaults['lm-prompt']!r} and {first_n} new characters, "
        f"sampled (temperature {defaults['lm-temperature']}, top-p {defaults['lm-topp']}, seed {defaults['lm-seed']})"
    )
    print(f"{'':36} {'load':>8} {'first answer':>13} {'total':>8}")
    page_row = [median([r[k] for r in fresh]) for k in ("load_ms", "first_answer_ms", "answered_at")]
    print(f"{'page, fresh browser context':36} {page_row[0]:5.0f} ms {page_row[1]:10.0f} ms {page_row[2]:5.0f} ms")
    for count in counts:
        load_ms, answer_ms = torch_first[count]
        name = f"PyTorch, {plural(count)}"
        print(f"{name:36} {load_ms:5.0f} ms {answer_ms:10.0f} ms {load_ms + answer_ms:5.0f} ms")
    print(
        "   page: load = runtime and model (loadModel), first answer = its writing loop, total = from navigation;\n"
        "   PyTorch: load = tl.load_checkpoint, first answer = model.generate (seeded torch.Generator, so its\n"
        "   text is not the page's), total = both, imports done before."
    )
    print(
        f"2. Writing: {len(prompt)}-character prompt {prompt!r} and {n} new characters at temperature 0 (greedy): "
        f"the longest text the model writes ({meta['max_len']} positions; 200 characters would not fit)"
    )
    print(f"{'':36} {'model (session.run)':>20} {'writing (the loop)':>20}  tokens fed per step")
    median_ms = {}
    for name, rs in runs.items():
        median_ms[name] = (median([r["run_ms"] for r in rs]), median([r["total_ms"] for r in rs]))
        label = f"page, {name}"
        print(
            f"{label:36} {speed_cell(median_ms[name][0], n)} {speed_cell(median_ms[name][1], n)}  "
            f"{fed_summary(rs[0]['fed'])}"
        )
    for count in counts:
        for use_cache in (True, False):
            label = f"PyTorch, {plural(count)}, use_cache={use_cache}"
            fed = [len(prompt)] + ([1] * (n - 1) if use_cache else list(range(len(prompt) + 1, len(prompt) + n)))
            print(
                f"{label:36} {speed_cell(None, n)} {speed_cell(torch_greedy[count, use_cache][0], n)}  "
                f"{fed_summary(fed)}"
            )
    print("   PyTorch: model.generate, its whole loop, in the writing column; tok/s = new characters per second.")
    (cached_run, cached_total), (plain_run, plain_total) = median_ms.values()
    torch_speed = ", ".join(
        f"{torch_greedy[c, False][0] / torch_greedy[c, True][0]:.1f}x at {plural(c)}" for c in counts
    )
    print(
        f"speed-up with the cache: {plain_run / cached_run:.1f}x in the model, {plain_total / cached_total:.1f}x in "
        f"writing; PyTorch {torch_speed}"
    )
    texts = {r["text"] for rs in runs.values() for r in rs}
    same = len(texts) == 1
    print(f"texts identical (with and without the cache, every run): {'yes' if same else 'NO'}")
    expected = texts == {case["text"]}
    print(f"text equals PyTorch's greedy text (expected.json): {'yes' if expected else 'NO'}")
    torch_texts = {"".join(meta["itos"][i] for i in ids) for _, ids in torch_greedy.values()}
    agree = torch_texts == texts
    print(
        f"text equals PyTorch's greedy text in this run (every thread count, with and without the cache): "
        f"{'yes' if agree else 'NO'}"
    )
    return 0 if same and expected and agree else 1


if __name__ == "__main__":
    sys.exit(main())
