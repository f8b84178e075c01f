"""The mend-the-line playground answers in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/mend_line.py recorded PyTorch's beam search on fixed lines (expected.json's "mend_line"): the
tokens the model reads and, at every beam width the page offers, every line the search finished, best first, with its
ids, log-probability, rank and fill (transformer_lib.decoding.beam_candidates, bart.read_fill). These tests type the
same lines into book/playground/mend_line.html and require the same lines in the same order, the same
log-probabilities and the same fills. They also give the page every kind of bad line and require a message that names
the problem, drive it from the keyboard, and hold the page's prose to the recorded answers. What all playgrounds
share (labels, model size, int8, a broken model file) is tested for this page too, in test_playground.py.
"""

from __future__ import annotations

import json
import re

import pytest

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.pretraining import UNK

from .checks import network_problems
from .conftest import ROOT
from .test_playground import _open, _status_after, built_entry, refused, tab_to, unlabelled_controls

pytestmark = pytest.mark.browser
KEY = "mend_line"
LOGP = 1e-4  # a written line's log-probability: float32 logits, onnxruntime-web against PyTorch, summed over 28 steps


@pytest.fixture(scope="module")
def expected() -> dict:
    return built_entry(KEY, "expected.json")


@pytest.fixture(scope="module")
def info() -> dict:
    return built_entry(KEY, "models/meta.json")


def _mend(page, text: str, beam: int) -> str:
    """Type `text`, choose the beam, press the button; return the status once the search is done."""
    page.fill("#mend-text", text)
    page.select_option("#mend-beam", str(beam))
    return _status_after(page, "mend-status", lambda: page.click("#mend-go"), timeout=120_000)


def _shown(page) -> list[dict]:
    """The candidates' table as the page filled it: each row's ids, log-probability, rank and fill."""
    return page.eval_on_selector_all(
        "#mend-candidates tbody tr",
        "rows => rows.map(r => ({ids: r.dataset.ids.split(' ').map(Number), logp: Number(r.dataset.logp), "
        "rank: Number(r.dataset.rank), fill: r.dataset.fill, line: r.cells[1].textContent}))",
    )


def _sides(case: dict) -> tuple[list[str], list[str]]:
    """The recorded line's tokens before the gap and after it ([MASK] and [SEP] left out)."""
    tokens = case["tokens"][:-1]  # without [SEP]
    gap = tokens.index("[MASK]")
    return tokens[:gap], tokens[gap + 1 :]


