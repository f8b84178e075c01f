"""The playgrounds answer in headless Chromium, with the network closed, as PyTorch does.

tools/build_playground.py (run by `make book`) wrote PyTorch's answers on fixed inputs into
_static/playground/expected.json; these tests type the same inputs into the pages and compare.
Where a page runs an int8 file (meta.json's "int8" trial), its discrete answers (words, verdicts, greedy
text, top three) must still be PyTorch fp32's, counted and reported at the end of the run, and its numbers
must be the int8 file's own, which the build computed in onnxruntime (expected.json's "onnx").
They also check the messages for bad input, that only playground pages fetch the runtime, the
controls' labels and keyboard use, and they record each model's load and first-answer time.
A site built without npm has no playground files: the tests skip loudly, and fail under CI=true.
"""

from __future__ import annotations

import json

import pytest

import transformer_lib as tl

from .checks import network_problems
from .conftest import ROOT, SITE, _missing

pytestmark = pytest.mark.browser
BUILT = SITE / "_static" / "playground"
PAGES = {
    "numbers_to_words": "numbers",
    "masks": "masks",
    "shakespeare_char": "language_model",
    "bracket_classifier": "brackets",
    "inside": "inside",
    "inside_ablation": "inside",  # the same page's switches ("Break it, and watch"): test_break_it.py
    "fill_blank": "fill_blank",  # its own answers and messages are tested in test_fill_blank.py
    "draw_digit": "draw_digit",  # its own answers, keyboard drawing and empty-drawing message: test_draw_digit.py
    # three models on one page, one file each; their answers, messages and keyboard use: test_assistant.py
    "assistant_base": "assistant",
    "assistant_sft": "assistant",
    "assistant_grpo": "assistant",
    "mend_line": "mend_line",  # its own answers, messages and keyboard use: test_mend_line.py
    # the model and the codec's decoder on one page; its clips, messages, keyboard use and sound: test_hear_keys.py
    "hear_keys_viola": "hear_keys",
    "hear_keys_codec": "hear_keys",
    # three addition models on one page, one file each; their answers, samples, vote, messages: test_watch_think.py
    "think_scratchpad": "watch_think",
    "think_start": "watch_think",
    "think_direct": "watch_think",
}
ANSWERED = (
    "key => window.playgroundTimings && window.playgroundTimings[key] && "
    "window.playgroundTimings[key].first_answer_ms !== undefined"
)


@pytest.fixture(scope="module")
def expected() -> dict:
    if not (BUILT / "expected.json").is_file():
        _missing("the playgrounds were not built (no npm when `make book` ran); install nodejs and npm")
    return json.loads((BUILT / "expected.json").read_text())


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((BUILT / "models" / "meta.json").read_text())


def built_entry(key: str, path: str) -> dict:
    """Page `key`'s entry of a file the playgrounds' build wrote (expected.json, models/meta.json); skips loudly (fails
    under CI=true) when the playgrounds were not built, and fails when the site predates the page."""
    if not (BUILT / "expected.json").is_file():
        _missing("the playgrounds were not built (no npm when `make book` ran); install nodejs and npm")
    everything = json.loads((BUILT / path).read_text())
    assert key in everything, f"{path} has no {key!r}: the site was built before the page existed; run `make book`"
    return everything[key]


def tab_to(page, selector: str, presses: int = 150) -> None:
    """Press Tab until the element `selector` has the focus; fail when it never does."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement === document.querySelector(s)", selector):
            return
    pytest.fail(f"Tab never reached {selector}")


def unlabelled_controls(page) -> list[str]:
    """The ids of the playground's fields without a label and buttons without text: a screen reader names neither."""
    return page.eval_on_selector_all(
        ".playground input, .playground select, .playground textarea, .playground button",
        "els => els.filter(e => e.tagName !== 'BUTTON' ? !e.labels || !e.labels.length : !e.textContent.trim())"
        ".map(e => e.id)",
    )


def refused(page, prefix: str, text: str, field: str = "text", button: str = "go") -> str:
    """Type `text` into #<prefix>-<field>, press #<prefix>-<button>, wait for the page's alert (#<prefix>-error);
    require the alert's role and the field marked invalid; return the message."""
    page.fill(f"#{prefix}-{field}", text)
    page.click(f"#{prefix}-{button}")
    page.wait_for_function("s => document.querySelector(s).textContent !== ''", arg=f"#{prefix}-error", timeout=10_000)
    assert page.get_attribute(f"#{prefix}-error", "role") == "alert"
    assert page.get_attribute(f"#{prefix}-{field}", "aria-invalid") == "true"
    return page.text_content(f"#{prefix}-error")


