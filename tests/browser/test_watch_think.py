"""The watch-it-think playground answers in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/watch_think.py recorded (expected.json's "watch_think") each of chapter 21's three addition
models' greedy answers to fixed problems (the page's default, its example buttons, 5 and 6 digits, zeros, the
longest problem the page takes), each with tl.arithmetic's verdicts, and the samples of fixed cases (problem, model,
number of samples, seed), drawn as the page draws them (mulberry32's numbers), with tl.evaluation.majority_vote's
vote. These tests type the same problems into book/playground/watch_think.html and require the same ids, the same
verdicts, the same steps said, the same samples and the same vote, with cached decoding: the prompt fed once, then
one character per call. They also give the page every kind of bad problem and seed and require a message that names
what was expected and what came, then a good problem and require answers again; drive it from the keyboard; and
hold the page's prose to the recorded answers and sizes. What all playgrounds share (labels, model size, int8, a
broken or wrong model file) is tested for each of the three models too, in test_playground.py.
"""

from __future__ import annotations

import json
import re

import pytest

from transformer_lib import arithmetic, evaluation, reasoning

from .checks import network_problems
from .conftest import ROOT
from .test_playground import ANSWERED, _agreement, _status_after, built_entry, tab_to

pytestmark = pytest.mark.browser
KEYS = ["think_scratchpad", "think_start", "think_direct"]  # meta.json's keys, the greedy table's rows in order
NAMES = {"think_scratchpad": "scratchpad", "think_start": "start", "think_direct": "direct"}
STYLES = {"think_scratchpad": "scratchpad", "think_start": "scratchpad", "think_direct": "direct"}


@pytest.fixture(scope="module")
def expected() -> dict:
    return built_entry("watch_think", "expected.json")


@pytest.fixture(scope="module")
def meta() -> dict:
    return {key: built_entry(key, "models/meta.json") for key in KEYS}


def _open_all(page, site_url, request=None):
    """Open the page and wait until it has answered the problem it opens with: three greedy answers and the vote."""
    response = page.goto(f"{site_url}/book/playground/watch_think.html", wait_until="load")
    assert response is not None and response.status == 200
    for key in KEYS:
        page.wait_for_function(ANSWERED, arg=key, timeout=120_000)
    page.wait_for_function("() => /the vote/.test(document.getElementById('think-status').textContent)", timeout=60_000)
    if request is not None:  # the three models' times, for the terminal summary (conftest.py)
        times = request.config.__dict__.setdefault("playground_times", {})
        for key in KEYS:
            times[key] = page.evaluate("key => window.playgroundTimings[key]", key)


def _think(page, problem: str, model: str = "think_start", samples: int = 1, seed: int = 0) -> str:
    """Fill the form and press Think; return the status once the page has answered."""
    page.fill("#think-problem", problem)
    page.select_option("#think-model", model)
    page.select_option("#think-samples", str(samples))
    page.fill("#think-seed", str(seed))
    return _status_after(page, "think-status", lambda: page.click("#think-go"))


def _steps_said(problem: str, text: str, style: str) -> str:
    """What the greedy table's last column says of an answer's steps (the page's stepsSaid, in Python)."""
    if style == "direct":
        return "none: it writes the sum alone"
    right = arithmetic.scratchpad(*arithmetic.parse_problem(f"{problem}=")).split(";")[:-1]
    body = text[: text.index(arithmetic.END)] if arithmetic.END in text else text
    wrote = [s for s in body.split(";") if not s.startswith("=")]
    wrong = next((i for i, step in enumerate(right) if i >= len(wrote) or wrote[i] != step), None)
    if wrong is None and len(wrote) == len(right):
        return f"{len(right)} of {len(right)} right"
    if wrong is None:
        return f"{len(right)} right, then {len(wrote) - len(right)} more than the columns"
    if wrong >= len(wrote):
        return f"{wrong} of {len(right)}: stops before column {wrong + 1}"
    return f"column {wrong + 1} wrong: wrote {wrote[wrong]}, the right step is {right[wrong]}"


