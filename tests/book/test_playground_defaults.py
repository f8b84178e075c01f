"""Each playground's defaults are written once, in book/_static/playground/defaults.json: the page's form starts
with them (playground.js's fillDefaults) and the build records PyTorch's answers on them (tools/playground_build/).

These tests hold the three together without a browser: the build's inputs are read from the file, every field
the file names is a field of its page that has no starting value of its own in the HTML, every page's script
fills its form from it, and the pages' prose says what the file holds where it quotes a default.
"""

from __future__ import annotations

import importlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from playground_build import (
    ablation,
    assistant,
    brackets,
    common,
    draw_digit,
    fill_blank,
    hear_keys,
    inside,
    language_model,
    masks,
    mend_line,
    numbers_to_words,
    watch_think,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = ROOT / "book" / "_static" / "playground" / "defaults.json"
PAGES = ROOT / "book" / "playground"
SCRIPTS = ROOT / "book" / "_static" / "playground"
MODULES = [numbers_to_words, language_model, masks, brackets, inside, ablation, fill_blank, draw_digit, assistant]
MODULES += [mend_line, hear_keys, watch_think]  # mend_line after fill_blank, whose patterns it reads


def _defaults() -> dict:
    return json.loads(DEFAULTS.read_text(encoding="utf-8"))


def _build_inputs() -> dict:
    """What the build's modules record answers for, as they hold it now."""
    return {
        "numbers": numbers_to_words.NUMBERS[0],
        "prompt": language_model.PROMPTS[0],
        "sampling": (language_model.SAMPLING["prompt"], language_model.SAMPLING["temperature"]),
        "masks": masks.MASKS,
        "brackets": brackets.QUOTED,
        "verse": inside.VERSE,
        "broken": ablation.PROMPT,
        "seed": inside.RANDOM["seed"],
        "line": fill_blank.LINES["default"],
        "digit": draw_digit.EXAMPLE,
        "assistant": (assistant.EXAMPLES[0], assistant.LINES[0]),
        "mend": (mend_line.LINES["default"], mend_line.PAGE["mend-beam"]),
        "hear": (hear_keys.DEFAULT, hear_keys.CASES[0]),
        "think": (watch_think.EXAMPLES[0], watch_think.PROBLEMS[0], watch_think.DEFAULT, watch_think.CASES[0]),
    }


def _expected_inputs(d: dict) -> dict:
    """What the build must record answers for, given the defaults file's content `d`."""
    lm, m, h = d["language_model"], d["masks"], d["hear_keys"]
    hear = (h["hear-keys"], float(h["hear-temperature"]), h["hear-seed"])
    w = d["watch_think"]
    think = (w["think-problem"], w["think-model"], int(w["think-samples"]), w["think-seed"])
    return {
        "numbers": d["numbers"]["numbers-input"],
        "prompt": (lm["lm-prompt"], lm["lm-length"]),
        "sampling": (lm["lm-prompt"], lm["lm-temperature"]),
        "masks": {
            "text": m["masks-text"],
            "pad": m["masks-pad"],
            "side": m["masks-side"],
            "padding_mask": m["masks-padding"],
            "causal": m["masks-causal"],
        },
        "brackets": ["([()])[]", "([(])][]", d["brackets"]["brackets-text"], "[]"],
        "verse": d["inside"]["inside-text"],
        "broken": d["inside"]["inside-text"],  # the switches' text continues the page's text
        "seed": d["inside"]["inside-seed"],
        "line": d["fill_blank"]["fill-text"],
        "digit": d["draw_digit"]["draw-example"],
        "assistant": (d["assistant"]["assistant-line"], d["assistant"]["assistant-line"]),
        "mend": (d["mend_line"]["mend-text"], d["mend_line"]["mend-beam"]),
        "hear": (hear, hear),  # the default case is the first one recorded
        "think": (w["think-problem"], w["think-problem"], think, think),  # the default problem and case, first
    }


def test_the_build_records_answers_for_the_pages_defaults():
    assert common.DEFAULTS == DEFAULTS
    assert _build_inputs() == _expected_inputs(_defaults())
    assert (
        brackets.QUOTED[2] in brackets.BRACKETS
        and numbers_to_words.NUMBERS[0] == _defaults()["numbers"]["numbers-input"]
    )


def test_the_build_reads_its_defaults_from_the_file_not_from_constants(tmp_path, monkeypatch):
    """Other defaults in the file give other inputs in the build: nothing is written twice."""
    d = _defaults()
    d["numbers"]["numbers-input"] = "31415"
    d["language_model"].update({"lm-prompt": "Juliet.\n", "lm-length": 40, "lm-temperature": 1.1})
    d["masks"].update({"masks-text": "o Romeo", "masks-pad": 3, "masks-side": "right", "masks-causal": False})
    d["brackets"]["brackets-text"] = "([])"
    d["inside"].update({"inside-text": "Wherefore art thou", "inside-seed": 7})
    d["fill_blank"]["fill-text"] = "Give me your hand, my good ___."
    d["draw_digit"]["draw-example"] = "7"
    d["assistant"]["assistant-line"] = "shout sweet"
    d["mend_line"].update({"mend-text": "Come, ___ me your hand.", "mend-beam": "2"})
    d["hear_keys"].update({"hear-keys": "911", "hear-temperature": "0.8", "hear-seed": 3})
    d["watch_think"].update(
        {"think-problem": "12+34", "think-model": "think_direct", "think-samples": "4", "think-seed": 9}
    )
    other = tmp_path / "defaults.json"
    other.write_text(json.dumps(d), encoding="utf-8")
    monkeypatch.setattr(common, "DEFAULTS", other)
    try:
        for module in MODULES:
            importlib.reload(module)
        assert _build_inputs() == _expected_inputs(d)
    finally:
        monkeypatch.undo()
        for module in MODULES:
            importlib.reload(module)
    assert _build_inputs() == _expected_inputs(_defaults())


class _Fields(HTMLParser):
    """The form fields of a page's raw HTML: id -> {tag, its attributes, a textarea's text, a select's options}."""

    def __init__(self):
        super().__init__()
        self.fields: dict[str, dict] = {}
        self._open: dict | None = None  # the textarea or select being read

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("input", "textarea", "select") and "id" in attrs:
            self.fields[attrs["id"]] = field = {"tag": tag, "attrs": attrs, "text": "", "options": []}
            self._open = field if tag in ("textarea", "select") else None
        elif tag == "option" and self._open is not None:
            self._open["options"].append(attrs)

    def handle_endtag(self, tag):
        if tag in ("textarea", "select"):
            self._open = None

    def handle_data(self, data):
        if self._open is not None and self._open["tag"] == "textarea":
            self._open["text"] += data


def _fields(page: str) -> dict[str, dict]:
    parser = _Fields()
    parser.feed((PAGES / f"{page}.md").read_text(encoding="utf-8"))
    return parser.fields


def test_every_page_has_its_defaults_and_every_default_is_a_field_of_its_page():
    pages = {p.stem for p in PAGES.glob("*.md")} - {"index"}
    assert set(_defaults()) == pages
    for page, values in _defaults().items():
        fields = _fields(page)
        for name, value in values.items():
            assert name in fields, f"defaults.json: {page} has no field {name!r}"
            field, attrs = fields[name], fields[name]["attrs"]
            # the file is the only place a default is written: the HTML gives the field no starting value
            assert "value" not in attrs and "checked" not in attrs and not field["text"], f"{page}: {name} {attrs}"
            assert not any("selected" in option for option in field["options"]), f"{page}: {name} selects an option"
            kind = attrs.get("type", field["tag"])
            if kind == "checkbox":
                assert isinstance(value, bool), (page, name, value)
            elif kind == "select":
                assert value in [option["value"] for option in field["options"]], (page, name, value)
            elif kind in ("number", "range"):
                assert isinstance(value, int | float) and not isinstance(value, bool), (page, name, value)
                assert float(attrs.get("min", "-inf")) <= value <= float(attrs.get("max", "inf")), (page, name, value)
            else:
                assert isinstance(value, str) and value, (page, name, value)


def test_every_page_fills_its_form_from_the_defaults_before_it_loads_its_model():
    for page in _defaults():
        script = (SCRIPTS / f"{page}.js").read_text(encoding="utf-8")
        fill, load = script.find(f'await fillDefaults("{page}");'), script.find("await loadModel(")
        assert 0 <= fill < load, f"{page}.js does not fill its form from defaults.json before loading its model"


def _masks_quote(m: dict) -> str:
    switches = {(True, True): "Both masks on", (True, False): "Padding mask on", (False, True): "Causal mask on"}
    pads = ["no", "one", "two", "three", "four", "five"][m["masks-pad"]]
    switched = switches[m["masks-padding"], m["masks-causal"]]
    return f"**{switched}, {pads} pads on the {m['masks-side']}** (the page opens so)"


@pytest.mark.parametrize(
    "page, quote",
    [
        ("numbers", lambda d: f"- **{d['numbers']['numbers-input']}, then"),
        (
            "language_model",
            lambda d: (
                f"**Temperature {d['language_model']['lm-temperature']}, "
                f"top-p {d['language_model']['lm-topp']}** (the page's start)"
            ),
        ),
        ("masks", lambda d: _masks_quote(d["masks"])),
        ("brackets", lambda d: f"`{d['brackets']['brackets-text']}` ("),
        ("inside", lambda d: f"of {len(d['inside']['inside-text']) - 1} positions"),
        ("inside", lambda d: f"with seed {d['inside']['inside-seed']} every one"),
        ("fill_blank", lambda d: f"**The line the page opens with**, `{d['fill_blank']['fill-text']}`,"),
        ("draw_digit", lambda d: f"**The digit the page opens with** is a held-out {d['draw_digit']['draw-example']},"),
        ("assistant", lambda d: f"**The line the page opens with**, `{d['assistant']['assistant-line']}`."),
        ("mend_line", lambda d: f"**The line the page opens with**, `{d['mend_line']['mend-text']}`,"),
        ("mend_line", lambda d: f"With a beam of {d['mend_line']['mend-beam']} the best line"),
        ("watch_think", lambda d: f"**The problem the page opens with**, `{d['watch_think']['think-problem']}`,"),
        (
            "watch_think",
            lambda d: (
                f"{['One', 'Four', 'Eight', 'Sixteen'][[1, 4, 8, 16].index(int(d['watch_think']['think-samples']))]} "
                f"samples of the {d['watch_think']['think-model'].removeprefix('think_')} model "
                f"(seed {d['watch_think']['think-seed']})"
            ),
        ),
        (
            "hear_keys",
            lambda d: (
                f"**The keys the page opens with**, `{d['hear_keys']['hear-keys']}` at temperature "
                f"{d['hear_keys']['hear-temperature']} and seed {d['hear_keys']['hear-seed']}."
            ),
        ),
    ],
)
def test_the_prose_quotes_the_defaults(page, quote):
    """Where a page's prose names its starting input, it names the one in defaults.json (the numbers computed from
    it, such as P(balanced) of the brackets, are held to expected.json by tests/browser/test_playground.py)."""
    text = re.sub(r"\s+", " ", (PAGES / f"{page}.md").read_text(encoding="utf-8"))
    assert quote(_defaults()) in text