def _open(page, site_url, key, request=None):
    """Open a playground and wait for its first answer (the page answers its default input by itself)."""
    response = page.goto(f"{site_url}/book/playground/{PAGES[key]}.html", wait_until="load")
    assert response is not None and response.status == 200
    page.wait_for_function(ANSWERED, arg=key, timeout=120_000)
    if request is not None:  # record the times for the terminal summary (conftest.py)
        times = request.config.__dict__.setdefault("playground_times", {})
        times[key] = page.evaluate("key => window.playgroundTimings[key]", key)
    return page


def _agreement(request, key: str, agree: int, total: int) -> None:
    """Record how many of a page's answers agree with PyTorch fp32 for the terminal summary (conftest.py), then
    require all of them: the build ships an int8 file only where its answers on these inputs are PyTorch's."""
    request.config.__dict__.setdefault("playground_agreement", {})[key] = (agree, total)
    assert agree == total, f"{key}: only {agree} of {total} answers are PyTorch fp32's"


def _status_after(page, element_id, action, timeout=60_000) -> str:
    """Empty the live region `element_id`, do `action`, wait until the page writes its result there; return it.

    Each page writes its live region once, when the answer is complete."""
    page.eval_on_selector(f"#{element_id}", "e => { e.textContent = ''; }")
    action()
    page.wait_for_function("id => document.getElementById(id).textContent !== ''", arg=element_id, timeout=timeout)
    return page.text_content(f"#{element_id}")


def _set_range(page, selector, value):
    page.eval_on_selector(selector, "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", str(value))


def _write_greedy(page, prompt: str, new: int) -> str:
    """Write `new` characters after `prompt` at temperature 0 on the language-model page; return the text."""
    page.wait_for_function("() => document.getElementById('lm-playground').dataset.busy !== 'true'")  # none running
    page.fill("#lm-prompt", prompt)
    page.fill("#lm-length", str(new))
    _set_range(page, "#lm-temperature", 0)
    status = _status_after(page, "lm-status", lambda: page.click("#lm-generate"))
    assert status.startswith("Done"), status
    return page.text_content("#lm-generated")


def test_numbers_to_words_writes_pytorchs_greedy_words(page, site_url, expected, request):
    _open(page, site_url, "numbers_to_words", request)
    agree = 0
    for number, words in expected["numbers_to_words"].items():
        page.fill("#numbers-input", number)
        status = _status_after(page, "numbers-status", lambda: page.press("#numbers-input", "Enter"))
        assert status.startswith(number.zfill(5)), status
        written = page.text_content("#numbers-output")
        agree += written == words
        if written != words:
            continue  # counted: _agreement fails the test below and says how many
        cells = page.eval_on_selector_all("#numbers-map rect[data-w]", "els => els.map(e => +e.dataset.w)")
        assert len(cells) == 5 * (len(words.replace("-", "- ").split()) + 1)  # one row per word and one for <eos>
        if number == "4021":  # the page's claim on layer 2's mean: "four" looks at the thousands, "twenty-" the tens
            four, twenty = cells[0:5], cells[10:15]
            assert four.index(max(four)) == 1 and twenty.index(max(twenty)) == 3, (four, twenty)
    _agreement(request, "numbers_to_words", agree, len(expected["numbers_to_words"]))
    assert not network_problems(page)


def test_numbers_to_words_cross_attention_rows_sum_to_one_for_every_head(page, site_url):
    _open(page, site_url, "numbers_to_words")
    for layer in ("0", "1"):
        for head in ("0", "1", "2", "3", "mean"):
            page.select_option("#numbers-layer", layer)
            page.select_option("#numbers-head", head)
            sums = page.eval_on_selector_all(
                "#numbers-map svg",
                """svgs => {
                const rows = {};
                svgs[0].querySelectorAll('rect[data-w]').forEach(r => {
                    rows[r.dataset.row] = (rows[r.dataset.row] || 0) + Number(r.dataset.w); });
                return Object.values(rows); }""",
            )
            assert sums and all(abs(s - 1) < 1e-4 for s in sums), (layer, head, sums)