def _sum_said(answer: dict) -> str:
    return "no sum (cut short or unreadable)" if answer["sum"] is None else str(answer["sum"])


def _right_said(answer: dict) -> str:
    return "no sum" if answer["sum"] is None else "right" if answer["right"] else "wrong"


def _greedy_rows(page) -> dict[str, dict]:
    rows = page.eval_on_selector_all(
        "#think-greedy tbody tr",
        """rows => rows.map(r => { const td = r.querySelectorAll('td');
            return [r.dataset.model, {ids: JSON.parse(td[0].dataset.ids || 'null'), shown: td[0].textContent,
                    sum: td[1].textContent, verdict: td[2].textContent, steps: td[3].textContent}]; })""",
    )
    return dict(rows)


def _assert_greedy(page, case: dict) -> dict[str, bool]:
    """Require the greedy table to hold PyTorch's answers to `case` with the program's verdicts; -> per model, same
    ids or not."""
    rows, same = _greedy_rows(page), {}
    assert page.text_content("#think-prompt") == f"{case['problem']}="
    for key in KEYS:
        row, want = rows[key], case["answers"][key]
        same[key] = row["ids"] == want["ids"]
        if not same[key]:
            continue  # counted: _agreement fails the test and says how many
        # the program's verdicts, recomputed here from the text PyTorch wrote
        prompt = f"{case['problem']}="
        assert want["right"] == arithmetic.is_right(prompt, want["text"])
        assert want["steps_right"] == arithmetic.steps_right(prompt, want["text"])
        assert row["shown"] == want["text"], (key, row)
        assert (row["sum"], row["verdict"]) == (_sum_said(want), _right_said(want)), (key, case["problem"], row)
        assert row["steps"] == _steps_said(case["problem"], want["text"], STYLES[key]), (key, row)
        run = page.evaluate("key => window.playgroundTimings[key].last_run", key)
        assert run["fed"] == [len(case["prompt"])] + [1] * (len(want["ids"]) - 1), (key, run["fed"])  # the cache
    return same


def _samples_shown(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#think-samples-table tbody tr",
        """rows => rows.map(r => { const c = r.querySelectorAll('th, td');
            return {ids: JSON.parse(r.dataset.ids), cells: Array.from(c, x => x.textContent)}; })""",
    )


def _vote_shown(page) -> tuple[str, list[list[str]]]:
    rows = page.eval_on_selector_all(
        "#think-vote tbody tr", "rows => rows.map(r => Array.from(r.querySelectorAll('th, td'), c => c.textContent))"
    )
    return page.get_attribute("#think-vote", "data-vote"), rows


def _status(expected: dict, case: dict) -> str:
    """The status line the page writes once it has answered `case`."""
    problem = next(p for p in expected["problems"] if p["problem"] == case["problem"])
    greedy = ", ".join(f"{NAMES[k]} {_right_said(problem['answers'][k])}" for k in KEYS)
    n, name = len(case["samples"]), NAMES[case["model"]]
    right = sum(s["right"] for s in case["samples"])
    vote = case["vote"]
    said = "none, no sample has a sum." if vote is None else (
        f"{vote}, {case['votes']} of {n} ({'right' if case['vote_right'] else 'wrong'})."
    )  # fmt: skip
    return (
        f"{case['problem']} = {problem['sum']}. Greedy: {greedy}. {n} {'sample' if n == 1 else 'samples'} of the "
        f"{name} model: {right} right; the vote: {said}"
    )


