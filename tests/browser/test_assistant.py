"""The three-models playground answers in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/assistant.py recorded, for fixed user lines (expected.json's "assistant": the line the page
opens with, its example buttons, a held-out word, a long word, a task with a capital, a word of two, a line that is no
task and the longest line the models can answer), what chat.sample_answers writes with each of the three models (the
base model, SFT, GRPO): the ids up to <|end|> or 8 tokens, the answer decode_answer keeps, and chat.solve's right
answer or none. These tests type the same lines into book/playground/assistant.html and require, for every line and
every model, the same ids and answer, the same right answer and verdict, and cached decoding: the prompt fed once,
then one token per call. They also give the page every kind of bad line and require a message that names what was
expected and what came, then a good line and require answers again; they drive it from the keyboard; and they hold
the page's prose to the recorded answers and sizes. What all playgrounds share (labels, model size, int8, a broken
or wrong model file) is tested for each of the three models too, in test_playground.py.
"""

from __future__ import annotations

import json
import re

import pytest

import transformer_lib as tl
from transformer_lib import chat

from .checks import network_problems
from .conftest import ROOT, _missing
from .test_playground import ANSWERED, BUILT, _agreement, _open, _status_after, tab_to

pytestmark = pytest.mark.browser
KEYS = ["assistant_base", "assistant_sft", "assistant_grpo"]  # meta.json's keys, the table's rows in order
NAMES = {"assistant_base": "base", "assistant_sft": "SFT", "assistant_grpo": "GRPO"}  # as the status line says them


def _built(path: str) -> dict:
    """A file the playgrounds' build wrote (expected.json, models/meta.json)."""
    if not (BUILT / "expected.json").is_file():
        _missing("the playgrounds were not built (no npm when `make book` ran); install nodejs and npm")
    return json.loads((BUILT / path).read_text())


@pytest.fixture(scope="module")
def expected() -> dict:
    everything = _built("expected.json")
    assert "assistant" in everything, "expected.json has no 'assistant': the site was built before the page existed"
    return everything["assistant"]


@pytest.fixture(scope="module")
def meta() -> dict:
    everything = _built("models/meta.json")
    assert all(key in everything for key in KEYS), "meta.json lacks the chat models: run `make book`"
    return {key: everything[key] for key in KEYS}


def _open_all(page, site_url, request=None):
    """Open the page and wait until all three models have answered the line it opens with."""
    _open(page, site_url, KEYS[0])
    for key in KEYS:
        page.wait_for_function(ANSWERED, arg=key, timeout=120_000)
    if request is not None:  # the three models' times, for the terminal summary (conftest.py)
        times = request.config.__dict__.setdefault("playground_times", {})
        for key in KEYS:
            times[key] = page.evaluate("key => window.playgroundTimings[key]", key)


def _ask(page, line: str) -> str:
    """Type `line` and press the button; return the status once all three models have answered."""
    page.fill("#assistant-line", line)
    return _status_after(page, "assistant-status", lambda: page.click("#assistant-ask"))


def _rows(page) -> dict[str, dict]:
    """The table as shown: per model, its answer (data-answer), ids written (data-ids), right answer and verdict."""
    rows = page.eval_on_selector_all(
        "#assistant-answers tbody tr",
        """rows => rows.map(r => { const td = r.querySelectorAll('td');
            return [r.dataset.model, {answer: td[0].dataset.answer, ids: JSON.parse(td[3].dataset.ids || 'null'),
                    shown: td[0].textContent, right: td[1].textContent, verdict: td[2].textContent,
                    tokens: td[3].textContent}]; })""",
    )
    return dict(rows)


def _quoted(text: str) -> str:
    return f"“{text.replace(chr(10), '↵')}”"


