"""Serve a folder (the built site) over HTTP on 127.0.0.1, for the browser tests and the tools.

    with serve(SITE) as base_url:  # e.g. "http://127.0.0.1:41873"
        page.goto(f"{base_url}/index.html")

A threading server on a free port, quiet (no request log, no traceback when a client hangs up), run
from a daemon thread and shut down on exit.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

# What the playgrounds fetch, typed explicitly: Python's mimetypes reads them from /etc/mime.types,
# which a slim image may lack, and a browser refuses an ES module not served as JavaScript.
TYPES = {".mjs": "text/javascript", ".wasm": "application/wasm", ".onnx": "application/octet-stream"}


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with the types above and logs nothing (a test's output stays readable)."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    """A threading server that says nothing when a client hangs up mid-answer (a browser cancels requests)."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # ConnectionResetError, BrokenPipeError, ...
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(directory: str | Path) -> Iterator[str]:
    """Serve `directory` while the block runs; yields its base URL, without a trailing slash."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    with QuietServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            thread.join()