def test_the_page_finds_pytorchs_lines_in_pytorchs_order(page, site_url, expected, info):
    """Every recorded line at every beam width: the same finished lines, in the same order, with PyTorch's
    log-probabilities and ranks, the same fill marked in the reader's line, and a status that names the best fill."""
    _open(page, site_url, KEY)
    assert page.input_value("#mend-text") == expected["default"]["text"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert page.input_value("#mend-beam") == str(defaults[KEY]["mend-beam"])
    offered = page.eval_on_selector_all("#mend-beam option", "os => os.map(o => Number(o.value))")
    assert offered == info["beams"], offered
    for name, case in expected.items():
        for beam, search in case["searches"].items():
            status = _mend(page, case["text"], int(beam))
            want = search["candidates"]
            rows = _shown(page)
            assert [r["ids"] for r in rows] == [c["ids"] for c in want], (name, beam)
            worst = max(abs(r["logp"] - c["logp"]) for r, c in zip(rows, want))
            assert worst <= LOGP, f"{name}, beam {beam}: log-probabilities off by {worst:.1e}"
            assert all(abs(r["rank"] - c["rank"]) <= LOGP for r, c in zip(rows, want)), (name, beam)
            assert [r["fill"] for r in rows] == [" ".join(c["fill"] or []) for c in want], (name, beam)
            before, after = (" ".join(t) for t in _sides(case))
            for r, c in zip(rows, want):
                if c["fill"] is None:
                    assert r["line"] == " ".join(c["written"]) + " (it changed the words around the gap)", r["line"]
                else:  # the reader's own line, the fill in the gap
                    fill = " ".join(c["fill"]) or "(nothing)"
                    assert r["line"] == " ".join(w for w in (before, fill, after) if w), (r["line"], c["fill"])
            best = want[0]
            fill = (
                "it changed the words around the gap"
                if best["fill"] is None
                else (f"the gap holds “{' '.join(best['fill'])}”" if best["fill"] else "the gap holds nothing")
            )
            count = f"{len(want)} candidate{'s' if len(want) != 1 else ''}"
            assert status.startswith(f"{count} from a beam of {beam}, in "), status
            assert f"The best: {fill}" in status and f"log-probability {best['logp']:.2f}" in status, status
            assert page.text_content("#mend-written") == " ".join(best["written"]), name
            unknown = page.text_content("#mend-unknown")
            assert all(f"“{w}”" in unknown for w in case["unknown"]) and bool(unknown) == bool(case["unknown"])
            assert page.text_content("#mend-error") == ""
            assert page.get_attribute("#mend-text", "aria-invalid") == "false"
    assert not network_problems(page)


def test_the_page_reads_the_line_as_the_build_does(expected):
    """The tokens the build recorded are PlayWords' on each side of one [MASK], then [SEP]: what the page feeds."""
    vocab = recipes.plays_words()
    for case in expected.values():
        before, after = (vocab.encode(p) for p in re.split(r"_{3,}|\[mask\]", case["text"], flags=re.IGNORECASE))
        assert case["tokens"] == [*map(vocab.itos.__getitem__, before), "[MASK]",
                                  *map(vocab.itos.__getitem__, after), "[SEP]"]  # fmt: skip


LONGEST = "longest"
BAD_LINES = [
    ("", "The line is empty: type a line with one gap, written ___ (three underscores) or [MASK]"),
    ("   \t ", "The line is empty"),
    ("If music be the food of love, play on,", "The line has no gap: write ___ (three underscores) or [MASK]"),
    ("If music be the food of __, play on,", "“__” has 2 underscores, and a gap needs three."),
    ("If ___ be the food of [mask], play on,", "The line has 2 gaps (“___” and “[mask]”); this page mends one."),
    ("___", "The line is only the gap: the model mends a line from the words around the gap"),
    ("___ !?", "Besides the gap the line has only “!” and “?”"),
    (
        "That " + LONGEST,  # the recorded line of 23, one word longer
        "The line has 24 words and marks besides the gap, more than the 23 the model mends (it learned lines of 24). "
        "Shorten it by 1.",
    ),
]


@pytest.mark.parametrize("line, message", BAD_LINES, ids=[f"bad{k}" for k in range(len(BAD_LINES))])
def test_a_bad_line_gets_a_message_and_the_page_keeps_working(page, site_url, expected, line, message):
    """Each bad line gets a message in the page's alert that says what was expected and what came, the previous
    answer is cleared, the console stays clean, and a good line afterwards is mended as before."""
    if LONGEST in line:
        line = line.replace(LONGEST, expected[LONGEST]["text"])
    _open(page, site_url, KEY)
    said = refused(page, "mend", line)
    assert message in said, said
    for answer in ("#mend-candidates tbody", "#mend-written", "#mend-status", "#mend-unknown"):
        assert page.text_content(answer) == "", f"{answer}: the previous line's answer stayed next to the error"
    case = expected["rome"]
    _mend(page, case["text"], 2)
    assert [r["ids"] for r in _shown(page)] == [c["ids"] for c in case["searches"]["2"]["candidates"]]
    assert page.text_content("#mend-error") == "" and page.get_attribute("#mend-text", "aria-invalid") == "false"
    assert not page.console_errors, page.console_errors


def test_the_page_works_from_the_keyboard(page, site_url, expected):
    """Tab reaches the line; typing and Enter mend it and the live region says the answer; Tab reaches the beam, the
    arrow keys change it, and Enter searches again at the new width."""
    _open(page, site_url, KEY)

    tab_to(page, "#mend-text")
    page.keyboard.press("Control+A")
    case = expected["start"]
    page.keyboard.type(case["text"])
    status = _status_after(page, "mend-status", lambda: page.keyboard.press("Enter"), timeout=120_000)
    assert status.startswith(f"{len(case['searches']['4']['candidates'])} candidates from a beam of 4"), status
    assert page.get_attribute("#mend-status", "aria-live") == "polite"
    tab_to(page, "#mend-beam")
    page.keyboard.press("ArrowUp")  # from 4 to 2
    assert page.input_value("#mend-beam") == "2"
    tab_to(page, "#mend-go")
    _status_after(page, "mend-status", lambda: page.keyboard.press("Enter"), timeout=120_000)
    assert [r["ids"] for r in _shown(page)] == [c["ids"] for c in case["searches"]["2"]["candidates"]]
    unlabelled = unlabelled_controls(page)
    assert not unlabelled, unlabelled


def _prose() -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / "mend_line.md").read_text(encoding="utf-8"))


