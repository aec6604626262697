"""Open the built site in Debian's headless Chromium (via playwright) and report what rendered.

Used by the browser tests and by the page-load benchmark. It never downloads a
browser (`playwright install` is not used): it drives ``/usr/bin/chromium``, which
``make test-deps`` installs with apt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# For each plotly graph div: its id, trace count and the points of each trace.
_PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
  id: d.id,
  traces: d.data.length,
  points: d.data.map(t => (t.x || t.y || []).length),
  svg_points: d.querySelectorAll('.scatterlayer .point, .barlayer .point').length,
}))"""


class BrowserUnavailable(RuntimeError):
    pass


def chromium_path() -> str:
    """Debian's Chromium, or $DPBENCH_CHROMIUM; a clear error naming how to install it."""
    path = os.environ.get("DPBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise BrowserUnavailable(
            "needs Debian's chromium for headless browser checks: "
            "`sudo apt-get install chromium` (or `make test-deps`)"
        )
    return path


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (playwright Browser); closed, with its processes, on exit."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise BrowserUnavailable(
            f"needs the playwright package (pip install playwright): {exc}"
        ) from exc
    path = chromium_path()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class PageReport:
    url: str
    ready_ms: float  # navigation start → the page's first view drawn (body[data-ready-ms])
    console_errors: list[str] = field(default_factory=list)
    plots: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""


def load(
    browser: Any,
    page_file: Path,
    *,
    wait_all: bool = True,
    screenshot: Path | None = None,
    timeout_ms: int = 60_000,
    viewport: tuple[int, int] = (1300, 900),
) -> PageReport:
    """Load ``page_file`` from file://; collect console errors, page errors and the plots drawn."""
    url = Path(page_file).resolve().as_uri()
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on(
            "console",
            lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url} ({r.failure})"))
        page.goto(url, wait_until="load", timeout=timeout_ms)
        page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms, state="attached")
        ready_ms = float(page.get_attribute("body", "data-ready-ms") or "nan")
        if wait_all and page.get_attribute("body", "data-all-drawn") is not None:
            page.wait_for_selector("body[data-all-drawn='1']", timeout=timeout_ms, state="attached")
        plots = page.evaluate(_PLOTS_JS)
        if screenshot is not None:
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        return PageReport(
            url=url, ready_ms=ready_ms, console_errors=errors, plots=plots, title=page.title()
        )
    finally:
        context.close()