def _status(case: dict) -> str:
    """The status line the page writes once the three models have answered `case`."""
    right = case["right"]
    said = []
    for key in KEYS:
        text = case["answers"][key]["text"]
        verdict = "" if right is None else " (right)" if text == right else " (wrong)"
        said.append(f"{NAMES[key]} {_quoted(text)}{verdict}")
    end = ". No checker for this line: it is not one of the three tasks." if right is None else (
        f". The right answer is {_quoted(right)}."
    )  # fmt: skip
    return f"{_quoted(case['line'])}: {', '.join(said)}{end}"


def _assert_answers(page, case: dict, meta: dict) -> dict[str, bool]:
    """Require the table to hold PyTorch's answers to `case`, with cached decoding; -> per model, ids equal or not."""
    rows, right, same = _rows(page), case["right"], {}
    assert page.text_content("#assistant-prompt") == f"<|user|>{case['line']}<|assistant|>"
    for key in KEYS:
        row, want = rows[key], case["answers"][key]
        same[key] = row["ids"] == want["ids"]
        if not same[key]:
            continue  # counted: _agreement fails the test and says how many
        assert row["answer"] == want["text"] and row["shown"] == _quoted(want["text"]), (key, case["line"], row)
        assert row["right"] == ("no checker for this line" if right is None else _quoted(right)), (key, row)
        verdict = "not checked" if right is None else "right" if want["text"] == right else "wrong"
        assert row["verdict"] == verdict, (key, case["line"], row)
        end = meta[key]["chat"]["end"]
        how = "the last <|end|>" if want["ids"][-1] == end else "cut there without <|end|>"
        assert row["tokens"].endswith(f" ({len(want['ids'])} tokens, {how})"), row["tokens"]
        run = page.evaluate("key => window.playgroundTimings[key].last_run", key)
        assert run["fed"] == [len(case["prompt"])] + [1] * (len(want["ids"]) - 1), (key, run["fed"])  # the cache
    return same