def test_language_model_at_temperature_0_writes_pytorchs_greedy_text(page, site_url, expected, request):
    _open(page, site_url, "shakespeare_char", request)
    agree = 0
    for case in expected["shakespeare_char"]["greedy"]:
        agree += _write_greedy(page, case["prompt"], case["new"]) == case["text"]
        chosen = page.eval_on_selector_all("#lm-candidates tbody tr", "rows => rows.map(r => r.className)")
        assert chosen[0] == "playground-chosen"  # greedy takes the likeliest, the table's first row
    _agreement(request, "shakespeare_char", agree, len(expected["shakespeare_char"]["greedy"]))
    assert not network_problems(page)


def test_language_model_keeps_a_kv_cache_and_writes_the_longest_text_as_pytorch(page, site_url, expected, meta):
    """The page feeds the prompt once, then only the character just chosen: the step model's cache holds the rest.
    Up to the model's last position its greedy text is PyTorch's, and ?cache=0 (the benchmark's run without the
    cache, the whole text at every step) writes the same."""
    case = expected["shakespeare_char"]["longest"]
    assert len(case["prompt"]) + case["new"] == meta["shakespeare_char"]["max_len"]  # every position the model has
    for query, fed in (("", [len(case["prompt"])] + [1] * (case["new"] - 1)), ("?cache=0", None)):
        page.goto(f"{site_url}/book/playground/language_model.html{query}", wait_until="load")
        page.wait_for_function(ANSWERED, arg="shakespeare_char", timeout=120_000)
        text = _write_greedy(page, case["prompt"], case["new"])
        assert text == case["text"], f"{query or 'with the cache'}: not PyTorch's text"
        run = page.evaluate("() => window.playgroundTimings.shakespeare_char.last_run")
        without = list(range(len(case["prompt"]), meta["shakespeare_char"]["max_len"]))  # the whole text each step
        assert run["cache"] == (query == "") and run["fed"] == (fed or without), run["fed"]
    assert not network_problems(page)