def test_the_page_gives_pytorchs_greedy_answers_for_every_problem_and_model(page, site_url, expected, request):
    """Every recorded problem, the page's default first: each model's ids as PyTorch wrote them, the sum read, the
    verdict and the steps said, with the prompt fed once and then one character per call."""
    _open_all(page, site_url, request)
    problems = expected["problems"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    assert page.input_value("#think-problem") == problems[0]["problem"] == defaults["watch_think"]["think-problem"]
    agree = dict.fromkeys(KEYS, 0)
    assert all(_assert_greedy(page, problems[0]).values())  # the answers the page opens with
    for case in problems:
        a, b = arithmetic.parse_problem(f"{case['problem']}=")
        assert case["sum"] == a + b and case["prompt"] == reasoning.arithmetic_tokenizer().encode(
            f"{case['problem']}=", bos=True
        )
        _think(page, case["problem"])
        for key, same in _assert_greedy(page, case).items():
            agree[key] += same
        assert page.text_content("#think-error") == ""
        assert page.get_attribute("#think-problem", "aria-invalid") == "false"
    for key in KEYS:
        _agreement(request, key, agree[key], len(problems))
    assert problems[-1]["problem"] == expected["longest"] == "999999999+999999999"
    assert not network_problems(page)


def test_the_page_samples_and_votes_as_the_build_did(page, site_url, expected, meta):
    """Every recorded case (the page's default first): the samples' ids, character for character, their sums and
    verdicts, the vote's table and choice (tl.evaluation.majority_vote), and the status line."""
    _open_all(page, site_url)
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    d = defaults["watch_think"]
    first = expected["cases"][0]
    assert (first["problem"], first["model"], len(first["samples"]), first["seed"]) == (
        d["think-problem"], d["think-model"], int(d["think-samples"]), d["think-seed"]
    )  # fmt: skip
    opened = True
    for case in expected["cases"]:
        status = page.text_content("#think-status") if opened else _think(
            page, case["problem"], case["model"], len(case["samples"]), case["seed"]
        )  # fmt: skip
        opened = False
        shown = _samples_shown(page)
        assert [s["ids"] for s in shown] == [s["ids"] for s in case["samples"]], (case["problem"], case["model"])
        tok = reasoning.arithmetic_tokenizer()
        assert [s["text"] for s in case["samples"]] == [
            tok.decode(s["ids"], stop_at_eos=False) for s in case["samples"]
        ]
        sums = [arithmetic.final_answer(s["text"]) for s in case["samples"]]
        assert [s["sum"] for s in case["samples"]] == sums
        for i, (row, sample) in enumerate(zip(shown, case["samples"])):
            steps = "no steps" if STYLES[case["model"]] == "direct" else ("yes" if sample["steps_right"] else "no")
            assert row["cells"] == [str(i + 1), sample["text"], _sum_said(sample), _right_said(sample), steps], row
        vote = evaluation.majority_vote(sums)
        assert vote == case["vote"]
        chosen, rows = _vote_shown(page)
        assert chosen == ("" if vote is None else str(vote))
        counted = {s: sums.count(s) for s in sums if s is not None}
        want = [[str(s), str(n), "right" if s == sum(arithmetic.parse_problem(f"{case['problem']}=")) else "wrong",
                 "the vote" if s == vote else ""] for s, n in counted.items()]  # fmt: skip
        if None in sums:
            want.append(["no sum", str(sums.count(None)), "left out", ""])
        assert rows == want
        assert status == _status(expected, case)
        caption = page.text_content("#think-samples-caption")
        n = len(case["samples"])
        assert caption == f"{n} {'sample' if n == 1 else 'samples'} of the {NAMES[case['model']]} model at " \
            f"temperature 1, seed {case['seed']}"  # fmt: skip
        run = page.evaluate("key => window.playgroundTimings[key].last_samples", case["model"])
        prompt = len(next(p for p in expected["problems"] if p["problem"] == case["problem"])["prompt"])
        assert run["fed"] == [f for s in case["samples"] for f in [prompt] + [1] * (len(s["ids"]) - 1)]
    specials = [
        s for c in expected["cases"] for s in c["samples"] if min(s["ids"]) < meta["think_start"]["specials"]["count"]
    ]
    assert specials, "no recorded sample writes a special token: the page's dropping of them goes untested"
    assert not network_problems(page)


def test_the_example_buttons_ask_the_recorded_problems(page, site_url, expected):
    """The buttons are the build's examples after the default, in order, and each one fills the field and gets
    PyTorch's greedy answers."""
    _open_all(page, site_url)
    buttons = page.eval_on_selector_all(
        "#think-examples button", "bs => bs.map(b => [b.dataset.problem, b.textContent])"
    )
    assert [p for p, _ in buttons] == expected["examples"][1:] and all(p == text for p, text in buttons)
    cases = {case["problem"]: case for case in expected["problems"]}
    page.select_option("#think-samples", "1")
    for problem, _ in buttons:
        _status_after(page, "think-status", lambda p=problem: page.click(f"#think-examples [data-problem='{p}']"))
        assert page.input_value("#think-problem") == problem
        assert all(_assert_greedy(page, cases[problem]).values())


def test_a_problem_asked_during_a_run_is_answered_once_the_run_ends(page, site_url, expected):
    """An example pressed while 16 samples are being written is not dropped: its problem is answered next."""
    _open_all(page, site_url)
    page.select_option("#think-samples", "16")
    page.fill("#think-problem", expected["examples"][1])
    page.eval_on_selector("#think-status", "e => { e.textContent = ''; }")
    page.click("#think-go")
    later = expected["examples"][2]
    page.click(f"#think-examples [data-problem='{later}']")  # while the first problem's samples are being written
    page.wait_for_function(
        "p => document.getElementById('think-status').textContent.startsWith(p + ' = ')", arg=later, timeout=120_000
    )
    assert page.input_value("#think-problem") == later
    assert all(_assert_greedy(page, next(p for p in expected["problems"] if p["problem"] == later)).values())
    assert len(_samples_shown(page)) == 16


def test_the_page_reads_problems_as_the_program_does(page, site_url):
    """Spaces dropped and a final = allowed: the page's prompt is what tl.arithmetic.problem writes."""
    _open_all(page, site_url)
    for typed, a, b in ((" 12 + 34 ", 12, 34), ("5+60=", 5, 60), ("0+7", 0, 7)):
        _think(page, typed)
        assert page.text_content("#think-prompt") == arithmetic.problem(a, b)
        assert page.text_content("#think-error") == ""


BAD = [
    ("#think-problem", "", "The field is empty: type two whole numbers joined by +, such as 478+356."),
    ("#think-problem", "   ", "The field is empty"),
    ("#think-problem", "478-356", "read digits and one + only (and an = at the end): “-” is not among them."),
    ("#think-problem", "4x7+3.5", "“x”, “.” are not among them"),
    ("#think-problem", "478=356", "“=” is not among them"),
    ("#think-problem", "478", "“478” has no +: type two whole numbers joined by +"),
    ("#think-problem", "1+2+3", "“1+2+3” has 2 plus signs; the models add two numbers"),
    ("#think-problem", "+356", "The first number is missing"),
    ("#think-problem", "478+", "The second number is missing"),
    ("#think-problem", "0478+356", "“0478” begins with 0: the models never saw a number written so."),
    ("#think-problem", "0478+356", "Type it without, as 478."),
    ("#think-problem", "12+007", "as 7."),
    (
        "#think-problem",
        "1234567890+1",
        "“1234567890” has 10 digits; the page takes numbers of at most 9, so that the problem and the longest worked "
        "answer always fit in the models' 128 positions.",
    ),
    ("#think-seed", "", "The seed must be a whole number from 0 to 4294967295, got “”."),
    ("#think-seed", "4294967296", "The seed must be a whole number from 0 to 4294967295, got “4294967296”."),
    ("#think-seed", "-1", "The seed must be a whole number"),
    ("#think-seed", "1.5", "The seed must be a whole number"),
]


@pytest.mark.parametrize("field, value, message", BAD, ids=[f"bad{k}" for k in range(len(BAD))])
def test_bad_input_gets_a_message_and_the_page_keeps_working(page, site_url, expected, field, value, message):
    """Each bad problem or seed gets a message in the page's alert that says what was expected and what came, the
    field is marked invalid, the previous answers are cleared, the console stays clean, and a good problem
    afterwards is answered as before."""
    _open_all(page, site_url)
    other = "#think-problem" if field == "#think-seed" else "#think-seed"
    page.fill(other, "0" if field == "#think-problem" else "478+356")
    page.fill(field, value)
    page.click("#think-go")
    page.wait_for_function("() => document.querySelector('#think-error').textContent !== ''", timeout=10_000)
    error = page.text_content("#think-error")
    assert message in error, error
    assert page.get_attribute("#think-error", "role") == "alert"
    assert page.get_attribute(field, "aria-invalid") == "true"
    for answer in ("#think-greedy tbody td", "#think-samples-table tbody", "#think-vote tbody", "#think-prompt",
                   "#think-status"):  # fmt: skip
        shown = page.eval_on_selector_all(answer, "els => els.map(e => e.textContent).join('')")
        assert shown == "", f"{answer}: the previous problem's answer stayed next to the error"
    case = expected["problems"][1]
    _think(page, case["problem"])
    assert page.text_content("#think-error") == ""
    assert page.get_attribute(field, "aria-invalid") == "false"
    assert all(_assert_greedy(page, case).values())
    assert not page.console_errors, page.console_errors


def test_the_page_works_from_the_keyboard(page, site_url, expected):
    """Tab reaches the problem; typing and Enter answer it and the live region says so; the selects and the seed are
    reached by Tab too; Enter or Space on an example button asks its problem."""
    _open_all(page, site_url)
    cases = {case["problem"]: case for case in expected["problems"]}
    tab_to(page, "#think-problem")
    page.keyboard.press("Control+A")
    problem = expected["examples"][1]
    page.keyboard.type(problem)
    status = _status_after(page, "think-status", lambda: page.keyboard.press("Enter"))
    assert status.startswith(f"{problem} = {cases[problem]['sum']}. Greedy: ")
    assert page.get_attribute("#think-status", "aria-live") == "polite"
    assert all(_assert_greedy(page, cases[problem]).values())
    for selector in ("#think-model", "#think-samples", "#think-seed", "#think-go"):
        tab_to(page, selector, presses=10)
    for key, problem in (("Enter", expected["examples"][2]), (" ", expected["examples"][4])):
        tab_to(page, f"#think-examples [data-problem='{problem}']")
        _status_after(page, "think-status", lambda key=key: page.keyboard.press(key))
        assert all(_assert_greedy(page, cases[problem]).values())
    unlabelled = page.eval_on_selector_all(
        ".playground input, .playground select, .playground button",
        "els => els.filter(e => e.tagName !== 'BUTTON' ? !e.labels || !e.labels.length : !e.textContent.trim())"
        ".map(e => e.id || e.textContent)",
    )
    assert not unlabelled, unlabelled


def _prose(name: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / f"{name}.md").read_text(encoding="utf-8"))


