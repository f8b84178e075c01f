"""The hear-the-keys playground speaks in headless Chromium, with the network closed, as PyTorch does.

tools/playground_build/hear_keys.py recorded, for fixed keys, temperatures and seeds (expected.json's "hear_keys": the
page's default first, then the same keys greedily, at each other temperature and with another seed, one key and six
keys), the codes viola.synthesise writes with the page's own sampling numbers (mulberry32, the seed's), the codec's
waveform of them, what speech.dtmf_decode reads in it, and the default clip's spectrogram. These tests set the same
inputs in book/playground/hear_keys.html and require the same 200 codes, the prompt fed once and then one code per
call, the waveform within WAVE_TOLERANCE, the same keys read and the spectrogram within SPECTROGRAM_TOLERANCE. They
also give the page bad keys and seeds and require a message naming what was expected and what came, then a good
input and require a clip again; they drive it from the keyboard and play the clip with Web Audio; and they hold the
page's prose to the recorded readings, times and sizes. What all playgrounds share (labels, a broken or wrong model
file, int8) is tested for both of its files in test_playground.py.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from .checks import network_problems
from .conftest import ROOT
from .test_playground import ANSWERED, _agreement, _status_after, built_entry, refused, tab_to, unlabelled_controls

pytestmark = pytest.mark.browser
KEYS = ["hear_keys_viola", "hear_keys_codec"]  # meta.json's keys: the model and the codec's decoder
WAVE_TOLERANCE = 1e-4  # samples of about 0.7 at most; onnxruntime's wasm and PyTorch sum convolutions in other orders
SPECTROGRAM_TOLERANCE = 1e-3  # relative to the loudest cell: the page sums its DFT in float64, torch.stft by FFT


@pytest.fixture(scope="module")
def expected() -> dict:
    return built_entry("hear_keys", "expected.json")


@pytest.fixture(scope="module")
def meta() -> dict:
    return {key: built_entry(key, "models/meta.json") for key in KEYS}


def _open(page, site_url, request=None):
    """Open the page and wait until it has spoken its default keys."""
    response = page.goto(f"{site_url}/book/playground/hear_keys.html", wait_until="load")
    assert response is not None and response.status == 200
    for key in KEYS:
        page.wait_for_function(ANSWERED, arg=key, timeout=120_000)
    if request is not None:  # the two files' times, for the terminal summary (conftest.py)
        times = request.config.__dict__.setdefault("playground_times", {})
        for key in KEYS:
            times[key] = page.evaluate("key => window.playgroundTimings[key]", key)


def _speak(page, keys: str, temperature: float, seed: int) -> str:
    """Set the form and press the button; return the status once the clip is spoken and read."""
    page.fill("#hear-keys", keys)
    page.select_option("#hear-temperature", f"{temperature:g}")
    page.fill("#hear-seed", str(seed))
    return _status_after(page, "hear-status", lambda: page.click("#hear-speak"), timeout=120_000)


def _status(case: dict) -> str:
    """The status line the page writes once it has spoken `case` and read it back."""
    t = case["temperature"]
    how = "greedily (temperature 0)" if t == 0 else f"at temperature {t:g}, seed {case['seed']}"
    heard = " ".join(case["read"]) or "no key"  # keys spaced, so that a screen reader says them one by one
    verdict = "right" if case["read"] == case["keys"] else "wrong"
    typed = " ".join(case["keys"])
    return f"You typed {typed}; VioLA spoke it {how}, and the Goertzel decoder heard {heard}: {verdict}."


def _shown(page) -> dict:
    return page.evaluate("() => window.hearKeys")


def _assert_clip(page, case: dict, meta: dict) -> bool:
    """Require the page's clip to be PyTorch's for `case`; -> whether the codes were equal (counted by the caller)."""
    shown = _shown(page)
    if shown["ids"] != case["ids"]:
        return False
    assert shown["codes"] == case["codes"]
    wave = np.array(shown["waveform"])
    assert wave.shape == (meta["hear_keys_codec"]["sampling_rate"],)
    assert np.abs(wave - np.array(case["waveform"])).max() <= WAVE_TOLERANCE
    assert shown["read"] == case["read"] and page.get_attribute("#hear-read", "data-read") == case["read"]
    assert page.text_content("#hear-verdict") == ("right" if case["read"] == case["keys"] else "wrong")
    assert json.loads(page.get_attribute("#hear-codes", "data-ids")) == case["ids"]
    prompt = 3 + len(case["keys"])  # <bos> <synthesise> keys <sep>
    run = page.evaluate("() => window.playgroundTimings.hear_keys_viola.last_run")
    assert run["fed"] == [prompt] + [1] * (len(case["ids"]) - 1), run["fed"]  # the cache: one code per call
    label = page.get_attribute("#hear-spectrogram", "aria-label")
    assert label.startswith(f"Spectrogram of the second VioLA spoke for the keys {' '.join(case['keys'])}, ") and (
        f"reads {' '.join(case['read']) or 'no key'} in it." in label
    ), label
    return True


def test_the_page_speaks_pytorchs_codes_and_reads_them_back_for_every_case(page, site_url, expected, meta, request):
    """Every recorded case, the page's default first: PyTorch's 200 codes (the page's sampling numbers are the
    build's), the cache fed once then one code per call, the codec's waveform, the Goertzel reading and the status."""
    _open(page, site_url, request)
    cases = expected["cases"]
    defaults = json.loads((ROOT / "book" / "_static" / "playground" / "defaults.json").read_text(encoding="utf-8"))
    first = defaults["hear_keys"]
    assert (cases[0]["keys"], cases[0]["temperature"], cases[0]["seed"]) == (
        first["hear-keys"], float(first["hear-temperature"]), first["hear-seed"]
    )  # fmt: skip
    assert page.input_value("#hear-keys") == cases[0]["keys"] and page.input_value("#hear-seed") == "1"
    agree = int(_assert_clip(page, cases[0], meta))  # the clip the page opens with
    assert page.text_content("#hear-status") == _status(cases[0])
    for case in cases:
        status = _speak(page, case["keys"], case["temperature"], case["seed"])
        same = _assert_clip(page, case, meta)
        agree += same
        if same:
            assert status == _status(case)
        assert page.text_content("#hear-error") == ""
    _agreement(request, "hear_keys_viola", agree, len(cases) + 1)
    assert not page.console_errors, page.console_errors
    assert not network_problems(page), network_problems(page)


def test_the_spectrogram_is_torch_stfts_and_is_drawn(page, site_url, expected, meta):
    """The default clip's magnitudes equal torch.stft's (128-sample Hann windows every 32 samples, centred) within
    SPECTROGRAM_TOLERANCE of the loudest cell, and the canvas holds the picture: its top (the highest frequencies,
    above the keypad's tones) is darker than the rows of the tones."""
    _open(page, site_url)
    got = np.array(_shown(page)["spectrogram"])
    want = np.array(expected["spectrogram"])
    assert got.shape == want.shape == (65, 126)
    assert np.abs(got - want).max() <= SPECTROGRAM_TOLERANCE * want.max()
    brightness = page.evaluate(
        """() => { const c = document.getElementById('hear-spectrogram'), d = c.getContext('2d');
            const mean = (y0, y1) => { const px = d.getImageData(0, y0, c.width, y1 - y0).data; let s = 0;
                for (let i = 0; i < px.length; i += 4) s += px[i] + px[i + 1] + px[i + 2];
                return s / (px.length / 4); };
            return [mean(0, 20), mean(Math.round(c.height * 0.2), Math.round(c.height * 0.7))]; }"""
    )
    assert brightness[0] < brightness[1], brightness  # 1,800-2,000 Hz against the 700-1,500 Hz of the tones


BAD = [
    ("hear-keys", "", "There are no keys to speak: type 1 to 6 of the keypad's 12 keys"),
    ("hear-keys", "12a", "“a” is not on the keypad: the model speaks only its 12 keys, 1, 2, 3"),
    ("hear-keys", "1+2-", "“+” and “-” are not on the keypad"),
    ("hear-keys", "1234567", "7 keys are more than the 6 the model was trained to speak in its one second"),
    ("hear-seed", "", "The seed is empty or not a number: type a whole number from 0 to 4294967295."),
    ("hear-seed", "1.5", "The seed must be a whole number from 0 to 4294967295, got “1.5”."),
    ("hear-seed", "-3", "The seed must be a whole number from 0 to 4294967295, got “-3”."),
]


@pytest.mark.parametrize("field, value, message", BAD, ids=[f"bad{k}" for k in range(len(BAD))])
def test_bad_input_gets_a_message_and_the_page_keeps_working(page, site_url, expected, meta, field, value, message):
    """Each bad input gets a message in the page's alert naming what was expected and what came, the field marked
    invalid, the previous clip's reading cleared, a clean console; the default case afterwards speaks as before."""
    _open(page, site_url)
    said = refused(page, "hear", value, field=field.removeprefix("hear-"), button="speak")
    assert message in said, said
    assert page.text_content("#hear-read") == "" and page.text_content("#hear-codes") == ""
    assert page.text_content("#hear-status") == ""
    assert page.get_attribute("#hear-spectrogram", "aria-label") == "No spectrogram yet: nothing has been spoken."
    assert page.is_hidden("#hear-judged")  # no empty "()" after the reading
    case = expected["cases"][0]
    _speak(page, case["keys"], case["temperature"], case["seed"])
    assert _assert_clip(page, case, meta)
    assert page.text_content("#hear-error") == "" and page.get_attribute(f"#{field}", "aria-invalid") == "false"
    assert not page.console_errors, page.console_errors


def test_the_page_works_from_the_keyboard_and_plays_the_clip(page, site_url, expected, meta):
    """Tab reaches the keys; typing and Enter speak them and the live region says what was heard; an example button
    speaks its keys; Tab reaches the play button and Enter plays the clip through Web Audio at the codec's rate."""
    _open(page, site_url)
    case = next(c for c in expected["cases"] if c["keys"] == "*0#147")
    tab_to(page, "#hear-keys")
    page.keyboard.press("Control+A")
    page.keyboard.type(case["keys"])
    page.fill("#hear-seed", str(case["seed"]))
    tab_to(page, "#hear-seed")
    status = _status_after(page, "hear-status", lambda: page.keyboard.press("Enter"), timeout=120_000)
    assert status == _status(case) and _assert_clip(page, case, meta)
    assert page.get_attribute("#hear-status", "aria-live") == "polite"
    tab_to(page, "#hear-play")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.hearKeysPlayed !== undefined", timeout=10_000)
    played = page.evaluate("() => window.hearKeysPlayed")
    rate = meta["hear_keys_codec"]["sampling_rate"]
    assert played == {"sampleRate": 2 * rate, "length": 2 * rate, "keys": case["keys"]}  # doubled: 8 kHz plays anywhere
    assert page.text_content("#hear-status").startswith(f"Playing the second VioLA spoke for {' '.join(case['keys'])}")
    assert page.get_attribute("#hear-playground", "aria-busy") == "false"  # set while it speaks, cleared after
    page.click("#hear-examples button[data-keys='2026']")
    page.wait_for_function("() => window.hearKeys.ids.length && document.getElementById('hear-keys').value === '2026'")
    assert not unlabelled_controls(page)
    assert not page.console_errors, page.console_errors


def _prose() -> str:
    return re.sub(r"\s+", " ", (ROOT / "book" / "playground" / "hear_keys.md").read_text(encoding="utf-8"))


def _onset(case: dict, meta: dict) -> float:
    """When the clip's sound starts, as the page's description says it: the first Goertzel frame whose energy
    passes a tenth of the loudest frame's."""
    g, wave = meta["hear_keys_codec"]["goertzel"], np.array(case["waveform"])
    energy = np.array([(wave[s : s + g["frame"]] ** 2).sum() for s in range(0, len(wave) - g["frame"] + 1, g["hop"])])
    return int(np.argmax(energy > energy.max() / 10)) * g["hop"] / meta["hear_keys_codec"]["sampling_rate"]


def test_the_prose_quotes_the_recorded_clips_and_sizes(expected, meta):
    """Each reading, time and size the page's text states, recomputed from expected.json and meta.json."""
    text = _prose()
    by = {(c["keys"], c["temperature"], c["seed"]): c for c in expected["cases"]}
    default = expected["cases"][0]
    assert default["read"] == default["keys"] == "2026"
    assert f"sound starts at about {_onset(default, meta):.2f} s" in text
    assert f"seed 2 starts at about {_onset(by['2026', 1.0, 2], meta):.2f} s" in text
    greedy = by["2026", 0.0, 1]
    assert f'starts only at about {_onset(greedy, meta):.2f} s and the decoder hears "{greedy["read"]}"' in text
    assert f"here until about {_onset(greedy, meta):.1f} s" in text
    cold, hot = by["2026", 0.5, 1]["read"], by["2026", 1.2, 11]["read"]
    assert f'At 0.5 (seed 1) it hears "{cold}", at 1.2 (seed 11) "{hot}"' in text
    assert by["2026", 1.2, 11]["read"] == "20266" and "a key said twice" in text
    assert f'with seed 9 the decoder hears "{by["5", 1.0, 9]["read"]}"' in text and len(by["5", 1.0, 9]["read"]) > 1
    assert by["*0#147", 1.0, 7]["read"] == "*0#147" and "`*0#147`: with seed 7 they read back right" in text
    assert f"about {meta['hear_keys_viola']['bytes'] / 1e6:.1f} MB" in text
    assert f"about {meta['hear_keys_codec']['bytes'] / 1e6:.2f} MB" in text
    trial = meta["hear_keys_viola"]["int8"]
    assert trial["shipped"] == "fp32"
    assert f"changed on {trial['inputs'] - trial['agree']} of its {trial['inputs']}" in text
    assert "not_tried" in meta["hear_keys_codec"]["int8"]
    info = meta["hear_keys_viola"]
    assert (info["min_keys"], info["max_keys"], info["frames"] * info["codebooks"]) == (1, 6, 200)
    assert f"as {info['frames'] * info['codebooks']} codes" in text and "1 to 6 keys of the keypad" in text