def test_the_page_gives_pytorchs_answers_for_every_line_and_every_model(page, site_url, expected, meta, request):
    """Every recorded line, the page's default first: for each of the three models, PyTorch's ids, the answer
    decode_answer keeps, chat.solve's right answer and the verdict, the prompt fed once and then one token per call."""
    _open_all(page, site_url, request)
    lines = expected["lines"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert page.input_value("#assistant-line") == lines[0]["line"] == defaults["assistant"]["assistant-line"]
    agree = dict.fromkeys(KEYS, 0)
    assert all(_assert_answers(page, lines[0], meta).values())  # the answers the page opens with
    for case in lines:
        assert case["right"] == (chat.solve(case["line"]) if case["line"].split(" ")[0] in chat.TASKS else None)
        status = _ask(page, case["line"])
        for key, same in _assert_answers(page, case, meta).items():
            agree[key] += same
        if all(case["answers"][k]["ids"] == _rows(page)[k]["ids"] for k in KEYS):
            assert status == _status(case)
        assert page.text_content("#assistant-error") == ""
        assert page.get_attribute("#assistant-line", "aria-invalid") == "false"
    for key in KEYS:
        _agreement(request, key, agree[key], len(lines))
    longest = lines[-1]
    assert longest["line"] == expected["longest"]
    assert len(longest["prompt"]) + chat.MAX_ANSWER == meta[KEYS[0]]["max_len"]  # all of the models' positions
    assert not network_problems(page)


def test_the_example_buttons_ask_the_recorded_lines(page, site_url, expected, meta):
    """The buttons are the build's examples, in order, and each one fills the field and gets PyTorch's answers."""
    _open_all(page, site_url)
    buttons = page.eval_on_selector_all(
        "#assistant-examples button", "bs => bs.map(b => [b.dataset.line, b.textContent])"
    )
    assert [line for line, _ in buttons] == expected["examples"] and all(line == text for line, text in buttons)
    cases = {case["line"]: case for case in expected["lines"]}
    for line, _ in buttons:
        status = _status_after(
            page, "assistant-status", lambda line=line: page.click(f"#assistant-examples [data-line='{line}']")
        )
        assert page.input_value("#assistant-line") == line
        assert status == _status(cases[line]) and all(_assert_answers(page, cases[line], meta).values())


# Lines whose right answer the page's copy of chat.solve must give as Python's does (the models' answers are not
# recorded for these: only the right-answer column and the verdicts' kind are compared)
CHECKER_LINES = [
    "count",
    "reverse ",
    "shout a b",
    "count  two",
    "Count honour",
    "reversenight",
    "shout crown.",
    "say hi",
]


def test_the_page_checks_answers_as_chat_solve_does(page, site_url):
    _open_all(page, site_url)
    for line in CHECKER_LINES:
        try:
            right = chat.solve(line)
        except ValueError:
            right = None
        _ask(page, line)
        rows = _rows(page)
        for key in KEYS:
            assert rows[key]["right"] == ("no checker for this line" if right is None else _quoted(right)), line
            verdict = "not checked" if right is None else "right" if rows[key]["answer"] == right else "wrong"
            assert rows[key]["verdict"] == verdict, (line, rows[key])


BAD_LINES = [
    ("", "The line is empty: type what the user says, a task and a word such as “reverse night”"),
    ("   ", "The line is empty"),
    ("count 10", "The models have never seen “0”: they read only the characters of the plays, listed under the field."),
    ("reverse <|end|>", "The models have never seen “<”, “|”, “>”: they read only the characters of the plays"),
    ("shout café€", "The models have never seen “é”, “€”"),
    (
        "x" * 119,
        "The line has 119 characters, more than the 118 the models can answer: their 128 positions hold <|user|>, the "
        "line, <|assistant|> and 8 tokens for the answer. Shorten it by 1.",
    ),
    ("reverse " * 40, "The line has 320 characters, more than the 118 the models can answer"),
]


def _refused(page, line: str) -> str:
    """Ask the page about `line` and return the message its alert gives (it answers a bad line with no model)."""
    page.fill("#assistant-line", line)
    page.click("#assistant-ask")
    page.wait_for_function("() => document.querySelector('#assistant-error').textContent !== ''", timeout=10_000)
    return page.text_content("#assistant-error")


@pytest.mark.parametrize("line, message", BAD_LINES, ids=[f"bad{k}" for k in range(len(BAD_LINES))])
def test_a_bad_line_gets_a_message_and_the_page_keeps_working(page, site_url, expected, meta, line, message):
    """Each bad line gets a message in the page's alert that says what was expected and what came, the previous
    answers are cleared, the console stays clean, and a good line afterwards is answered as before."""
    _open_all(page, site_url)
    error = _refused(page, line)
    assert message in error, error
    role, invalid = (
        page.get_attribute("#assistant-error", "role"),
        page.get_attribute("#assistant-line", "aria-invalid"),
    )
    assert (role, invalid) == ("alert", "true")
    for answer in ("#assistant-answers tbody td", "#assistant-prompt", "#assistant-status"):
        shown = page.eval_on_selector_all(answer, "els => els.map(e => e.textContent).join('')")
        assert shown == "", f"{answer}: the previous line's answer stayed next to the error"
    case = expected["lines"][1]
    assert _ask(page, case["line"]) == _status(case)
    assert (
        page.text_content("#assistant-error") == "" and page.get_attribute("#assistant-line", "aria-invalid") == "false"
    )
    assert all(_assert_answers(page, case, meta).values())
    assert not page.console_errors, page.console_errors


def test_the_page_works_from_the_keyboard(page, site_url, expected, meta):
    """Tab reaches the line; typing and Enter ask the three models and the live region says their answers; Tab
    reaches the example buttons, and Enter or Space on one asks its line."""
    _open_all(page, site_url)

    cases = {case["line"]: case for case in expected["lines"]}
    tab_to(page, "#assistant-line")
    page.keyboard.press("Control+A")
    line = expected["lines"][2]["line"]
    page.keyboard.type(line)
    assert _status_after(page, "assistant-status", lambda: page.keyboard.press("Enter")) == _status(cases[line])
    assert page.get_attribute("#assistant-status", "aria-live") == "polite"
    for key, line in (("Enter", expected["examples"][3]), (" ", expected["examples"][4])):
        tab_to(page, f"#assistant-examples [data-line='{line}']")
        assert _status_after(page, "assistant-status", lambda key=key: page.keyboard.press(key)) == _status(cases[line])
        assert all(_assert_answers(page, cases[line], meta).values())
    unlabelled = page.eval_on_selector_all(
        ".playground input, .playground button",
        "els => els.filter(e => e.tagName !== 'BUTTON' ? !e.labels || !e.labels.length : !e.textContent.trim())"
        ".map(e => e.id || e.textContent)",
    )
    assert not unlabelled, unlabelled
    help_text = page.text_content("#assistant-help")  # the characters the models know, from meta.json's vocabulary
    assert "a–z" in help_text and "A–Z" in help_text and "1–9" in help_text and "0" not in help_text


def _prose(name: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / f"{name}.md").read_text(encoding="utf-8"))


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _int8_phrases(meta: dict) -> dict[str, str]:
    """What the prose says about the sizes and the int8 trial, as meta.json has it: which files ship in int8."""
    mb = {key: f"{meta[key]['bytes'] / 1e6:.1f} MB" for key in KEYS}
    int8 = [key for key in KEYS if meta[key]["int8"]["shipped"] == "int8"]
    fp32 = [key for key in KEYS if key not in int8]

    def whose(keys: list[str], kind: str = "") -> str:  # "the SFT model's", "the base and GRPO chat models'"
        return f"the {_listed([NAMES[k] for k in keys])} {kind}{'model' if len(keys) == 1 else 'models'}'" + (
            "s" if len(keys) == 1 else ""
        )

    one = lambda keys, single, plural: single if len(keys) == 1 else plural  # noqa: E731
    changed = _listed([str(meta[k]["int8"]["inputs"] - meta[k]["int8"]["agree"]) for k in fp32])
    intro = _listed([f"{mb[k]} for the {NAMES[k]} model" for k in KEYS])
    phrases = {
        "row": "about " + _listed([mb[k] + (" (int8)" if k in int8 else "") for k in KEYS]),
        "fp32": f"{whose(fp32)} answers change on {changed} of the 50, so {one(fp32, 'it stays', 'they stay')} in fp32",
        "index": f"{whose(fp32, 'chat ')} answers to {changed} of {one(fp32, 'its', 'their')} 50 lines",
    }
    if int8:
        intro += f"; {whose(int8)} {one(int8, 'file is', 'files are')} int8"
        phrases["int8"] = f"T{whose(int8)[1:]} answers are, so the page loads {one(int8, 'it', 'them')} in int8"
        phrases["index int8"] = (
            f"chapter 17's {_listed([NAMES[k] for k in int8])} {one(int8, 'model', 'models')}, on all 50 of "
            f"{one(int8, 'its', 'their')} lines: those files are int8"
        )
    phrases["intro"] = f"(about {intro})"
    return phrases


