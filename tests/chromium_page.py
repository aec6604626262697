"""Open one page in a real headless Chromium for a test (skips where Chromium is missing)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def open_page(path: Path, *, wait_ready: bool = True) -> Iterator[tuple[Any, list[str]]]:
    """``(page, errors)`` for the file ``path``; ``errors`` collects the page's uncaught errors.
    ``wait_ready``: wait for the dashboard's ``body[data-ready='1']``."""
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    with browser.chromium() as chromium:
        ctx = chromium.new_context()
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        if wait_ready:
            page.wait_for_selector("body[data-ready='1']", state="attached")
        try:
            yield page, errors
        finally:
            ctx.close()