def test_language_model_samples_from_pytorchs_distribution_after_temperature_top_k_and_top_p(page, site_url, expected):
    """One step at temperature 0.8, top-k 5, top-p 0.6: the table's two columns are _sample_next's numbers."""
    _open(page, site_url, "shakespeare_char")
    case = expected["shakespeare_char"]["sampling"]
    page.fill("#lm-prompt", case["prompt"])
    page.fill("#lm-length", "1")
    page.fill("#lm-topk", str(case["top_k"]))
    _set_range(page, "#lm-temperature", case["temperature"])
    _set_range(page, "#lm-topp", case["top_p"])
    _status_after(page, "lm-status", lambda: page.click("#lm-generate"))
    table = page.eval_on_selector_all(
        "#lm-candidates tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    shown = {"\n": "↵", " ": "␣"}
    assert [row[0] for row in table[:8]] == [shown.get(t, t) for t in case["tokens"]]
    for row, p, drawn in zip(table, case["probs"], case["drawn"]):
        assert abs(float(row[1]) - p) <= 6e-4 and abs(float(row[2]) - drawn) <= 6e-4, (row, p, drawn)
    assert sum(d > 0 for d in case["drawn"]) < case["top_k"]  # top-p cut inside the top-k: both filters were used


def test_language_model_samples_repeat_with_their_seed_and_top_k_1_is_greedy(page, site_url, expected):
    _open(page, site_url, "shakespeare_char")
    greedy = expected["shakespeare_char"]["greedy"][0]
    page.fill("#lm-prompt", greedy["prompt"])
    page.fill("#lm-length", "40")

    def sample(seed, temperature=1.0, top_k=0):
        page.fill("#lm-seed", str(seed))
        page.fill("#lm-topk", str(top_k))
        _set_range(page, "#lm-temperature", temperature)
        _status_after(page, "lm-status", lambda: page.click("#lm-generate"))
        return page.text_content("#lm-generated")

    first = sample(3)
    assert sample(3) == first and sample(4) != first
    assert sample(5, temperature=1.5, top_k=1) == greedy["text"][:40]
    shown = page.eval_on_selector_all("#lm-candidates tbody tr td:nth-child(3)", "tds => tds.map(t => t.textContent)")
    assert shown[0] == "1.000" and set(shown[1:]) == {"0.000"}  # top-k 1 draws only the likeliest


def test_brackets_probability_equals_pytorchs(page, site_url, expected, meta, request):
    _open(page, site_url, "bracket_classifier", request)
    partner = meta["bracket_classifier"]["partner"]
    assert page.input_value("#brackets-layer") == str(partner["layer"])  # the page opens on the partner head
    assert page.input_value("#brackets-head") == str(partner["head"])
    own = expected.get("onnx", {}).get("bracket_classifier")  # the int8 file's own P(balanced), when it ships
    trial = meta["bracket_classifier"]["int8"]
    assert (own is not None) == (trial["shipped"] == "int8")
    moved = trial.get("max_probability_change", 0.0)  # the most the int8 file moved P on the build's 300 strings
    agree = 0
    for text, p in expected["bracket_classifier"].items():
        status = _status_after(page, "brackets-status", lambda t=text: page.fill("#brackets-text", t))
        assert status.startswith(f"{text}: P(balanced)"), status
        shown = float(page.text_content("#brackets-probability"))
        if own is not None:  # the page computes what the int8 file computes in Python
            assert abs(shown - own[text]) <= 6e-5, f"{text}: the page says {shown}, the int8 file {own[text]:.6f}"
        assert abs(shown - p) <= 6e-5 + moved, f"{text}: the page says {shown}, PyTorch {p:.6f}"
        agree += (shown > 0.5) == (p > 0.5)  # the verdict
        outlined = page.eval_on_selector_all("#brackets-map rect.playground-outlined", "els => els.length")
        if tl.is_balanced(text):
            assert outlined == len(text)  # every bracket's partner is outlined
    _agreement(request, "bracket_classifier", agree, len(expected["bracket_classifier"]))
    assert not network_problems(page)


def test_masks_give_pytorchs_weights_and_zeros_for_a_fully_masked_row(page, site_url, expected, request):
    _open(page, site_url, "masks", request)
    case = expected["masks"]
    assert page.input_value("#masks-text") == case["text"] and page.input_value("#masks-pad") == str(case["pad"])
    cells = "els => els.map(e => [+e.dataset.row, +e.dataset.col, +e.dataset.w])"  # (row, column, weight) each
    weights = page.eval_on_selector_all("#masks-map rect[data-w]", cells)
    head0 = case["weights"][0]  # (T, T) of head 1
    assert len(weights) == len(head0) ** 2
    _agreement(request, "masks", sum(abs(w - head0[r][c]) < 1e-5 for r, c, w in weights), len(weights))
    assert all(w == 0 for r, c, w in weights if r < case["pad"])  # the two left pads' rows: all zeros, no NaN
    table = page.eval_on_selector_all("#masks-map details tbody tr", "rows => rows.map(r => r.cells[3].textContent)")
    assert table == ["masked", "masked", f"{head0[2][2]:.2f}", *[f"{head0[r][2]:.2f}" for r in range(3, 7)]]
    summary = page.text_content("#masks-status")
    assert "Fully masked rows: 1, 2. Their weights are all 0, and no weight is NaN" in summary
    status = _status_after(page, "masks-status", lambda: page.select_option("#masks-side", "right"))
    assert "No row is fully masked" in status
    status = _status_after(page, "masks-status", lambda: page.uncheck("#masks-causal"))
    hatched = page.eval_on_selector_all("#masks-map rect[fill^='url']", "els => els.length")
    assert "causal mask off" in status and hatched == 7 * 2  # only the two pad columns stay masked
    assert not network_problems(page)


def _lens_and_scores(page) -> tuple[list, list]:
    """The inside page's answer: (per layer, per position, the shown candidates as (token, p)), (per layer, per head,
    the induction scores); both read from the exact values the page keeps in data attributes."""
    lens = page.eval_on_selector_all(
        "#inside-lens tbody tr",
        """rows => rows.map(r => [...r.querySelectorAll('td.inside-candidates')].map(td =>
            [...td.querySelectorAll('.inside-candidate')].map(c => [c.dataset.token, Number(c.dataset.p)])))""",
    )  # (T, L, 3, 2)
    scores = page.eval_on_selector_all(
        "#inside-induction tbody tr", "rows => rows.map(r => [...r.querySelectorAll('td')].map(c => +c.dataset.score))"
    )  # (L, h)
    return [list(layer) for layer in zip(*lens)], scores  # (L, T, 3, 2), (L, h)


def _assert_inside_equals(page, case) -> tuple[int, int]:
    """Require the page's lens and induction scores to be PyTorch's; returns (cells whose top three agree, cells)."""
    lens, scores = _lens_and_scores(page)
    tops = [[[t for t, _ in cell] for cell in layer] for layer in lens]  # (L, T, 3)
    pairs = [(a, b) for got, want in zip(tops, case["top"]) for a, b in zip(got, want)]
    agree = sum(a == b for a, b in pairs)
    assert tops == case["top"], f"not PyTorch's top three in {len(pairs) - agree} of {len(pairs)} cells"
    worst = max(
        abs(p - q)
        for layer, ps in zip(lens, case["probs"])
        for cell, qs in zip(layer, ps)
        for (_, p), q in zip(cell, qs)
    )
    assert worst < 5e-5, f"the lens's probabilities differ from PyTorch's by {worst:.1e}"
    assert len(scores) == len(case["induction"])
    worst = max(abs(a - b) for row, expected in zip(scores, case["induction"]) for a, b in zip(row, expected))
    assert worst < 1e-5, f"the induction scores differ from PyTorch's by {worst:.1e}"
    return agree, len(pairs)


def test_inside_shows_pytorchs_logit_lens_and_induction_scores(page, site_url, expected, meta, request):
    """The verse the page opens with, then the repeated random string that the button draws for the build's seed:
    per layer and position the same three likeliest next characters as tl.inside.logit_lens, with its probabilities,
    and every head's induction score as tl.inside.induction_scores."""
    _open(page, site_url, "inside", request)
    verse, random = expected["inside"]["verse"], expected["inside"]["random"]
    assert page.input_value("#inside-text") == verse["text"]
    agree, cells = _assert_inside_equals(page, verse)
    page.fill("#inside-seed", str(random["seed"]))
    status = _status_after(page, "inside-status", lambda: page.click("#inside-random"))
    assert page.input_value("#inside-text") == random["text"], "the button drew another string for the seed"
    assert (
        len(random["text"]) == 2 * meta["inside"]["random_block"]
        and random["text"][: random["block"]] * 2 == random["text"]
    )
    assert status.startswith(
        f"A random string of {random['block']} characters (seed {random['seed']}), shown twice."
    ), status
    more = _assert_inside_equals(page, random)
    _agreement(request, "inside", agree + more[0], cells + more[1])
    again = _status_after(page, "inside-status", lambda: page.click("#inside-random"))
    assert again == status and page.input_value("#inside-text") == random["text"]  # the same seed, the same string
    page.fill("#inside-seed", str(random["seed"] + 1))
    _status_after(page, "inside-status", lambda: page.click("#inside-random"))
    assert page.input_value("#inside-text") != random["text"]
    assert not network_problems(page)


def test_inside_draws_any_heads_attention_with_the_induction_targets_outlined(page, site_url, expected, meta):
    _open(page, site_url, "inside")
    random = expected["inside"]["random"]
    page.fill("#inside-seed", str(random["seed"]))
    _status_after(page, "inside-status", lambda: page.click("#inside-random"))
    text = random["text"]
    targets = sum(1 for t, c in enumerate(text) for s in range(1, t + 1) if text[s - 1] == c)  # (query, key) pairs
    row_sums = """svg => { const rows = {};
        svg.querySelectorAll('rect[data-w]').forEach(r => {
            rows[r.dataset.row] = (rows[r.dataset.row] || 0) + Number(r.dataset.w); });
        return Object.values(rows); }"""
    for layer in range(meta["inside"]["layers"]):
        for head in range(meta["inside"]["heads"]):
            page.select_option("#inside-layer", index=layer)
            page.select_option("#inside-head", index=head)
            label = page.get_attribute("#inside-map svg", "aria-label")
            assert label.startswith(
                f"Attention weights of layer {layer + 1}, head {head + 1} on {len(text)} characters"
            )
            sums = page.eval_on_selector("#inside-map svg", row_sums)
            assert len(sums) == len(text) and all(abs(x - 1) < 1e-4 for x in sums), (layer, head)
    assert page.eval_on_selector_all("#inside-map rect.playground-outlined", "els => els.length") == targets
    assert not network_problems(page)


def test_inside_says_when_no_character_repeats(page, site_url, expected):
    _open(page, site_url, "inside")
    status = _status_after(page, "inside-status", lambda: page.fill("#inside-text", "Juliet."))
    assert "No character repeats, so no head has an induction score." in status
    note = page.text_content("#inside-induction-note")
    assert note.startswith("None of your 7 characters repeats an earlier one") and "no score exists" in note
    assert page.eval_on_selector("#inside-induction", "t => t.hidden") and not page.query_selector_all(
        "#inside-induction tbody tr"
    )
    assert len(page.query_selector_all("#inside-lens tbody tr")) == 7  # the lens is still shown
    assert not network_problems(page)


BAD_INPUTS = [
    ("numbers_to_words", "#numbers-input", "", "The field is empty"),
    ("numbers_to_words", "#numbers-input", "12a", "“a” is not in its vocabulary"),
    ("numbers_to_words", "#numbers-input", "123456", "out of range"),
    ("numbers_to_words", "#numbers-input", "-5", "out of range"),
    ("shakespeare_char", "#lm-prompt", "", "The prompt is empty"),
    ("shakespeare_char", "#lm-prompt", "ROMEO€", "never seen “€”"),
    ("shakespeare_char", "#lm-prompt", "To be " * 20, "more than the model's 128 positions"),
    ("shakespeare_char", "#lm-seed", "", "The seed must be a whole number"),
    ("shakespeare_char", "#lm-topk", "", "Top-k must be a whole number"),
    ("bracket_classifier", "#brackets-text", "", "The field is empty"),
    ("bracket_classifier", "#brackets-text", "(a)", "“a” is not in its vocabulary"),
    ("bracket_classifier", "#brackets-text", "()" * 40, "more than the model's 64 positions"),
    ("masks", "#masks-text", "", "The text is empty"),
    ("masks", "#masks-text", "to be€", "“€” is not in the model's vocabulary"),
    ("masks", "#masks-pad", "99", "Pad tokens must be a whole number from 0 to 16"),
    ("masks", "#masks-pad", "", "Pad tokens must be a whole number from 0 to 16"),
    ("inside", "#inside-text", "", "The text is empty"),
    ("inside", "#inside-text", "To be€", "never seen “€”"),
    ("inside", "#inside-text", "To be " * 22, "132 characters, more than the model's 128 positions"),
    ("inside", "#inside-seed", "", "The seed must be a whole number"),
    ("inside", "#inside-seed", "1.5", "The seed must be a whole number"),
]
BUTTON = {"#numbers-input": "#numbers-translate", "#lm-prompt": "#lm-generate", "#inside-seed": "#inside-random"}


@pytest.mark.parametrize("key, field, value, message", BAD_INPUTS)
def test_bad_input_gets_a_message_in_the_page_not_an_error_in_the_console(
    page, site_url, expected, key, field, value, message
):
    _open(page, site_url, key)
    error = {
        "numbers_to_words": "#numbers-error",
        "shakespeare_char": "#lm-error",
        "masks": "#masks-error",
        "bracket_classifier": "#brackets-error",
        "inside": "#inside-error",
    }[key]
    page.fill(field, value)
    if field in BUTTON or key == "shakespeare_char":
        page.click(BUTTON.get(field, "#lm-generate"))
    page.wait_for_function("sel => document.querySelector(sel).textContent !== ''", arg=error, timeout=10_000)
    assert message in page.text_content(error)
    assert page.get_attribute(error, "role") == "alert" and page.get_attribute(field, "aria-invalid") == "true"
    answer = {
        "numbers_to_words": "#numbers-output",
        "shakespeare_char": "#lm-generated",
        "masks": "#masks-map",
        "bracket_classifier": "#brackets-probability",
        "inside": "#inside-lens tbody",
    }[key]
    if field == "#inside-seed":  # the text is unchanged and valid: its answer stays, only no new string is drawn
        assert page.input_value("#inside-text") == expected["inside"]["verse"]["text"]
    else:
        assert page.text_content(answer) == "", "the previous input's answer stayed on the page next to the error"
    assert not page.console_errors, page.console_errors


def test_only_playground_pages_fetch_the_runtime(page, site_url, expected, meta):
    fetched = []
    page.on("request", lambda r: fetched.append(r.url))
    for path in ("book/intro.html", "notebooks/05_masks.html", "book/playground/index.html"):
        page.goto(f"{site_url}/{path}", wait_until="load")
        page.wait_for_load_state("networkidle")
    assert not [u for u in fetched if "/_static/playground/" in u], "a page that is not a playground loaded its files"
    _open(page, site_url, "bracket_classifier")
    assert any(u.endswith("vendor/ort-wasm-simd-threaded.wasm") for u in fetched)
    assert any(u.endswith(f"models/{meta['bracket_classifier']['file']}") for u in fetched)


def test_playgrounds_work_from_the_keyboard_and_announce_results(page, site_url, expected):
    _open(page, site_url, "numbers_to_words")
    for _ in range(80):  # Tab from the top of the page to the number field
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == "numbers-input":
            break
    else:
        pytest.fail("Tab never reached the number field")
    page.keyboard.press("Control+A")
    page.keyboard.type("57913")
    status = _status_after(page, "numbers-status", lambda: page.keyboard.press("Enter"))
    assert status == f"57913 in words: {expected['numbers_to_words']['57913']}."
    assert page.get_attribute("#numbers-status", "aria-live") == "polite"
    for key in PAGES:
        _open(page, site_url, key)
        unlabelled = unlabelled_controls(page)
        assert not unlabelled, f"{key}: controls without a label: {unlabelled}"


def test_each_page_states_its_model_size(meta):
    """The pages say 'about N MB' in their text; the built files must be that size (within 10%)."""
    import re

    for key, name in PAGES.items():
        if list(PAGES.values()).count(name) > 1:
            continue  # a page of several models says each one's size by its name: test_assistant.py holds it
        text = (SITE / "book" / "playground" / f"{name}.html").read_text()
        stated = float(re.search(r"about ([\d.]+) MB", text).group(1))
        actual = meta[key]["bytes"] / 1e6
        assert abs(stated - actual) <= 0.1 * actual, f"{name}: the page says {stated} MB, the file is {actual:.2f}"


def test_the_prose_quotes_pytorchs_answers_on_the_pages_defaults(expected):
    """The numbers that the pages' prose computes from their starting inputs (book/_static/playground/defaults.json,
    the inputs of expected.json): the default brackets' P(balanced), and on the inside page, how often layers 3 and 4
    rank the verse's next character first and the range of the induction scores on the default seed's string."""
    import re

    def prose(name: str) -> str:
        return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / f"{name}.md").read_text(encoding="utf-8"))

    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    text = defaults["brackets"]["brackets-text"]
    assert f"`{text}` ({expected['bracket_classifier'][text]:.2f})" in prose("brackets")
    verse, random = expected["inside"]["verse"], expected["inside"]["random"]
    assert verse["text"] == defaults["inside"]["inside-text"] and random["seed"] == defaults["inside"]["inside-seed"]
    T = len(verse["text"]) - 1  # the positions that have a next character
    first = [sum(layer[t][0] == verse["text"][t + 1] for t in range(T)) for layer in verse["top"]]  # per layer
    said = f"first at {first[2]} of {T} positions) and layer 4, the model itself, at {first[3]} of {T}."
    assert said in prose("inside"), f"layers 3 and 4 rank the next character first at {first[2:]} of {T}"
    scores = [s for layer in random["induction"] for s in layer]
    assert (
        f"On the random string with seed {random['seed']} every one of its {len(scores)} heads scores between "
        f"{min(scores):.3f} and {max(scores):.3f}" in prose("inside")
    )


