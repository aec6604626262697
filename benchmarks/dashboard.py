"""Dashboard speed: site build time and page load in headless Chromium, at 50 commits × 40 benchmarks × their params.

The input is SYNTHETIC by construction (:mod:`dpbench.dashboard.scale`): the suite's own
real asv results (``results/``, from ``make bench``; or ``$DPBENCH_SCALE_SOURCE``)
replicated over 50 made-up commits and 40 renamed benchmarks, each with the twin's
36-scenario parameter grid (spec × DP × chunk size × delayer; 72,000 points), on the
machine ``synthetic-scale-input``. It times the dashboard, not SGLang, so run it in the
orchestrating venv, e.g.::

    .venv/bin/asv run --config asv.releases.json -E existing:.venv/bin/python \\
        --bench '^dashboard\\.' --set-commit-hash $(git -C .cache/sglang-releases rev-parse HEAD)

Targets (issue #12): build ≤ 10 s (loading, the model, asv's step detection over every
series, the pages), landing page (the summary) first view ≤ 1 s. The history and
comparison pages (plotly) are tracked too.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from .common import require_chromium, require_site_builder, skip_on

COMMITS, BENCHMARKS = 50, 40


def _scale_input() -> tuple[Path, Path]:
    """(temp dir, synthetic results tree) built from the real results; skip with why if impossible."""
    require_site_builder()
    from dpbench.core.paths import results_dir
    from dpbench.dashboard import scale

    source = Path(os.environ.get("DPBENCH_SCALE_SOURCE") or results_dir())
    tmp = Path(tempfile.mkdtemp(prefix="dpbench-dashboard-bench-"))
    try:
        skip_on(
            (scale.ScaleInputError,),
            lambda: scale.synthesise(
                source, tmp / "results", commits=COMMITS, benchmarks=BENCHMARKS, twin_grid=True
            ),
        )
    except NotImplementedError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, tmp / "results"


class SiteBuild:
    """`build_site` over 50 commits × 40 benchmarks of (replicated real) results."""

    timeout = 300

    def setup(self) -> None:
        from dpbench.dashboard.build import build_site

        self.tmp, self.results = _scale_input()
        self.build_site = build_site
        # One build first, so plotly.js (4.8 MB) is copied as on any rebuild after the first.
        build_site(self.results, self.tmp / "site", history_repo=None)

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_build_site(self) -> None:
        self.build_site(self.results, self.tmp / "site", history_repo=None)

    time_build_site.number = 1
    time_build_site.repeat = (3, 7, 60.0)


class PageLoad:
    """The built pages in headless Chromium from file://: navigation start → first view drawn."""

    timeout = 600
    loads = 5

    def setup(self) -> None:
        require_chromium()
        from dpbench.dashboard import browser
        from dpbench.dashboard.build import build_site

        self.tmp, results = _scale_input()
        self.index = build_site(results, self.tmp / "site", history_repo=None)
        self.browser = browser

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _median_ready_s(self, page: str) -> float:
        """Median over ``loads`` fresh loads in one warm browser; a JS error fails the benchmark."""
        times = []
        with self.browser.chromium() as chromium:
            self.browser.load(chromium, self.index.parent / page, wait_all=False)  # warm-up
            for _ in range(self.loads):
                rep = self.browser.load(chromium, self.index.parent / page, wait_all=False)
                if rep.console_errors:
                    raise RuntimeError(f"{page}: JavaScript errors: {rep.console_errors}")
                times.append(rep.ready_ms / 1000)
        return statistics.median(times)

    def track_index_first_view_s(self) -> float:
        """The landing page: the summary tables (no plotly)."""
        return self._median_ready_s("index.html")

    track_index_first_view_s.unit = "s"

    def track_history_first_view_s(self) -> float:
        return self._median_ready_s("history.html")

    track_history_first_view_s.unit = "s"

    def track_compare_first_view_s(self) -> float:
        return self._median_ready_s("compare.html")

    track_compare_first_view_s.unit = "s"
