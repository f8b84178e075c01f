"""A learner in a real JupyterLab: open a chapter, run every cell, read a quiz, move a slider.

JupyterLab is started from this environment on localhost with a notebook folder of its own, and
driven by the same headless Chromium as the site tests, with every request outside the local
server refused. It is started as `make lab` starts it (tools/lab.py), over a folder laid out like
the repository: the learner lands in colab/ (the copies written by tools/plain_notebooks.py, which
read well with no MyST extension), not in notebooks/ (the MyST source), and opens the chapter from
the file browser.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from lab import FIRST_FOLDER, lab_arguments

from .conftest import ROOT

NOTEBOOK = "03_positional_encoding.ipynb"  # has a quiz and an ipywidgets explorer

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    work = tmp_path_factory.mktemp("lab")
    for folder in (FIRST_FOLDER, "notebooks"):  # the learner's copies and the MyST source, as in the repository
        (work / folder).mkdir()
        shutil.copy(ROOT / folder / NOTEBOOK, work / folder / NOTEBOOK)
    settings = work / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell, not only those in view, so that the test can find them
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"), "JUPYTER_RUNTIME_DIR": str(work / "rt")}
    log = open(work / "lab.log", "w")  # noqa: SIM115 (closed below)
    options = [
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
    ]
    options += ["--LabApp.news_url=", "--allow-root"]  # CI containers run as root
    command = [sys.executable, "-m", "jupyterlab", *lab_arguments(work), *options]
    server = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"JupyterLab did not start:\n{(work / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
    yield url, token
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def _running(page) -> bool:
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return any("*" in p for p in prompts)


def _all_ran(page) -> bool:
    """Every code cell that shows a prompt shows a number: queued and running cells show '*', unrun ones '[ ]'."""
    shown = [p.strip() for p in page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts() if p.strip()]
    return bool(shown) and all(re.fullmatch(r"\[\d+\]:", p) for p in shown)


def test_a_learner_runs_a_chapter_reads_a_quiz_and_moves_a_slider(browser, lab):
    url, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    refused = []

    def only_local(route):
        if route.request.url.startswith(url):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    page.goto(f"{url}/?token={token}", wait_until="load")  # where `make lab` opens the browser
    chapter = page.locator(".jp-DirListing-item", has_text=NOTEBOOK).first
    chapter.wait_for(timeout=90_000)
    crumbs = page.locator(".jp-BreadCrumbs").inner_text()
    assert FIRST_FOLDER in crumbs and "notebooks" not in crumbs, f"JupyterLab opened on {crumbs!r}, not colab/"
    chapter.dblclick()  # the learner opens the chapter from the file browser
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    current_tab = ".lm-TabBar-tab.jp-mod-current.lm-mod-closable"
    # the tab's tooltip (its path) is filled in once the document's context is ready, which can be after the cells show
    page.wait_for_function(f"() => document.querySelector('{current_tab}')?.title", timeout=30_000)
    tab = page.locator(current_tab).first.get_attribute("title") or ""
    assert f"{FIRST_FOLDER}/{NOTEBOOK}" in tab, f"the chapter opened is not colab's copy: {tab!r}"
    page.wait_for_timeout(2000)
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count():  # JupyterLab asks once which kernel to start: take the default, Python 3
        dialog.locator(".jp-Dialog-footer button.jp-mod-accept").click()
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)

    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    deadline = time.monotonic() + 300
    while not _all_ran(page) and time.monotonic() < deadline:  # a busy machine may take seconds to start
        page.wait_for_timeout(500)
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    assert prompts and not _running(page), f"cells still running after 300 s: {prompts}"
    shown = [p.strip() for p in prompts if p.strip()]  # collapsed solution cells show no prompt
    assert len(shown) >= 10 and all(re.fullmatch(r"\[\d+\]:", p) for p in shown), f"not every cell ran: {prompts}"
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, f"cells errored: {errors.all_inner_texts()[:2]}"

    answer = page.locator(".jp-MarkdownOutput details").first
    answer.scroll_into_view_if_needed()
    body = answer.locator("p").first
    assert not body.is_visible(), "a quiz answer is visible before its summary is clicked"
    answer.locator("summary").click()
    assert body.is_visible(), "clicking the summary did not open the answer"

    slider = page.locator(".widget-slider").first
    slider.scroll_into_view_if_needed()
    figure = page.locator(".widget-output img").first
    before = figure.get_attribute("src")
    handle = slider.locator(".noUi-handle, input[type=range]").first
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "before => { const img = document.querySelector('.widget-output img'); return img && img.src !== before; }",
        arg=before,
        timeout=30_000,
    )
    assert not refused, f"JupyterLab asked for outside resources: {refused[:3]}"
    context.close()