def test_int8_files_ship_only_where_every_answer_agreed_with_pytorch(meta):
    """meta.json's int8 trial per model (tools/build_playground.py): the page's file is the int8 one exactly where all
    its answers on the build's fixed inputs were PyTorch fp32's; the sizes are the files'; only shipped files are in
    the site. The counts are printed at the end of the run (conftest.py). A file with no matrix product (the codec's
    decoder: convolutions and a lookup) is not tried, ships in fp32 and says why."""
    shipped = set()
    for key in PAGES:
        m, trial = meta[key], meta[key]["int8"]
        if "not_tried" in trial:
            assert trial == {"shipped": "fp32", "not_tried": trial["not_tried"]}
            assert not m["file"].endswith(".int8.onnx")
            assert key == "hear_keys_codec", f"{key}: only the codec's decoder has no matrix product to quantize"
            shipped.add(m["file"])
            continue
        assert trial["inputs"] >= 50 and 0 <= trial["agree"] <= trial["inputs"], trial
        assert (trial["shipped"] == "int8") == (trial["agree"] == trial["inputs"]), f"{key}: {trial}"
        assert m["file"].endswith(".int8.onnx") == (trial["shipped"] == "int8"), m["file"]
        assert m["bytes"] == (BUILT / "models" / m["file"]).stat().st_size == trial[f"{trial['shipped']}_bytes"]
        assert trial["int8_bytes"] < trial["fp32_bytes"], f"{key}: int8 is not smaller"
        shipped.add(m["file"])
    assert {f.name for f in (BUILT / "models").glob("*.onnx")} == shipped, "a file the pages never load was shipped"


