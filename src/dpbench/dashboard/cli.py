"""`dpbench dashboard build|serve`: build the static site from results; serve it on loopback."""

from __future__ import annotations

import functools
import http.server
import ipaddress
import socket
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from dpbench.core.cli_help import Typer
from dpbench.core.paths import project_root

app = Typer(
    help="Build and serve the results dashboard.\n\n"
    "It shows each commit's placement and metrics, and compares two commits."
)
console = Console(stderr=True)


@app.command("build")
def build_command(
    results: Path = typer.Option(
        None, "--results", metavar="DIR", help="results directory (default: results/)"
    ),
    out: Path = typer.Option(
        None, "-o", "--out", metavar="OUT", help="site directory (default: dashboard/site)"
    ),
    history_repo: Path = typer.Option(
        None,
        "--history",
        metavar="REPO",
        help="git history the commits are from (default: the release history)",
    ),
    asv_html: Path = typer.Option(
        None, "--asv-html", metavar="DIR", help="asv's published site (default: OUT/../html)"
    ),
) -> None:
    """Build the static site and print its index path.

    The site opens from file://; it needs no server."""
    from dpbench.dashboard.build import build_report, build_site

    root = project_root()
    results = results or root / "results"
    out = out or root / "dashboard" / "site"
    try:
        index = build_site(results, out, history_repo=history_repo, asv_html=asv_html)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc)) from exc
    report = build_report(index)
    for p in report["problems"]:
        console.print(
            f"[yellow]skipped[/] {escape(p['path'])}: {escape(p['reason'])}", highlight=False
        )
    console.print(
        f"{len(report['commits'])} commits, {len(report['charts'])} charts, "
        f"{len(report['problems'])} skipped files"
    )
    print(index)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        console.print(f"[dim]{escape(format % args)}[/]", highlight=False)


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


@app.command("serve")
def serve_command(
    site: Path = typer.Option(
        None, "--site", metavar="DIR", help="built site (default: dashboard/site)"
    ),
    port: int = typer.Option(8765, help="TCP port (0 picks a free one)"),
    host: str = typer.Option("127.0.0.1", help="loopback address to bind (127.0.0.1 or ::1)"),
) -> None:
    """Serve the built site on loopback only.

    The site also opens from file:// directly."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise typer.BadParameter(
            f"{host!r} is not a loopback address; the dashboard serves on 127.0.0.1 or ::1 only",
            param_hint="--host",
        )
    site = site or project_root() / "dashboard" / "site"
    if not (site / "index.html").exists():
        raise typer.BadParameter(
            f"no built site at {site}; run `dpbench dashboard build` first", param_hint="--site"
        )
    handler = functools.partial(_QuietHandler, directory=str(site))
    server_cls = _V6Server if ":" in host else http.server.ThreadingHTTPServer
    with server_cls((host, port), handler) as httpd:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"serving {site} at http://{shown}:{httpd.server_address[1]}/ (Ctrl-C stops)",
            flush=True,
        )
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            console.print("stopped")
