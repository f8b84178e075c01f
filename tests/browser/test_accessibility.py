"""Every page of the website passes axe-core's WCAG 2 A and AA rules, in Chromium with the network closed.

axe-core comes from npm (package-lock.json, installed by `make` with `npm ci`), never from a CDN:
its script is read from node_modules and put into each page. A missing axe-core skips these tests
loudly, and fails them under CI=true, as a missing Chromium does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .checks import toc_pages
from .conftest import _missing, settle

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
RULES = ["wcag2a", "wcag2aa"]

pytestmark = pytest.mark.browser

_RUN = """async (tags) => {
    const result = await axe.run(document, {runOnly: {type: "tag", values: tags}});
    return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                       nodes: v.nodes.map(n => n.html.slice(0, 160))}));
}"""


@pytest.fixture(scope="module")
def axe_script() -> str:
    if not AXE.is_file():
        _missing(f"axe-core is not installed ({AXE.relative_to(ROOT)} is missing); run `npm ci`")
    return AXE.read_text()


def _violations(page, site_url: str, path: str, axe_script: str) -> list[dict]:
    response = page.goto(f"{site_url}/{path}", wait_until="load")
    assert response is not None and response.status == 200, f"{path} did not load"
    settle(page)
    if page.query_selector(".playground"):  # a playground: check it with its answer, controls and pictures drawn
        page.wait_for_function(
            "() => Object.values(window.playgroundTimings || {}).some(t => t.first_answer_ms >= 0)", timeout=120_000
        )
    page.add_script_tag(content=axe_script)
    return page.evaluate(_RUN, RULES)


@pytest.mark.parametrize("path", toc_pages())
def test_page_has_no_wcag_a_or_aa_violations(page, site_url, path, axe_script):
    violations = _violations(page, site_url, path, axe_script)
    report = [
        f"{v['id']} ({v['impact']}): {v['help']}, {len(v['nodes'])} node(s), e.g. {v['nodes'][0]}" for v in violations
    ]
    assert not violations, f"{path}:\n" + "\n".join(report)


@pytest.mark.parametrize("path", [p for p in toc_pages() if p.startswith("book/playground/")])
def test_playground_has_no_violations_in_the_dark_theme(page, site_url, path, axe_script):
    """The playgrounds draw with their own colours, so they are checked in the theme's dark mode too."""
    page.add_init_script("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
    violations = _violations(page, site_url, path, axe_script)
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    report = [f"{v['id']} ({v['impact']}): {v['help']}, e.g. {v['nodes'][0]}" for v in violations]
    assert not violations, f"{path} (dark):\n" + "\n".join(report)


def test_axe_finds_a_violation_when_there_is_one(page, site_url, axe_script):
    """The check can fail: an unlabelled range input, as the slider figures had, is reported."""
    page.goto(f"{site_url}/book/intro.html", wait_until="load")
    page.evaluate("() => { const s = document.createElement('input'); s.type = 'range'; document.body.append(s); }")
    page.add_script_tag(content=axe_script)
    assert "label" in [v["id"] for v in page.evaluate(_RUN, RULES)]
