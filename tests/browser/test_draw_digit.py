"""The draw-a-digit playground answers in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/draw_digit.py recorded PyTorch's answers on fixed drawings (expected.json's "draw_digit"), each
an 8 x 8 grid of counts 0..16: the examples the page can load (the first held-out digit of each class and the first
one the model gets wrong), a 7 drawn with whole and half cells, a single dot, the full grid and the empty grid. For
each: the ten probabilities and the class token's attention in every layer and head. These tests give the page the
same drawings, from its examples, from the keyboard alone, by clicking the grid and with the pen on the canvas, and
require the same probabilities and weights; a free stroke on the canvas must be answered as PyTorch answers the counts
the page reads from it. The empty drawing must get a message, not an answer. They also hold the page's prose to the
recorded answers. What all playgrounds share (labels, model size, int8, a broken model file) is tested for this page
too, in test_playground.py.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

import transformer_lib as tl
from transformer_lib.export import with_attention

from .checks import network_problems
from .conftest import ROOT
from .test_playground import _agreement, _open, built_entry, unlabelled_controls

pytestmark = pytest.mark.browser
KEY = "draw_digit"
PROBABILITY = 5e-5  # as the fill-in-the-blank page: the softmax of the same logits, in the page and in PyTorch
WEIGHT = 1e-5  # as the masks and fill-in-the-blank pages' weights
EMPTY = "The drawing is empty, so there is nothing to read"
SCALE = 8  # screen pixels per canvas pixel (the canvas is 256 x 256 for 32 x 32 pixels)


@pytest.fixture(scope="module")
def expected() -> dict:
    return built_entry(KEY, "expected.json")


@pytest.fixture(scope="module")
def info() -> dict:
    return built_entry(KEY, "models/meta.json")


def _flat(pixels: list[list[int]]) -> str:
    """Counts (8, 8) as the page keeps them in data-pixels: row by row, joined by commas."""
    return ",".join(str(v) for row in pixels for v in row)


def _answered(page, pixels: str) -> str:
    """Wait until the page has answered the drawing whose counts are `pixels` and has nothing left to read; return
    its status line (written with the answer)."""
    page.wait_for_function(
        """px => document.querySelector('#draw-probs').dataset.pixels === px
            && document.querySelector('#draw-playground').dataset.busy === 'false'""",
        arg=pixels,
        timeout=60_000,
    )
    return page.text_content("#draw-status")


def _idle(page) -> None:
    """Wait until the page has read its drawing as it is now (answered it, or refused it)."""
    page.wait_for_function("() => document.querySelector('#draw-playground').dataset.busy === 'false'", timeout=60_000)


def _shown_probabilities(page) -> list[float]:
    rows = page.eval_on_selector_all("#draw-probs tbody tr", "rows => rows.map(r => [+r.dataset.digit, +r.dataset.p])")
    assert [d for d, _ in rows] == list(range(10)), rows
    return [p for _, p in rows]


def _shown_attention(page) -> tuple[list[float], float]:
    """The attention table as shown: the 16 patches' exact weights (row by row) and the class token's own."""
    weights = page.eval_on_selector_all("#draw-attention td[data-w]", "tds => tds.map(t => Number(t.dataset.w))")
    return weights, float(page.get_attribute("#draw-attention", "data-self"))


def _status_start(case: dict) -> str:
    inked = sum(v > 0 for row in case["pixels"] for v in row)
    p = case["probs"]
    return f"{inked} of 64 cells hold ink. The model reads {case['digit']} with probability {p[case['digit']]:.3f}; "


def _assert_answer(page, info: dict, name: str, case: dict, status: str) -> bool:
    """The page's answer on `case`: PyTorch's probabilities (5e-5), the likeliest marked, and for every layer and head,
    and the mean of the heads, PyTorch's attention from the class token (1e-5). Returns whether the likeliest digit
    is PyTorch's (the rest is only checked when it is, as on the other pages; _agreement counts)."""
    shown = _shown_probabilities(page)
    if max(range(10), key=shown.__getitem__) != case["digit"]:
        return False
    assert status.startswith(_status_start(case)), (name, status)
    worst = max(abs(a - b) for a, b in zip(shown, case["probs"]))
    assert worst <= PROBABILITY, f"{name}: the probabilities differ from PyTorch's by {worst:.1e}"
    texts = page.eval_on_selector_all("#draw-probs tbody td:nth-child(2)", "tds => tds.map(t => t.textContent)")
    assert texts == [f"{p:.4f}" for p in case["probs"]], (name, texts)
    chosen = page.eval_on_selector_all(
        "#draw-probs tbody tr.playground-chosen", "rows => rows.map(r => +r.dataset.digit)"
    )
    assert chosen == [case["digit"]]
    counts = page.eval_on_selector_all("#draw-grid [role=gridcell]", "cells => cells.map(c => +c.dataset.count)")
    assert counts == [v for row in case["pixels"] for v in row], name
    assert page.text_content("#draw-error") == "" and page.get_attribute("#draw-grid", "aria-invalid") == "false"
    for layer in range(info["layers"]):
        page.select_option("#draw-layer", index=layer)  # by index: a value such as "1" also matches the label "1"
        for head in [*range(info["heads"]), "mean"]:
            page.select_option("#draw-head", index=info["heads"] if head == "mean" else head)
            heads = case["attention"][layer]  # (h, 17): the class token's row, itself first
            want = [sum(col) / len(col) for col in zip(*heads)] if head == "mean" else heads[head]
            weights, itself = _shown_attention(page)
            assert len(weights) == 16
            worst = max(abs(a - b) for a, b in zip([itself, *weights], want))
            assert worst <= WEIGHT, f"{name}, layer {layer + 1}, head {head}: weights off by {worst:.1e}"
            assert abs(itself + sum(weights) - 1) < 1e-5  # the class token's row sums to 1
            which = f"the mean of the {info['heads']} heads" if head == "mean" else f"head {head + 1}"
            caption = page.text_content("#draw-attention caption")
            assert caption.startswith(f"Attention from the class token to each patch in layer {layer + 1}, {which}; ")
    page.select_option("#draw-layer", index=info["layers"] - 1)
    page.select_option("#draw-head", index=info["heads"])  # the mean
    return True


