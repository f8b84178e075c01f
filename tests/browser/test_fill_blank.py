"""The fill-in-the-blank playground answers in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/fill_blank.py recorded PyTorch's answers on fixed lines (expected.json's "fill_blank"): the
tokens the model reads, the five likeliest words at the blank with their probabilities, and every layer's and head's
attention from the blank. These tests type the same lines into book/playground/fill_blank.html and require the same
tokens, words, probabilities and weights. They also give the page every kind of bad line and require a message that
names the problem, then a good line and require an answer again; they drive it from the keyboard; and they hold the
page's prose to the recorded answers. What all playgrounds share (labels, model size, int8, a broken model file) is
tested for this page too, in test_playground.py.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata

import pytest

import transformer_lib as tl

from .checks import network_problems
from .conftest import ROOT
from .test_playground import _agreement, _open, _status_after, built_entry, refused, tab_to, unlabelled_controls

pytestmark = pytest.mark.browser
KEY = "fill_blank"
PROBABILITY = 5e-5  # as the inside page's lens: the page's softmax of the same logits, onnxruntime-web against PyTorch
WEIGHT = 1e-5  # as the masks page's weights


@pytest.fixture(scope="module")
def expected() -> dict:
    return built_entry(KEY, "expected.json")


@pytest.fixture(scope="module")
def info() -> dict:
    return built_entry(KEY, "models/meta.json")


def _fill(page, text: str) -> str:
    """Type `text` into the line field and press the button; return the status once the page has answered."""
    page.fill("#fill-text", text)
    return _status_after(page, "fill-status", lambda: page.click("#fill-go"))


def _quoted(word: str) -> str:
    """A word as the page's messages quote it: in quotes, or as U+XXXX when it cannot be seen."""
    invisible = len(word) == 1 and unicodedata.category(word)[0] in "CZ"
    return f"U+{ord(word):04X}" if invisible else f"“{word}”"


def _shown_attention(page) -> tuple[list[str], list[float]]:
    """The attention list as shown: (the tokens, their exact weights from data-w)."""
    items = page.eval_on_selector_all(
        "#fill-attention li", "els => els.map(e => [e.dataset.token, Number(e.dataset.w)])"
    )
    return [t for t, _ in items], [w for _, w in items]


def test_the_page_gives_pytorchs_tokens_words_probabilities_and_attention(page, site_url, expected, info, request):
    """Every recorded line, among them the one the page opens with, one written with [MASK], one with a word outside
    the vocabulary, one that tries the splitting pattern's corners and one of 62 words and marks: the same tokens
    ([UNK] for the unknown words, which the page names), the same five words in the same order with PyTorch's
    probabilities, and for every layer and head, and the mean of the heads, PyTorch's attention from the blank."""
    _open(page, site_url, KEY, request)
    assert page.input_value("#fill-text") == expected["default"]["text"]
    # the page opens on the last layer and the mean of the heads
    assert page.input_value("#fill-layer") == str(info["layers"] - 1) and page.input_value("#fill-head") == "mean"
    agree = 0
    for name, case in expected.items():
        status = _fill(page, case["text"])
        first = f"“{case['top'][0]}” {case['probs'][0]:.3f}"
        assert status.startswith(f"{len(case['tokens'])} tokens read. The likeliest words in the blank: {first}"), (
            name,
            status,
        )
        assert page.text_content("#fill-error") == "" and page.get_attribute("#fill-text", "aria-invalid") == "false"
        rows = page.eval_on_selector_all(
            "#fill-top tbody tr", "rows => rows.map(r => [r.dataset.token, Number(r.dataset.p)])"
        )
        words = [w for w, _ in rows]
        agree += words == case["top"]
        if words != case["top"]:
            continue  # counted: _agreement fails the test below and says how many
        worst = max(abs(p - q) for (_, p), q in zip(rows, case["probs"]))
        assert worst <= PROBABILITY, f"{name}: the probabilities differ from PyTorch's by {worst:.1e}"
        shown = page.eval_on_selector_all("#fill-top tbody tr td:nth-child(3)", "tds => tds.map(t => t.textContent)")
        assert shown == [f"{p:.4f}" for p in case["probs"]], (name, shown)
        filled = page.text_content("#fill-filled")
        assert filled == " ".join(
            case["top"][0] if k == case["blank"] else t
            for k, t in enumerate(case["tokens"])
            if 0 < k < len(case["tokens"]) - 1
        ), (name, filled)
        unknown = page.text_content("#fill-unknown")
        assert all(_quoted(w) in unknown for w in case["unknown"]) and bool(unknown) == bool(case["unknown"]), unknown
        for layer in range(info["layers"]):
            page.select_option("#fill-layer", index=layer)  # by index: a value such as "1" also matches the label "1"
            for head in [*range(info["heads"]), "mean"]:
                page.select_option("#fill-head", index=info["heads"] if head == "mean" else head)
                tokens, weights = _shown_attention(page)
                assert tokens == case["tokens"], (name, tokens)
                rows_of_heads = case["attention"][layer]  # (h, S)
                want = [sum(col) / len(col) for col in zip(*rows_of_heads)] if head == "mean" else rows_of_heads[head]
                worst = max(abs(a - b) for a, b in zip(weights, want))
                assert worst <= WEIGHT, f"{name}, layer {layer + 1}, head {head}: weights off by {worst:.1e}"
                assert abs(sum(weights) - 1) < 1e-5  # the blank's row of attention weights sums to 1
                label = page.get_attribute("#fill-attention", "aria-label")
                which = f"the mean of the {info['heads']} heads" if head == "mean" else f"head {head + 1}"
                assert label.startswith(f"Attention from the blank in layer {layer + 1}, {which}, over the "), label
        page.select_option("#fill-layer", index=info["layers"] - 1)
        page.select_option("#fill-head", index=info["heads"])  # the mean
    _agreement(request, KEY, agree, len(expected))
    assert not network_problems(page)