STATUS = {
    "numbers_to_words": "#numbers-status",
    "shakespeare_char": "#lm-status",
    "masks": "#masks-status",
    "bracket_classifier": "#brackets-status",
    "inside": "#inside-status",
    "inside_ablation": "#inside-break-status",
    "fill_blank": "#fill-status",
    "draw_digit": "#draw-status",
    "assistant_base": "#assistant-status",
    "assistant_sft": "#assistant-status",
    "assistant_grpo": "#assistant-status",
    "mend_line": "#mend-status",
    "hear_keys_viola": "#hear-status",
    "hear_keys_codec": "#hear-status",
    "think_scratchpad": "#think-status",
    "think_start": "#think-status",
    "think_direct": "#think-status",
}
# Another page's model: onnxruntime loads it, but the page cannot run it (other inputs than the page feeds)
WRONG_MODEL = {
    "numbers_to_words": "bracket_classifier",
    "shakespeare_char": "numbers_to_words",
    "masks": "numbers_to_words",
    "bracket_classifier": "masks",
    "inside": "numbers_to_words",
    "inside_ablation": "numbers_to_words",
    "fill_blank": "numbers_to_words",
    "draw_digit": "numbers_to_words",
    "assistant_base": "numbers_to_words",
    "assistant_sft": "numbers_to_words",
    "assistant_grpo": "numbers_to_words",
    "mend_line": "fill_blank",  # the numbers model has src and tgt too, and would run
    "hear_keys_viola": "numbers_to_words",
    "hear_keys_codec": "numbers_to_words",
    "think_scratchpad": "numbers_to_words",
    "think_start": "numbers_to_words",
    "think_direct": "numbers_to_words",
}


