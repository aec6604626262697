"""asv glue shared by the suites: skips in ``setup``, cache entries back to asv's outcomes, and
the tracks each class makes from its one table of units.

The work itself is the library's: every ``setup_cache`` is one call into a tier's ``bench``
module (``dpbench.twin.bench``, ``dpbench.server.bench``, …), which runs the settings and
keys them (:func:`dpbench.core.asvcache.setting_key`). Here a class reads an entry back under
the same key and turns it into what asv wants: a number, ``{"samples", "number"}`` (asv
0.6.6 turns it into a median with an interval), NaN for not measured, a skip or a failure.

A class declares its tracks as one table, ``{name: Track}``, and :func:`tracks` makes a
``track_<name>`` method per row carrying the row's unit, so no class takes another's units
by inheritance. A row judged by an SLO names it in its unit (from
:class:`dpbench.metrics.latency.Slo`, never typed), and reading it fails if a run was
judged by another SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar

from dpbench.core.asvcache import setting_key
from dpbench.metrics.latency import Slo

# The scenario the simulated-forward server and the twin both run (the fidelity view pairs
# them): a CPU-sized high-KV spec at SGLang's H200 default global chunk size, the device
# the cost model models (SGLang's own CPU default would be 4096).
FIDELITY_SPEC = "long-prompt-burst-small"
FIDELITY_CHUNKED_PREFILL = 8192
SUITE_SLO = Slo()  # what every benchmark's goodput is judged by, and its units say
T = TypeVar("T")

# --- skips in setup (asv: NotImplementedError, one line naming what is missing) -----------


def skip_on(missing: tuple[type[BaseException], ...], check: Callable[[], T]) -> T:
    """``check()``'s value; a skip (NotImplementedError, its one-line message) when it raises
    one of ``missing``. Any other error propagates and fails the benchmark."""
    try:
        return check()
    except missing as exc:
        raise NotImplementedError(str(exc)) from exc


def require_sglang(components: tuple[str, ...] = ("adder", "delayer")) -> dict[str, Any]:
    """The installed SGLang's provenance (``{"sglang", "placement"}``); skip with the one-line
    difference if unsupported.

    ``components`` names what the benchmark drives (see ``generations.COMPONENTS``): a
    release whose delayer changed can still run benchmarks that only drive the adder. An
    SGLang whose own module or name is missing is an unsupported shape (a skip, naming it); any
    other import failure (``detect.BrokenEnvironment``) or error propagates and fails the benchmark.
    """
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.provenance import provenance

    return skip_on((UnsupportedSGLang,), lambda: provenance(components))


def require_attention_kernels() -> Any:
    """SGLang's Triton attention kernels; skip where their API shape is unsupported."""
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.kernels import load_attention_kernels

    return skip_on((UnsupportedSGLang,), load_attention_kernels)


def require_trace(fmt: str) -> str:
    """The shared copy of a production trace; skip where it is not on this machine, naming
    the file and where to get it."""
    from dpbench.workload.importers.source import missing_shared_trace, shared_trace

    why = missing_shared_trace(fmt)
    if why is not None:
        raise NotImplementedError(why)
    return str(shared_trace(fmt))


def require_site_builder() -> None:
    """Skip unless this interpreter can build the dashboard (the orchestrating venv)."""
    try:
        import jinja2  # noqa: F401
        import plotly  # noqa: F401

        from dpbench.dashboard import build  # noqa: F401
    except ImportError as exc:
        raise NotImplementedError(
            f"needs the orchestrating venv (jinja2, plotly): {exc}; "
            "run with -E existing:.venv/bin/python"
        ) from exc


def require_chromium() -> None:
    """Skip unless headless Chromium and playwright are here."""
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
        import playwright  # noqa: F401
    except (browser.BrowserUnavailable, ImportError) as exc:
        raise NotImplementedError(str(exc)) from exc


# --- cache entries -------------------------------------------------------------------------


class SettingFailed(RuntimeError):
    """One setting of a benchmark class's cache failed; the others were kept."""


def cached(cache: dict[str, Any], key: str) -> dict[str, Any]:
    """A setting's entry: the whole cache's skip, the setting's skip (asv: skipped), its
    failure (asv: failed, with the original error), or its result."""
    if "skip" in cache and isinstance(cache["skip"], str):
        raise NotImplementedError(cache["skip"])
    entry = cache[key]
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    if "error" in entry:
        raise SettingFailed(f"setting {key} failed in setup_cache: {entry['error']}")
    return entry


def entry(cache: dict[str, Any], params: Iterable[Any]) -> dict[str, Any]:
    """The entry of one parameter setting (one run, or the setting's replays)."""
    return cached(cache, setting_key(*params))


def entries(cache: dict[str, Any], params: Iterable[Any], samples: Iterable[Any]) -> list[dict]:
    """The entries of one parameter setting, one per sample (seed, window), in sample order."""
    return [cached(cache, setting_key(*params, s)) for s in samples]


def metric(result: dict[str, Any], name: str) -> float:
    """A metric's value from a run result; a missing metric is an error naming what exists."""
    try:
        return result["metrics"][name]["value"]
    except KeyError:
        raise KeyError(
            f"metric {name!r} not in run result; has {sorted(result.get('metrics', {}))}"
        ) from None