def test_the_page_gives_pytorchs_probabilities_and_attention_on_every_example(page, site_url, expected, info, request):
    """The page opens with the example named in defaults.json, answered; then every example the page can load (the
    first held-out digit of each class, and the first one the model gets wrong): PyTorch's probabilities, and in
    every layer and head, and their mean, PyTorch's attention from the class token over the patches."""
    _open(page, site_url, KEY, request)
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert page.input_value("#draw-example") == info["default"] == defaults[KEY]["draw-example"]
    # the page opens on the last layer and the mean of the heads
    assert page.input_value("#draw-layer") == str(info["layers"] - 1) and page.input_value("#draw-head") == "mean"
    agree = 0
    default = expected[info["default"]]
    agree += _assert_answer(page, info, "default", default, _answered(page, _flat(default["pixels"])))
    options = page.eval_on_selector_all("#draw-example option", "os => os.map(o => [o.value, o.textContent])")
    assert [v for v, _ in options] == list(info["examples"])
    for value, text in options:
        example, case = info["examples"][value], expected[value]
        assert example["pixels"] == case["pixels"] and example["label"] == case["label"]
        if value != "misread":
            assert text == f"a held-out {example['label']}", text
        else:  # the model gets it wrong (that it is the first held-out digit it gets wrong: the prose's test)
            assert case["digit"] != case["label"], case
        page.select_option("#draw-example", value)
        page.click("#draw-load")
        agree += _assert_answer(page, info, value, case, _answered(page, _flat(case["pixels"])))
        source = page.text_content("#draw-source")
        assert source.startswith(f"A {example['label']} written by hand, number {example['index'] + 1} of the digits")
    _agreement(request, KEY, agree, 1 + len(options))
    assert not network_problems(page)