def test_the_prose_quotes_the_recorded_answers_and_sizes(expected, meta):
    """The sizes in the page and on the index, the int8 sentence, and every answer "What to try" quotes, recomputed
    from expected.json and meta.json."""
    text, index = _prose("watch_think"), _prose("index")
    mb = {k: meta[k]["bytes"] / 1e6 for k in KEYS}
    shown = {k: f"{mb[k]:.2f}" if mb[k] < 1 else f"{mb[k]:.1f}" for k in KEYS}
    int8 = [k for k in KEYS if meta[k]["int8"]["shipped"] == "int8"]
    assert int8 == ["think_direct"], int8
    assert f"(about {shown['think_scratchpad']} MB, {shown['think_start']} MB and {shown['think_direct']} MB; the " \
        "direct model's file is int8)" in text  # fmt: skip
    sizes = f"{shown['think_scratchpad']} MB, {shown['think_start']} MB and {shown['think_direct']} MB"
    assert f"about {sizes} (int8)" in index
    changed = {meta[k]["int8"]["inputs"] - meta[k]["int8"]["agree"] for k in KEYS if k not in int8}
    assert changed == {2} and "the two addition models that write steps on 2 of their 50 each" in index
    assert meta["think_direct"]["int8"]["agree"] == meta["think_direct"]["int8"]["inputs"] == 50
    files = [meta[k]["file"] for k in KEYS]
    assert f"`{files[0]}`, `{files[1]}` and `{files[2]}` take" in text
    problems = {p["problem"]: p for p in expected["problems"]}
    cases = {(c["problem"], c["model"]): c for c in expected["cases"]}

    def wrote(problem: str, key: str) -> str:
        return problems[problem]["answers"][key]["text"]

    default = expected["examples"][0]
    assert f"**The problem the page opens with**, `{default}`, whose sum is {problems[default]['sum']}." in text
    assert arithmetic.steps_right(f"{default}=", wrote(default, "think_scratchpad"))
    start = wrote(default, "think_start")
    assert start.split(";")[0] == arithmetic.scratchpad(1975, 4116).split(";")[0] and start.split(";")[1] == "9+1+1=11"
    assert "`9+1+1=11` for the second, whose digits are 7 and 1" in text and arithmetic.final_answer(start) == 6111
    assert f"The direct model writes `{wrote(default, 'think_direct')}`" in text
    c = cases[default, "think_start"]
    sums = [s["sum"] for s in c["samples"]]
    assert (len(sums), c["seed"], len(set(sums)), c["votes"], c["vote_right"]) == (8, 1, 6, 3, True)
    assert not problems[default]["answers"]["think_start"]["right"]
    assert "Eight samples of the start model (seed 1) reach six different sums, and 6091, reached by three" in text
    c = cases[default, "think_scratchpad"]
    sums = [s["sum"] for s in c["samples"]]
    assert (c["seed"], sums.count(6091), sums.count(6090), len(sums)) == (2, 7, 1, 8)
    assert "(choose it, seed 2) reach 6091 seven times and 6090 once" in text
    c = cases[default, "think_direct"]
    sums = [s["sum"] for s in c["samples"]]
    assert (c["seed"], len(set(sums)), 6091 in sums, c["vote"]) == (1, 8, False, sums[0])
    assert "The direct model's eight (seed 1) reach eight different sums, none of them right" in text
    assert f"the vote takes the one reached first, {sums[0]}" in text
    assert wrote("478+356", "think_scratchpad") == wrote("478+356", "think_start") == "8+6+0=14;7+5+1=13;4+3+1=8;=834."
    assert f"the direct model writes `{wrote('478+356', 'think_direct')}`" in text
    c = cases["478+356", "think_start"]
    assert (len(c["samples"]), c["seed"], c["vote"], c["votes"]) == (16, 3, 834, 11)
    assert "Sixteen samples of the start model (seed 3) reach 834 eleven times" in text
    assert wrote("95+7", "think_scratchpad").split(";")[1] == "9+0+1=10" and "second step is `9+0+1=10`" in text
    assert f"The direct model writes `{wrote('95+7', 'think_direct')}`" in text
    five = "13458+86735"
    for key in ("think_scratchpad", "think_start"):
        steps = wrote(five, key).split(";")
        assert len(steps) == 5 and steps[1] == "4+3+1=8" and arithmetic.final_answer(wrote(five, key)) == 12183
    c = cases[five, "think_scratchpad"]
    assert c["seed"] == 1 and [s["text"] for s in c["samples"]] == [wrote(five, "think_scratchpad")] * 4
    assert "All four samples of the scratchpad model (seed 1) write that same answer" in text
    assert all(problems["7+8"]["answers"][k]["right"] for k in KEYS)
    c = cases["7+8", "think_direct"]
    assert (c["seed"], [s["text"] for s in c["samples"]]) == (2, ["14."]) and "(seed 2) writes `14.`" in text
