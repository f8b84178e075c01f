"""The system's Chromium, and the flags that run it headless: shared by the browser tests and the tools.

Playwright drives Debian's Chromium (launched with `executable_path`); nothing downloads a browser.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CANDIDATES = [
    os.environ.get("CHROMIUM_PATH", ""),
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    shutil.which("chromium") or "",
    shutil.which("chromium-browser") or "",
]
HEADLESS_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def browser_path() -> str | None:
    """The first Chromium found (CHROMIUM_PATH first), or None."""
    return next((c for c in CANDIDATES if c and Path(c).is_file()), None)