def _tab_to(page, test: str, what: str) -> None:
    """Press Tab until the focused element passes `test` (a JavaScript expression over `e`)."""
    for _ in range(120):
        page.keyboard.press("Tab")
        if page.evaluate(f"() => {{ const e = document.activeElement; return Boolean({test}); }}"):
            return
    pytest.fail(f"Tab never reached {what}")


def _focused_cell(page) -> tuple[int, int]:
    return tuple(page.evaluate("() => [+document.activeElement.dataset.row, +document.activeElement.dataset.col]"))


def test_the_keyboard_alone_draws_a_digit_and_gets_the_answer_that_the_mouse_gets(page, site_url, expected, info):
    """Tab reaches Clear and the grid; the arrow keys move between the cells (one of them in the Tab order at a time),
    Space gives a cell half its ink, then all of it, Delete empties it. A 7 drawn so gets PyTorch's answer; the same
    7 clicked into the grid with the mouse gets the same answer. Then Tab reaches the layer and head selectors."""
    case = expected["keyboard"]
    _open(page, site_url, KEY)
    _tab_to(page, "e.id === 'draw-clear'", "the Clear button")
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => document.querySelector('#draw-error').textContent.startsWith({EMPTY!r})")
    _tab_to(page, "e.getAttribute('role') === 'gridcell'", "the grid")
    assert _focused_cell(page) == (0, 0)
    assert page.eval_on_selector_all("#draw-grid [tabindex='0']", "cells => cells.length") == 1
    page.keyboard.press("End")
    assert _focused_cell(page) == (0, 7)
    page.keyboard.press("Space")  # half a cell, then Delete: empty again
    assert page.get_attribute("#draw-cell-0-7", "aria-label") == "Row 1, column 8: ink 8 of 16"
    page.keyboard.press("Delete")
    assert page.get_attribute("#draw-cell-0-7", "aria-label") == "Row 1, column 8: ink 0 of 16"
    page.keyboard.press("Control+Home")
    at = (0, 0)
    for r, row in enumerate(case["pixels"]):
        for c, count in enumerate(row):
            if count == 0:
                continue
            while at != (r, c):  # down first, then across
                key = (
                    "ArrowDown" if at[0] < r else "ArrowUp" if at[0] > r else "ArrowRight" if at[1] < c else "ArrowLeft"
                )
                page.keyboard.press(key)
                at = _focused_cell(page)
            for _ in range(count // 8):  # none -> half (8) -> full (16)
                page.keyboard.press("Space" if (r + c) % 2 else "Enter")
            assert (
                page.get_attribute(f"#draw-cell-{r}-{c}", "aria-label")
                == f"Row {r + 1}, column {c + 1}: ink {count} of 16"
            )
    assert page.get_attribute("#draw-cell-0-0", "tabindex") == "-1"  # the roving cell is the last one visited
    assert page.eval_on_selector_all("#draw-grid [tabindex='0']", "cells => cells.length") == 1
    status = _answered(page, _flat(case["pixels"]))
    assert _assert_answer(page, info, "keyboard", case, status)
    assert page.get_attribute("#draw-status", "aria-live") == "polite"
    by_keyboard = _shown_probabilities(page)

    page.click("#draw-clear")  # the same 7 with the mouse, clicking the grid's cells
    page.wait_for_function(f"() => document.querySelector('#draw-error').textContent.startsWith({EMPTY!r})")
    for r, row in enumerate(case["pixels"]):
        for c, count in enumerate(row):
            for _ in range(count // 8):
                page.click(f"#draw-cell-{r}-{c}")
    status = _answered(page, _flat(case["pixels"]))
    assert _assert_answer(page, info, "mouse", case, status)
    assert _shown_probabilities(page) == by_keyboard

    _tab_to(page, "e.id === 'draw-layer'", "the layer selector")
    page.keyboard.press("ArrowUp")  # from the last layer to the one before it
    assert page.input_value("#draw-layer") == str(info["layers"] - 2)
    _tab_to(page, "e.id === 'draw-head'", "the head selector")
    page.keyboard.press("Home")  # the first head
    assert page.input_value("#draw-head") == "0"
    weights, itself = _shown_attention(page)
    want = case["attention"][info["layers"] - 2][0]
    assert max(abs(a - b) for a, b in zip([itself, *weights], want)) <= WEIGHT
    unlabelled = unlabelled_controls(page)
    assert not unlabelled, unlabelled
    assert page.get_attribute("#draw-grid", "role") == "grid"
    assert page.get_attribute("#draw-canvas", "aria-hidden") == "true"  # the grid is its accessible twin
    assert not page.console_errors, page.console_errors


def _canvas_box(page) -> dict:
    """Where the canvas's pixels start on the screen (inside its border), and its screen pixels per canvas pixel;
    the canvas is scrolled into the middle of the window first, so that the mouse reaches all of it."""
    return page.eval_on_selector(
        "#draw-canvas",
        """c => { c.scrollIntoView({block: 'center'}); const b = c.getBoundingClientRect();
            return {x: b.x + c.clientLeft, y: b.y + c.clientTop, scale: c.clientWidth / 32}; }""",
    )


def _pen(page, points: list[tuple[float, float]]) -> None:
    """One stroke with the mouse through `points`, in canvas pixels (0 to 32)."""
    box = _canvas_box(page)
    assert box["scale"] == SCALE  # on a wide screen the canvas is shown at its own size, each pixel a sharp square
    xy = [(box["x"] + x * box["scale"], box["y"] + y * box["scale"]) for x, y in points]
    page.mouse.move(*xy[0])
    page.mouse.down()
    for x, y in xy[1:]:
        page.mouse.move(x, y, steps=12)
    page.mouse.up()


def _cover(page) -> None:
    """Strokes across the whole canvas, two pixels apart: the pen (three pixels wide) reaches every pixel."""
    for y in range(1, 32, 2):
        _pen(page, [(0.1, y), (31.9, y)])


def _canvas_counts(page) -> list[int]:
    """The canvas as drawn: each pixel read at its centre (ink is dark), counted per 4 x 4 block, row by row."""
    return page.eval_on_selector(
        "#draw-canvas",
        """(c, s) => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const out = new Array(64).fill(0);
            for (let y = 0; y < 32; y++) for (let x = 0; x < 32; x++) {
                const i = ((y * s + s / 2) * c.width + (x * s + s / 2)) * 4;
                if (d[i] < 128) out[Math.floor(y / 4) * 8 + Math.floor(x / 4)] += 1; }
            return out; }""",
        SCALE,
    )


def test_a_stroke_on_the_canvas_is_answered_as_pytorch_answers_the_counts_the_page_reads(page, site_url, info):
    """A 1 drawn with the mouse on the canvas: the grid's counts are the canvas's inked pixels counted per 4 x 4 block,
    and the page's probabilities and attention are PyTorch's on those counts divided by 16."""
    _open(page, site_url, KEY)
    page.click("#draw-clear")
    _pen(page, [(13, 6), (17, 2), (17, 30)])  # a 1: a short up-stroke, then straight down the middle
    _idle(page)
    pixels = page.get_attribute("#draw-grid", "data-pixels")
    status = _answered(page, pixels)
    counts = [int(v) for v in pixels.split(",")]
    assert counts == _canvas_counts(page), "the grid's counts are not the canvas's pixels counted per block"
    assert 0 < sum(counts) < 64 * 16 and all(0 <= v <= 16 for v in counts)
    model, _ = tl.load_checkpoint("digits_vit")
    model.eval()
    image = torch.tensor(counts, dtype=torch.float32).reshape(1, 1, 8, 8) / 16
    with torch.no_grad():
        logits, attention = with_attention(model)(image)  # (1, 10), (L, h, 17, 17)
    probs = logits[0].double().softmax(-1)
    case = {"pixels": [counts[r * 8 : r * 8 + 8] for r in range(8)], "digit": int(probs.argmax()),
            "probs": probs.tolist(), "attention": attention[:, :, 0].tolist()}  # fmt: skip
    assert case["digit"] == 1, f"a straight stroke down the middle is not read as a 1: {status}"
    assert _assert_answer(page, info, "stroke", case, status)
    assert not page.console_errors, page.console_errors


def test_an_empty_drawing_gets_a_message_and_the_model_is_not_run(page, site_url, expected, info):
    """Clear, or the eraser over the whole canvas, leaves nothing to read: the page's alert says so, the grid is marked
    invalid, the last answer goes, and the model is not run. One dot afterwards is answered as PyTorch answers it; the
    pen over the whole canvas gives the full grid, answered as PyTorch answers it."""
    _open(page, site_url, KEY)
    _answered(page, _flat(expected[info["default"]]["pixels"]))
    runs = page.get_attribute("#draw-playground", "data-runs")

    def refused(cleared: bool) -> None:
        page.wait_for_function(f"() => document.querySelector('#draw-error').textContent.startsWith({EMPTY!r})")
        _idle(page)
        assert page.get_attribute("#draw-error", "role") == "alert"
        assert page.get_attribute("#draw-grid", "aria-invalid") == "true"
        for answer in ("#draw-probs tbody", "#draw-attention", "#draw-attention-note", "#draw-status"):
            assert page.text_content(answer) == "", f"{answer}: the previous answer stayed next to the message"
        if cleared:  # Clear empties the drawing at once; the eraser runs the model until the last pixel goes
            assert page.get_attribute("#draw-playground", "data-runs") == runs, "the model ran on an empty drawing"
        assert page.get_attribute("#draw-grid", "data-pixels") == _flat(expected["empty"]["pixels"])

    page.click("#draw-clear")
    refused(cleared=True)
    page.select_option("#draw-layer", index=0)  # the selectors still work, with nothing to draw
    assert page.text_content("#draw-attention") == ""
    page.select_option("#draw-layer", index=info["layers"] - 1)
    for _ in range(2):  # one full cell: row 4, column 4
        page.click("#draw-cell-3-3")
    dot = expected["dot"]
    assert _assert_answer(page, info, "dot", dot, _answered(page, _flat(dot["pixels"])))
    assert page.get_attribute("#draw-cell-3-3", "aria-label") == "Row 4, column 4: ink 16 of 16"
    page.check("#draw-erase")
    _cover(page)
    refused(cleared=False)
    page.uncheck("#draw-erase")
    _cover(page)
    full = expected["full"]
    assert _assert_answer(page, info, "full", full, _answered(page, _flat(full["pixels"])))
    assert not page.console_errors, page.console_errors


def _prose(name: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / f"{name}.md").read_text(encoding="utf-8"))


def test_the_prose_quotes_the_recorded_answers(expected, info):
    """Each number and claim of the page's introduction, its advice on drawing and its "What to try", recomputed from
    expected.json, meta.json, the checkpoint and scikit-learn's digits; and the playgrounds' index."""
    text = _prose("draw_digit")
    model, record = tl.load_checkpoint("digits_vit")
    cfg = model.config
    train, train_labels, held_out, labels = tl.vit.digits_data()
    accuracy = record["evals"][-1]["test accuracy"]
    right = round(accuracy * len(held_out))
    assert abs(right / len(held_out) - accuracy) < 1e-9
    weights = sum(p.numel() for p in model.parameters())
    assert f"{weights:,} weights in all" in text
    assert f"It learned from {len(train):,} of scikit-learn's {len(train) + len(held_out):,} handwritten digits" in text
    assert f"on the {len(held_out)} it never saw, it names the right digit for {right} ({100 * accuracy:.1f}%)" in text
    assert (cfg.num_layers, cfg.num_heads, cfg.d_model) == (2, 4, 64)
    assert "two encoder layers with four heads each, vectors of 64 numbers" in text
    assert (model.image_size, model.patch_size, model.num_patches) == (8, 2, 16)
    images = torch.cat([train, held_out])[:, 0]  # (1797, 8, 8)
    assert bool(((images[:, 0] > 0).any(1) & (images[:, 7] > 0).any(1)).all())
    assert f"In all {len(images):,} digits the ink reaches the grid's top row and its bottom row" in text
    edges = float(images[:, :, [0, 7]].mean()) / float(images.mean())
    assert edges < 0.05, "the first and last columns stay almost empty"

    default = expected[info["default"]]
    p = default["probs"]
    assert default["digit"] == default["label"] == int(info["default"])
    assert (
        f"**The digit the page opens with** is a held-out {default['label']}, one the model never saw in training; "
        f"it reads {default['digit']} with {p[default['digit']]:.3f}." in text
    )
    nine = expected["9"]
    second = sorted(range(10), key=lambda d: -nine["probs"][d])[1]
    assert nine["digit"] == 9 and second == 7 and nine["probs"][7] > (1 - nine["probs"][9]) / 2  # "most of the rest"
    assert f"The 9 is read as 9 with {nine['probs'][9]:.3f} only, and 7 gets most of the rest " in text
    assert f"({nine['probs'][7]:.3f})" in text
    wrong = expected["misread"]
    with torch.no_grad():
        read = model.eval()(held_out).argmax(-1)
    first_wrong = int((read != labels).nonzero()[0, 0])
    assert info["examples"]["misread"]["index"] == first_wrong
    said = f"a {wrong['label']} that it reads as {wrong['digit']} with {wrong['probs'][wrong['digit']]:.3f}"
    assert (wrong["label"], wrong["digit"]) == (9, 3) and said in text  # the prose describes this 9's tail
    empty = expected["empty"]
    assert empty["refused"] and f"this one would say {empty['digit']} with {empty['probs'][empty['digit']]:.3f}" in text
    dot = expected["dot"]
    assert dot["pixels"][3][3] == 16 and sum(map(sum, dot["pixels"])) == 16
    assert f"A single full cell, in row 4 and column 4, is read as {dot['digit']} with {max(dot['probs']):.3f}" in text
    full = expected["full"]
    first, second = sorted(range(10), key=lambda d: -full["probs"][d])[:2]
    assert (
        f"the model says {first} with {full['probs'][first]:.3f}, and {second} with {full['probs'][second]:.3f}" in text
    )
    all_labels = torch.cat([train_labels, labels])
    ink = [float(images[all_labels == d].sum((1, 2)).mean()) for d in range(10)]
    assert sorted(range(10), key=lambda d: -ink[d])[:2] == [first, second]  # "the two digits that carry the most ink"
    layer2 = [sum(col) / len(col) for col in zip(*empty["attention"][1])][1:]  # layer 2, mean of the heads, patches
    top = sorted(range(16), key=lambda k: -layer2[k])[:2]
    assert top == [5, 6], "the two middle patches of the second row: (row 2, column 2) and (row 2, column 3)"
    assert f"it still gives {layer2[5]:.2f} and {layer2[6]:.2f} to the two middle patches of the second row" in text
    assert f"about {info['bytes'] / 1e6:.2f} MB" in text
    index = _prose("index")
    pages = len([p for p in (ROOT / "book" / "playground").glob("*.md") if p.stem != "index"])
    words = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
    assert f"These {words[pages]} pages let you choose." in index  # every page the index counts
    trial = info["int8"]
    assert (
        trial["shipped"] == "fp32"
        and f"the ViT's probabilities in their second decimal on some of its {trial['inputs']} images" in index
    )
