"""Build the static dashboard site from a results directory.

Pages: ``index.html`` the summary (landing page: the metrics that decide the question,
per tier and scenario, for a pair of commits), ``history.html`` (per-metric history for
one chosen scenario, normalised to a baseline commit), ``compare.html`` (every metric of
two commits, most significant first), ``changes.html`` (steps asv's detector finds:
regressions and improvements with their commit ranges) and ``fidelity.html`` (twin vs
simulated-forward server on the same scenario).

The site opens from ``file://``: its data is a ``data.js`` script (``window.DPBENCH_DATA
= {...}``) loaded with ``<script src>``, and plotly.js is copied from the installed
plotly package, never fetched from a CDN. Every string from the results reaches the
page either through Jinja2's autoescape or as JSON with ``<``, ``>`` and ``&``
escaped, and the page's JavaScript writes it with ``textContent`` only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jinja2

from dpbench.core.paths import project_root
from dpbench.dashboard import fidelity, loaders, steps
from dpbench.dashboard.model import build_model, default_pair

ASSETS = (
    "dashboard.css",
    "dashboard.js",
    "summary.js",
    "history.js",
    "compare.js",
    "changes.js",
    "fidelity.js",
)
# page → (template, needs plotly.js). The landing page (the summary) is tables only, so it
# does not parse the 4.8 MB plotly bundle.
PAGES = {
    "index.html": ("summary.html.j2", False),
    "history.html": ("history.html.j2", True),
    "compare.html": ("compare.html.j2", True),
    "changes.html": ("changes.html.j2", False),
    "fidelity.html": ("fidelity.html.j2", False),
}
PLOTLY_ASSET = "plotly.min.js"


def dashboard_dir() -> Path:
    """The checkout's dashboard/ folder (templates/ and assets/)."""
    path = project_root() / "dashboard"
    if not (path / "templates").is_dir():
        raise FileNotFoundError(
            f"dashboard templates not found at {path / 'templates'}; run from a dpbench checkout "
            "(or set DPBENCH_ROOT to one)"
        )
    return path


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> (no '</script>', no '<!--', no HTML entities)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, esc)
    return text


def default_history(loaded: loaders.Loaded) -> Path | None:
    """The release history `dpbench releases` built, when the results are about its commits."""
    from dpbench.mainjob.releases import default_repo

    repo = default_repo()
    if not (repo / ".git").exists():
        return None
    ours = {r.commit for r in loaded.asv_runs} | {f.commit for f in loaded.run_files}
    known = {row["commit"] for row in loaders.read_history(repo)}
    return repo if ours & known else None


def _plotly_js(assets: Path) -> None:
    import plotly
    from plotly.offline import get_plotlyjs

    target = assets / PLOTLY_ASSET
    stamp = assets / (PLOTLY_ASSET + ".version")
    if target.exists() and stamp.exists() and stamp.read_text() == plotly.__version__:
        return
    target.write_text(get_plotlyjs(), encoding="utf-8")
    stamp.write_text(plotly.__version__)


def build_site(
    results: Path,
    out: Path,
    history_repo: Path | None = None,
    asv_html: Path | None = None,
) -> Path:
    """Build the site from ``results`` into ``out``; return the path of its index.html.

    ``history_repo`` (a git repository: the release history or an SGLang clone) gives
    commit order, dates and messages; by default the release history is used when the
    results are about its commits. ``asv_html`` is asv's published site (default:
    ``out``'s sibling ``html/``), linked from every page when it exists.
    """
    results, out = Path(results), Path(out)
    loaded = loaders.load_results(results)
    if history_repo is None:
        history_repo = default_history(loaded)
    history = loaders.read_history(history_repo)
    model = build_model(loaded, history)
    pair = default_pair(model)
    model["default_pair"] = list(pair) if pair else None
    model["steps"] = steps.detect(model)
    model["fidelity"] = fidelity.pairs(model)
    model["fidelity_replayed"] = fidelity.replayed(model, loaded.fidelity_reports)

    asv_html = Path(asv_html) if asv_html is not None else out.parent / "html"
    asv_index = asv_html / "index.html"
    asv_link = os.path.relpath(asv_index, out) if asv_index.exists() else None

    templates = dashboard_dir()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    context = {
        "model": model,
        "asv_link": asv_link,
        "results_dir": str(results),
        "history_repo": str(history_repo) if history_repo else None,
    }

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        assets = staging / "assets"
        assets.mkdir()
        old_plotly = out / "assets" / PLOTLY_ASSET
        if old_plotly.exists():  # reuse the 4 MB copy when plotly's version is unchanged
            shutil.copy2(old_plotly, assets / PLOTLY_ASSET)
            if (out / "assets" / (PLOTLY_ASSET + ".version")).exists():
                shutil.copy2(out / "assets" / (PLOTLY_ASSET + ".version"), assets)
        _plotly_js(assets)
        for name in ASSETS:
            shutil.copy2(templates / "assets" / name, assets / name)
        (staging / "data.js").write_text(
            "window.DPBENCH_DATA = " + script_json(model) + ";\n", encoding="utf-8"
        )
        for page, (template, plotly_js) in PAGES.items():
            html = env.get_template(template).render(page=page, plotly=plotly_js, **context)
            (staging / page).write_text(html, encoding="utf-8")
        os.chmod(staging, 0o755)
        # Swap the finished site in; a crash before this line leaves the previous site intact.
        previous = None
        if out.exists():
            previous = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(previous)
        staging.rename(out)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out / "index.html"


def build_report(index: Path) -> dict[str, Any]:
    """What a built site holds (commits, charts, skipped files), read back from its data.js."""
    text = (index.parent / "data.js").read_text(encoding="utf-8")
    return json.loads(text.removeprefix("window.DPBENCH_DATA = ").rstrip().removesuffix(";"))