def test_the_prose_quotes_the_recorded_answers_and_sizes(expected, meta):
    """Each number and claim of the page's introduction, "What to try" and "How it works", and of its row and its
    int8 sentence on the playgrounds' index, recomputed from expected.json, meta.json and the checkpoints' records."""
    text, index = _prose("assistant"), _prose("index")
    info, phrases = meta[KEYS[0]], _int8_phrases(meta)
    base, sft, grpo = KEYS
    for name, phrase in phrases.items():
        assert phrase in (index if name in ("row", "index", "index int8") else text), f"the prose lacks: {phrase}"
    trials = {key: meta[key]["int8"] for key in KEYS}
    assert all(t["inputs"] == 50 for t in trials.values()) and len(expected["lines"]) == 10
    assert "to its 50 fixed lines, the page's 10 and 40 tasks on held-out words" in text
    t = trials[base]
    assert f"{t['int8_bytes'] / 1e6:.1f} MB instead of {t['fp32_bytes'] / 1e6:.1f} MB" in text
    graphs = {meta[key]["graph_bytes"] for key in KEYS}
    assert len({f"{g / 1e6:.2f}" for g in graphs}) == 1 and f"copies, about {max(graphs) / 1e6:.2f} MB each" in text
    files = [meta[key]["file"] for key in KEYS]
    assert f"`{files[0]}`, `{files[1]}` and `{files[2]}`" in text
    ids = info["chat"]
    assert [ids["user"], ids["assistant"], ids["end"]] == [84, 85, 86]
    assert "`<|user|>` (id 84)" in text and "`<|assistant|>` (id 85)" in text and "`<|end|>` (id 86)" in text
    assert info["max_answer"] == chat.MAX_ANSWER == 8 and "until it writes `<|end|>` or 8 tokens" in text
    assert f"At most {info['max_len'] - 2 - info['max_answer']} characters" in _prose("assistant")  # the help
    cases = {case["line"]: {**case["answers"], "right": case["right"]} for case in expected["lines"]}

    def said(line: str, key: str) -> str:
        return cases[line][key]["text"]

    end = ids["end"]
    opening = cases["reverse night"]
    assert expected["examples"][0] == "reverse night" and "**The line the page opens with**, `reverse night`." in text
    assert f'The base model writes "{said("reverse night", base)}" and is cut after 8 tokens' in text
    assert len(opening[base]["ids"]) == 8 and end not in opening[base]["ids"]
    assert said("reverse night", sft) == said("reverse night", grpo) == opening["right"] == "thgin"
    assert opening[sft]["ids"][-1] == opening[grpo]["ids"][-1] == end  # 'write "thgin" and <|end|>'
    train, held_out = chat.task_words()
    assert {"crown", "honour"} <= set(train) and {"tenants", "tailor"} <= set(held_out)
    for line in ("shout crown", "count honour"):
        assert said(line, sft) == said(line, grpo) == cases[line]["right"]
    assert '"CROWN" and "6"' in text
    assert cases["shout tenants"]["right"] == said("shout tenants", grpo) != said("shout tenants", sft)
    assert (
        f'the SFT model writes "{said("shout tenants", sft)}", the GRPO model "{said("shout tenants", grpo)}"' in text
    )
    assert cases["reverse tailor"]["right"] == said("reverse tailor", sft) != said("reverse tailor", grpo)
    assert f'SFT is right ("{said("reverse tailor", sft)}") and GRPO is not ("{said("reverse tailor", grpo)}")' in text
    scores = {key: tl.load_checkpoint(key)[1]["evals"][-1] for key in (sft, grpo)}
    assert chat.HELD_OUT_WORDS == 300 and "Over the 300 held-out words of each task" in text
    exact, sampled = (scores[k]["exact match"] for k in (sft, grpo)), (scores[k]["pass@1"] for k in (sft, grpo))
    assert "exactly right about as often, {:.1%} of the time after SFT and {:.1%} after GRPO".format(*exact) in text
    assert "right {:.1%} of the time after SFT and {:.1%} after GRPO".format(*sampled) in text
    assert said("what is love", sft) == said("what is love", grpo) == "love".upper() and '"LOVE"' in text
    assert cases["what is love"]["right"] is None and cases["Reverse night"]["right"] is None
    assert said("Reverse night", sft) == said("Reverse night", grpo) == "thgin"
    low, high = chat.WORD_LENGTHS
    assert f"(9 letters; the training words have {low} to {high})" in text and len("wherefore") == 9
    assert said("count wherefore", sft) == said("count wherefore", grpo) == str(high) and f'answer "{high}"' in text
    assert cases["count wherefore"][base]["ids"][0] == ids["assistant"] and said("count wherefore", base) == ""