def test_the_page_reads_the_line_as_playwords_does(page, site_url, expected):
    """The page splits the reader's line itself, in JavaScript, with the pattern that the build copies from
    PlayWords into meta.json. On the line that tries its corners (capitals, apostrophes, marks outside the
    vocabulary, an astral character, a tab and spaces on which JavaScript's \\s and Python's disagree) the page reads
    the tokens that transformer_lib reads."""
    case = expected["split"]
    assert "\x85" in case["text"] and "\ufeff" in case["text"]  # U+0085 is a space in Python, U+FEFF is not
    _open(page, site_url, KEY)
    _fill(page, case["text"])
    assert _shown_attention(page)[0] == case["tokens"]
    vocab = tl.recipes.plays_words()
    pieces = re.split(r"_{3,}|\[mask\]", case["text"], flags=re.IGNORECASE)
    assert case["tokens"] == ["[CLS]", *map(vocab.itos.__getitem__, vocab.encode(pieces[0])), "[MASK]",
                              *map(vocab.itos.__getitem__, vocab.encode(pieces[1])), "[SEP]"]  # fmt: skip


LONGEST = "longest"
BAD_LINES = [
    ("", "The line is empty: type a line with one blank, written ___ (three underscores) or [MASK]"),
    ("   \t ", "The line is empty"),
    ("If music be the food of love, play on,", "The line has no blank: write ___ (three underscores) or [MASK]"),
    ("If music be the food of __, play on,", "“__” has 2 underscores, and a blank needs three."),
    ("If ___ be the food of [mask], play on,", "The line has 2 blanks (“___” and “[mask]”); the model fills one at"),
    ("___ be the [MASK] of _____", "The line has 3 blanks (“___”, “[MASK]” and “_____”)"),
    ("___", "The line is only the blank: the model guesses from the words around it"),
    ("  [MASK]  ", "The line is only the blank"),
    ("___ !?", "Besides the blank the line has only “!” and “?”"),
    ("' ___ ...", "Besides the blank the line has only “'”, “.”, “.” and “.”"),
    (
        "That " + LONGEST,  # the recorded line of 62, one word longer
        "The line has 63 words and marks with the blank, more than the 62 the model reads (its 64 positions hold "
        "[CLS] and [SEP] too). Shorten it by 1.",
    ),
    ("To be, " * 40 + "___", "The line has 121 words and marks with the blank, more than the 62 the model reads"),
]


@pytest.mark.parametrize("line, message", BAD_LINES, ids=[f"bad{k}" for k in range(len(BAD_LINES))])
def test_a_bad_line_gets_a_message_and_the_page_keeps_working(page, site_url, expected, line, message):
    """Each bad line gets a message in the page's alert that says what was expected and what came, the previous
    answer is cleared, the console stays clean, and a good line afterwards is answered as before."""
    if LONGEST in line:
        line = line.replace(LONGEST, expected[LONGEST]["text"])
    _open(page, site_url, KEY)
    said = refused(page, "fill", line)
    assert message in said, said
    for answer in ("#fill-top tbody", "#fill-attention", "#fill-filled", "#fill-attention-note", "#fill-status"):
        assert page.text_content(answer) == "", f"{answer}: the previous line's answer stayed next to the error"
    page.select_option("#fill-layer", index=0)  # the selectors still work, with nothing to draw
    assert page.text_content("#fill-attention") == ""
    case = expected["unknown"]
    status = _fill(page, case["text"])
    assert status.startswith(f"{len(case['tokens'])} tokens read. The likeliest words in the blank: “{case['top'][0]}”")
    assert page.text_content("#fill-error") == "" and page.get_attribute("#fill-text", "aria-invalid") == "false"
    assert len(page.query_selector_all("#fill-top tbody tr")) == 5
    assert _shown_attention(page)[0] == case["tokens"]
    assert not page.console_errors, page.console_errors