def delayer_metric(result: dict[str, Any], name: str, delayer: str) -> float:
    """A metric only the delayer produces: NaN (not measured) with the delayer off; with it on a
    missing one fails the benchmark naming it (a renamed counter must not read as "not measured")."""
    if delayer == "off":
        found = result.get("metrics", {}).get(name)
        if found is not None:
            raise KeyError(f"metric {name!r} present in a delayer-off run; it is the delayer's")
        return float("nan")
    return metric(result, name)


def optional_metric(result: dict[str, Any], name: str) -> float:
    """A metric the run result may leave out because it was not measured: NaN (asv: no value) then.

    The run result's ``notes`` say why (e.g. "static analysis: unknown (…)").
    """
    found = result.get("metrics", {}).get(name)
    return float("nan") if found is None else found["value"]


def samples(values: Iterable[float]) -> Any:
    """asv's per-sample result (seeds, windows, replays) of the measured values; NaN (not
    measured) when none was."""
    seen = [float(v) for v in values if v == v]
    return {"samples": seen, "number": 1} if seen else float("nan")


# --- tracks from one table per class -------------------------------------------------------


@dataclass(frozen=True)
class Track:
    """One ``track_<name>`` of a class: the run metric it reads and its unit.

    ``delayer_only``: only the delayer produces it (NaN with the delayer off); ``optional``:
    a run may leave it out (not measured); ``slo``: the SLO its value was judged by, which
    its unit names (:func:`slo_track`)."""

    metric: str
    unit: str
    delayer_only: bool = False
    optional: bool = False
    slo: Slo | None = None


def slo_track(metric_name: str, unit: str, slo: Slo) -> Track:
    """A track judged by ``slo``: its unit is ``unit`` with the SLO's label in place of ``{slo}``."""
    return Track(metric_name, unit.format(slo=slo.label), slo=slo)


def goodput(slo: Slo, note: str = "") -> Track:
    return Track("goodput_requests_per_s", slo.goodput_unit + note, slo=slo)


def check_slo(track: Track, runs: Iterable[dict[str, Any]]) -> None:
    """A track judged by an SLO fails when a run was judged by another: its unit would lie."""
    if track.slo is None:
        return
    for run in runs:
        if run["slo"] != asdict(track.slo):
            raise ValueError(
                f"{track.metric}'s unit names {track.slo.label}, but its run was judged by "
                f"{Slo(**run['slo']).label}"
            )


def _track(name: str, row: Track) -> Callable[..., Any]:
    def track(self: Any, *params: Any) -> Any:
        return self.read(row)

    track.__name__ = track.__qualname__ = f"track_{name}"
    track.unit = row.unit  # type: ignore[attr-defined]
    return track


def tracks(table: dict[str, Track]) -> Callable[[type], type]:
    """Give the class one ``track_<name>`` per row of ``table`` (its ``read(row)`` reads it),
    with the row's unit. A row judged by an SLO gets a version naming it, so asv never
    compares values judged by two SLOs."""

    def add(cls: type) -> type:
        for name, row in table.items():
            track = _track(name, row)
            if row.slo is not None:
                slo = row.slo
                track.version = f"{cls.version}+slo-{slo.ttft_ms:g}-{slo.tpot_ms:g}"  # type: ignore[attr-defined]
            setattr(cls, f"track_{name}", track)
        cls.table = table  # type: ignore[attr-defined]
        return cls

    return add


class SeedRuns:
    """Reads a track over ``self.runs`` (one entry per seed or window): asv samples in sample
    order, paired by seed between commits. A delayer-only metric with the delayer off is NaN:
    asv shows n/a, never a 0."""

    runs: list[dict[str, Any]]
    delayer: str
    table: ClassVar[dict[str, Track]]

    def read(self, row: Track) -> Any:
        check_slo(row, self.runs)
        if row.delayer_only:
            values = [delayer_metric(r, row.metric, self.delayer) for r in self.runs]
            if self.delayer == "off":
                return float("nan")  # not measured (delayer off): absent, never 0
            return {"samples": [float(v) for v in values], "number": 1}
        return {"samples": [float(metric(r, row.metric)) for r in self.runs], "number": 1}


class OneRun:
    """Reads a track from ``self.result``, one run: a plain number; NaN where not measured."""

    result: dict[str, Any]
    delayer: str = "on"
    table: ClassVar[dict[str, Track]]

    def read(self, row: Track) -> float:
        check_slo(row, [self.result])
        if row.delayer_only:
            return delayer_metric(self.result, row.metric, self.delayer)
        if row.optional:
            return optional_metric(self.result, row.metric)
        return metric(self.result, row.metric)


class Replays:
    """Reads a track over ``self.runs``, replays of one server (asv samples in replay order:
    repeats, never paired with another commit's), each kept only where its instrument was
    healthy for the metric (:func:`dpbench.server.health.counts`); NaN when none was."""

    runs: list[dict[str, Any]]
    delayer: str
    table: ClassVar[dict[str, Track]]

    def read(self, row: Track) -> Any:
        from dpbench.server.health import counts

        check_slo(row, self.runs)
        valid = [r for r in self.runs if counts(row.metric, r["health"])]
        if row.delayer_only:
            if self.delayer == "off":
                return float("nan")  # not measured (delayer off): absent, never 0
            return samples(delayer_metric(r, row.metric, self.delayer) for r in valid)
        if row.optional:
            return samples(optional_metric(r, row.metric) for r in valid)
        return samples(metric(r, row.metric) for r in valid)
