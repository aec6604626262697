"""`dpbench dashboard build|serve` without results: an empty site that still opens, served on loopback only."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpbench.dashboard.cli import app


def _flat(text: str) -> str:
    """Typer's error panel wraps lines inside a box; compare its words only."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


def _build_empty(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    res = CliRunner().invoke(
        app, ["build", "--results", str(tmp_path / "results"), "-o", str(tmp_path / "site")]
    )
    assert res.exit_code == 0, res.output
    index = Path(res.stdout.strip().splitlines()[-1])
    assert index == tmp_path / "site" / "index.html" and index.exists()
    return index


def test_build_names_a_missing_results_directory(tmp_path):
    res = CliRunner().invoke(
        app, ["build", "--results", str(tmp_path / "nope"), "-o", str(tmp_path / "site")]
    )
    assert res.exit_code == 2 and "does not exist" in _flat(res.output)


def test_serve_refuses_non_loopback(tmp_path):
    _build_empty(tmp_path)
    res = CliRunner().invoke(app, ["serve", "--site", str(tmp_path / "site"), "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "not a loopback address" in _flat(res.output)


def test_serve_on_loopback_serves_the_site(tmp_path):
    _build_empty(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpbench",
            "dashboard",
            "serve",
            "--site",
            str(tmp_path / "site"),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), (
            line + proc.stderr.read() if proc.poll() is not None else line
        )
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "compare.html", timeout=10) as resp:
            assert resp.status == 200 and b"compare two commits" in resp.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.browser
def test_empty_site_opens_without_errors(tmp_path):
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    index = _build_empty(tmp_path)
    with browser.chromium() as chromium:
        for page in (index, index.parent / "compare.html"):
            rep = browser.load(chromium, page)
            assert rep.console_errors == []
    assert "No results yet" in index.read_text()
