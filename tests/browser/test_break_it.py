"""The inside page's switches ("Break it, and watch") give tl.inside's numbers in headless Chromium.

tools/playground_build/ablation.py recorded, for fixed switch settings, the bits per character on the page's
fixed passage and the greedy text after the page's default text, computed in PyTorch with tl.inside's own
interventions (zero_heads, mean_heads, zero_output, mean_output, without_positions, skip_norms). Here the page's
controls are set as each case says, by keyboard-reachable selects and checkboxes, and the page's numbers are
compared: the bits per character within 1e-4, the text the same.
"""

from __future__ import annotations

import json
import re

import pytest

from .checks import network_problems
from .conftest import ROOT
from .test_playground import _open, expected, meta  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser
SWITCHED = "s => document.getElementById('inside-break-status').dataset.switches === s"


def _set(page, switches) -> None:
    """Set the page's controls to `switches` ([heads (L of h), layers (L), positions (1), norms (2L + 1)]), then
    tell the form once, as a reader's last change does."""
    page.evaluate(
        """([heads, layers, positions, norms]) => {
            heads.forEach((row, l) => row.forEach((c, k) => {
                document.getElementById(`inside-head-${l}-${k}`).value = String(c); }));
            layers.forEach((c, l) => { document.getElementById(`inside-layer-${l}`).value = String(c); });
            document.getElementById("inside-positions").checked = positions[0] === 1;
            norms.forEach((n, i) => { document.getElementById(`inside-norm-${i}`).checked = n === 1; });
            document.getElementById("inside-break-form").dispatchEvent(new Event("change"));
        }""",
        switches,
    )
    page.wait_for_function(SWITCHED, arg=json.dumps(switches, separators=(",", ":")), timeout=60_000)


def _broken_ready(page, site_url):
    _open(page, site_url, "inside")
    page.wait_for_function(
        "() => document.getElementById('inside-break-status').dataset.bpc !== undefined", timeout=60_000
    )


def test_every_switch_gives_tl_insides_bits_per_character_and_text(page, site_url, expected, meta):  # noqa: F811
    _broken_ready(page, site_url)
    answers = expected["inside_ablation"]
    assert page.text_content("#inside-break-passage") == meta["inside_ablation"]["passage"]
    for case in answers["cases"]:
        _set(page, case["switches"])
        bpc = float(page.get_attribute("#inside-break-status", "data-bpc"))
        assert abs(bpc - case["bpc"]) < 1e-4, (case["name"], bpc, case["bpc"])
        assert page.text_content("#inside-break-prompt") == answers["prompt"]
        assert page.text_content("#inside-break-written") == case["text"], case["name"]
        status = page.text_content("#inside-break-status")
        assert status.startswith(f"Bits per character on the passage: {bpc:.3f}"), status
    assert not network_problems(page)
    assert not page.console_errors, page.console_errors


def test_the_switches_work_from_the_keyboard_and_come_back_on(page, site_url, expected):  # noqa: F811
    _broken_ready(page, site_url)
    whole, zeroed = expected["inside_ablation"]["cases"][0], expected["inside_ablation"]["cases"][3]  # layer 2 off
    assert zeroed["name"] == "layer 2 zeroed"
    page.focus("#inside-layer-1")
    page.keyboard.press("ArrowDown")  # a select's next option: "zeroed"
    page.wait_for_function(SWITCHED, arg=json.dumps(zeroed["switches"], separators=(",", ":")), timeout=60_000)
    assert abs(float(page.get_attribute("#inside-break-status", "data-bpc")) - zeroed["bpc"]) < 1e-4
    assert "Switched off: layer 2 zeroed." in page.text_content("#inside-break-status")
    page.focus("#inside-positions")
    page.keyboard.press("Space")
    switches = json.loads(json.dumps(zeroed["switches"]))
    switches[2] = [0]
    page.wait_for_function(SWITCHED, arg=json.dumps(switches, separators=(",", ":")), timeout=60_000)
    assert "the positions" in page.text_content("#inside-break-status")
    page.focus("#inside-break-reset")
    page.keyboard.press("Enter")
    page.wait_for_function(SWITCHED, arg=json.dumps(whole["switches"], separators=(",", ":")), timeout=60_000)
    assert abs(float(page.get_attribute("#inside-break-status", "data-bpc")) - whole["bpc"]) < 1e-4
    assert "Switched off: nothing." in page.text_content("#inside-break-status")


def test_the_prose_quotes_the_recorded_numbers_and_sizes(expected, meta):  # noqa: F811
    """What inside.md says of the switches is expected.json's numbers (PyTorch with tl.inside's interventions), and
    the two files' sizes are meta.json's."""
    text = re.sub(r"\s+", " ", (ROOT / "book" / "playground" / "inside.md").read_text(encoding="utf-8"))
    cases = {c["name"]: c for c in expected["inside_ablation"]["cases"]}
    whole = cases["the whole model"]["bpc"]
    ff_norm = "layer 2's feed-forward norm skipped"

    def cost(name: str) -> str:
        return f"{cases[name]['bpc'] - whole:.2f}"

    phrases = [
        f"the whole model needs {whole:.2f} bits per character",
        f"head 3 adds {cost('layer 1 head 3 zeroed')} bits",
        f"zeroing layer 2 adds {cost('layer 2 zeroed')} bits",
        f"output by its mean adds {cost('layer 1 by its mean')}",
        f"the model needs {cases['no positions']['bpc']:.2f} bits",
        f"final norm costs {cost('the final norm skipped')} bits",
        f"feed-forward norm {cost(ff_norm)}",
        f"its logit lens (about {meta['inside']['bytes'] / 1e6:.1f} MB)",
        f"the same model with switches (about {meta['inside_ablation']['bytes'] / 1e6:.1f} MB)",
    ]
    for phrase in phrases:
        assert phrase in text, f"inside.md lacks: {phrase}"
    assert "the the thee" in cases["layer 1 by its mean"]["text"] and "the the the" in cases["no positions"]["text"]
