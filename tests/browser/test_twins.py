"""Kernel-free twins: on the static site, every slider figure responds to its slider, offline."""

from __future__ import annotations

import pytest

from .checks import network_problems, toc_pages
from .conftest import SITE, settle

pytestmark = pytest.mark.browser
TWIN_PAGES = (
    [p for p in toc_pages() if "transformer_lib slider figure" in (SITE / p).read_text(errors="ignore")]
    if SITE.is_dir()
    else []
)


def test_the_chapters_have_twins():
    expected = {"01_tokenization", "03_positional_encoding", "04_attention", "05_masks", "08_encoder", "11_transformer"}
    found = {p.split("/")[-1].removesuffix(".html") for p in TWIN_PAGES}
    assert expected <= found, f"pages without a kernel-free twin: {sorted(expected - found)}"


@pytest.mark.parametrize("path", TWIN_PAGES)
def test_every_twin_responds_to_its_slider(page, site_url, path):
    page.goto(f"{site_url}/{path}", wait_until="load")
    settle(page)
    sliders = page.query_selector_all("input.anim-slider")
    assert sliders, f"{path}: no slider found"
    for i, slider in enumerate(sliders):
        image = page.query_selector_all("div.animation img")[i]
        slider.scroll_into_view_if_needed()
        before = image.get_attribute("src")
        assert before and before.startswith("data:image/png"), f"{path}: twin {i} shows no frame"
        slider.focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        page.wait_for_timeout(200)
        assert int(slider.input_value()) >= 1, f"{path}: twin {i}'s slider did not move"
        after = image.get_attribute("src")
        assert after != before, f"{path}: twin {i}'s figure did not change when its slider moved"
    assert not network_problems(page), network_problems(page)