def _failing(page, site_url, key, meta, body: bytes) -> str:
    """Open playground `key` with its model file answered by `body`; return its status line once it says it failed."""
    page.route(f"**/_static/playground/models/{meta[key]['file']}", lambda r: r.fulfill(status=200, body=body))
    response = page.goto(f"{site_url}/book/playground/{PAGES[key]}.html", wait_until="load")
    assert response is not None and response.status == 200
    failed = "sel => /could not start|went wrong/.test(document.querySelector(sel).textContent)"
    page.wait_for_function(failed, arg=STATUS[key], timeout=60_000)
    return page.text_content(STATUS[key])


@pytest.mark.parametrize("key", PAGES)
def test_a_broken_model_file_is_said_in_the_page_and_in_the_console(page, site_url, meta, key):
    """The model file is cut short: the page's status line says it could not start, and so does the console."""
    model = (BUILT / "models" / meta[key]["file"]).read_bytes()
    status = _failing(page, site_url, key, meta, model[: len(model) // 3])
    assert status.startswith("This playground could not start ("), status
    logged = [e for e in page.console_errors if e.startswith(f"Playground {key}: loading the model")]
    assert logged and status in logged[0], page.console_errors
    assert page.evaluate("key => (window.playgroundTimings || {})[key]", key) is None  # it never loaded


@pytest.mark.parametrize("key", PAGES)
def test_an_error_after_the_model_loads_is_said_in_the_page_and_in_the_console(page, site_url, meta, key):
    """Another model in the file: it loads, then the page's first run fails. Before, that was caught and not
    logged, so a bug after loading left no trace in the console; now both the page and the console say it."""
    other = meta[WRONG_MODEL[key]]["file"]
    status = _failing(page, site_url, key, meta, (BUILT / "models" / other).read_bytes())
    assert status.startswith("Something went wrong while the model ran: "), status
    page_name = PAGES[key].replace("_", " ")
    logged = [e for e in page.console_errors if e.startswith(f"Playground {page_name}: ")]
    assert logged and status in logged[0], page.console_errors
    assert "load_ms" in page.evaluate("key => window.playgroundTimings[key]", key)  # the model itself loaded