def test_the_page_works_from_the_keyboard(page, site_url, expected, info):
    """Tab reaches the line; typing and Enter fill the blank and the live region says the answer; Tab reaches the
    layer and head selectors, and the arrow keys change what the attention list shows."""
    _open(page, site_url, KEY)

    tab_to(page, "#fill-text")
    page.keyboard.press("Control+A")
    case = expected["hamlet"]
    page.keyboard.type(case["text"])
    status = _status_after(page, "fill-status", lambda: page.keyboard.press("Enter"))
    assert status.startswith(f"{len(case['tokens'])} tokens read. The likeliest words in the blank: “{case['top'][0]}”")
    assert page.get_attribute("#fill-status", "aria-live") == "polite"
    tab_to(page, "#fill-layer")
    page.keyboard.press("ArrowUp")  # from the last layer to the one before it
    assert page.input_value("#fill-layer") == str(info["layers"] - 2)
    label = page.get_attribute("#fill-attention", "aria-label")
    assert label.startswith(
        f"Attention from the blank in layer {info['layers'] - 1}, the mean of the {info['heads']} heads"
    )
    tab_to(page, "#fill-head")
    page.keyboard.press("Home")  # the first head
    assert page.input_value("#fill-head") == "0"
    weights = _shown_attention(page)[1]
    want = case["attention"][info["layers"] - 2][0]
    assert max(abs(a - b) for a, b in zip(weights, want)) <= WEIGHT
    unlabelled = unlabelled_controls(page)
    assert not unlabelled, unlabelled


def _prose() -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / "fill_blank.md").read_text(encoding="utf-8"))


def test_the_prose_quotes_the_recorded_answers(expected, info):
    """Each number and claim of the page's "What to try" and its introduction, recomputed from expected.json,
    meta.json and the checkpoint's own record."""
    text = _prose()
    default, semicolon = expected["default"], expected["semicolon"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert default["text"] == defaults["fill_blank"]["fill-text"]
    assert f"`{default['text']}`" in text
    first, second = default["top"][:2]
    assert first == "love", "the prose says the model puts the hidden word first"
    p = default["probs"]
    said = f'it puts "{first}" first, with {p[0]:.3f}, in a near tie with "{second}" ({p[1]:.3f})'
    assert said in text
    assert semicolon["text"] == default["text"].removesuffix(",") + ";"
    assert semicolon["top"][:2] == [second, first]  # "end the opening line with ; ... the order changes"
    V = len(info["itos"])
    assert f"vocabulary of {V:,} tokens" in text and f"({1 / V:.4f} per token)" in text
    assert f"the {V - info['specials']['count']:,} words and marks" in text
    assert info["layers"] == info["heads"] == 4 and "four encoder layers with four heads each" in text
    assert f"at most {info['max_len']} tokens" in text
    hamlet, romeo, unknown = expected["hamlet"], expected["romeo"], expected["unknown"]
    assert hamlet["top"][0] == "much" and f'"much" gets {hamlet["probs"][0]:.3f}' in text
    assert hamlet["unknown"] == ["protests"]
    assert romeo["top"][0] == "here" and f'"here" ({romeo["probs"][0]:.3f}), and "romeo" is not among' in text
    assert "romeo" not in romeo["top"]
    assert unknown["unknown"] == ["coffee"] and f'answers "lord" with {unknown["probs"][0]:.3f}' in text
    assert unknown["top"][0] == "lord"

    def floor2(x: float) -> str:
        return f"{math.floor(100 * x) / 100:.2f}"

    before = min(c["attention"][1][0][c["blank"] - 1] for c in expected.values())  # layer 2, head 1
    after = min(c["attention"][1][2][c["blank"] + 1] for c in expected.values())  # layer 2, head 3
    count = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"][len(expected)]
    assert (
        f"On each of the {count} lines the site's build records, head 1 gives at least {floor2(before)} of its "
        f"weight to the token just before the blank, and head 3 gives at least {floor2(after)} to the token just "
        "after it." in text
    )
    head3 = default["attention"][3][2]  # layer 4, head 3 on the opening line
    most = max(range(len(head3)), key=head3.__getitem__)
    assert default["tokens"][most] == "music" and f'head 3 gives {head3[most]:.2f} of its weight to "music"' in text
    _, record = tl.load_checkpoint("plays_bert")
    accuracy = record["evals"][-1]["masked accuracy"]
    assert f"its first guess is right for {round(100 * accuracy)}% of them" in text
    assert f"at most {info['max_len'] - 2} words and punctuation marks" in text  # the help under the field