def test_the_prose_quotes_the_recorded_answers(expected, info):
    """Each number and claim of the page's introduction and "What to try", recomputed from expected.json, meta.json,
    the chapter's runs file and the recipe's constants."""
    text = _prose()
    default, rome = expected["default"], expected["rome"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert default["text"] == defaults[KEY]["mend-text"] and f"`{default['text']}`" in text
    best4, greedy = default["searches"]["4"]["candidates"][0], default["searches"]["1"]["candidates"][0]
    assert (
        f'fills the gap with {len(best4["fill"])} tokens, "{" ".join(best4["fill"])}"'.replace(
            "with 5 tokens", "with five tokens"
        )
        in text
    )
    assert f'writes "{" ".join(greedy["fill"])}"' in text
    assert all(s["candidates"][0]["fill"] == ["him"] for s in rome["searches"].values())
    assert 'every beam puts "him" first' in text
    plays, vocab = tl.corpus.shakespeare("train"), recipes.plays_words()
    assert "caesar" in vocab.stoi and "I come to bury Caesar, not to praise him." in plays
    assert f"(it occurs {vocab.encode(plays).count(vocab.stoi['caesar'])} times in them)" in text
    searched = [c for case in expected.values() for s in case["searches"].values() for c in s["candidates"]]
    assert all(len(c["written"]) == recipes.BART_LINE for c in searched)  # "each finished line has 24 tokens"
    around = sum(len(side) for side in _sides(default))
    assert f"Your line has {around} words and marks around the gap, and {around} + {len(best4['fill'])} = 24" in text
    assert f"up to {info['most']} words and marks around the gap" in text
    assert f"at most {info['most']} words and punctuation marks besides it" in text  # the help under the field
    assert f"more than {info['most']} words and marks gets a message" in text
    assert f"after {info['max_new_tokens']} tokens" in text and info["max_new_tokens"] == recipes.BART_LINE + 4
    assert f"lines of {recipes.BART_LINE} words and marks" in text
    assert f"about {info['bytes'] / 1e6:.1f} MB" in text
    assert f"chapter 15's {len(info['itos']) - info['specials']['count']:,} words and marks and five special" in text
    gaps = recipes.load_bart_runs()["gaps"]
    known = [k for k, truth in enumerate(gaps["truth"]) if UNK not in truth]  # BERT never writes [UNK]
    right = sum(gaps["fills"]["BART"][k] == gaps["truth"][k] for k in known) / len(known)
    assert round(1 / right) == 11 and "about one time in eleven" in text  # 67 of 722
    assert info["beams"] == [1, 2, 4, 8] and '<option value="8">8</option>' in (
        ROOT / "book" / "playground" / "mend_line.md"
    ).read_text(encoding="utf-8")
