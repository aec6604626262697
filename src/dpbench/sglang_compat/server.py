"""What the installed SGLang's server accepts: `launch_server --help` flags, read per install and cached.

Everything the server tier needs to know about one SGLang install lives here:

* the flags ``python -m sglang.launch_server --help`` prints (names, aliases, choices,
  deprecation), cached per install under ``.cache/sglang-help/`` so tests stay fast;
  when ``--help`` cannot run (a CPU-only machine missing one of SGLang's imports) the
  ``ServerArgs`` field names are read instead, and the result says so;
* how to ask for DP attention (``--attn-dp-size`` from 0.5.23, else ``--dp-size`` with
  ``--enable-dp-attention``), decided by which flags exist, not by version numbers;
* where SGLang's own ``bench_serving`` client lives (``sglang.benchmark.serving`` in
  newer releases, ``sglang.bench_serving`` in older ones).

The help text is read by running the target interpreter, so the orchestrating venv
never imports SGLang.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from dpbench.sglang_compat.detect import UnsupportedSGLang


class MissingServerFlag(UnsupportedSGLang):
    """The installed `launch_server` lacks a flag (or a choice) the launcher needs."""


class ServerHelpError(RuntimeError):
    """Neither `launch_server --help` nor the `ServerArgs` fields could be read."""


# Reads, without importing sglang, the files that define the server's flags, and
# prints a key that changes whenever they do (asv over git commits keeps one version
# string across many commits, so the version alone is not a cache key).
# Ports SGLang derives from --port (offsets): the gRPC port defaults to --port + 10000
# (0.5.14 … 0.5.23, `ServerArgs.grpc_port`; 0.5.14 refuses to start when it exceeds 65535).
# With DP attention, SGLang's ZMQ sockets take --port + 233 (``ZMQ_TCP_PORT_DELTA``, its
# torch.distributed address) and the next ports up: + 234 … + 240, and + 240 + dp_rank on the
# Rust path (0.5.16 … 0.5.23, ``PortArgs.init_new``). A --port the kernel chose (32768 up) puts
# them in the ephemeral range, where any outgoing connection may hold one: a fresh-clone test
# run (2026-12-07) failed with "detokenizer_port at 56278 is not available in 30 seconds".
DERIVED_PORT_OFFSETS: tuple[int, ...] = (10000, *range(233, 249))
# Where a server's --port is drawn: below the ports SGLang draws for itself, for a child to
# bind later. 0.5.23 takes its torch.distributed store's port (``nccl_port``,
# ``get_free_port_below_ephemeral``) at random from [22000, 29999]; 0.5.14 … 0.5.17 ask the
# kernel (the ephemeral range, 32768 up). A --port drawn from [22000, 30000) was once taken
# by such a store before the HTTP server bound it, a minute into start-up, with three
# servers starting side by side (a fresh-clone test run, 2026-12-03: "[Errno 98] error
# while attempting to bind on address"). With the gRPC offset above, [12000, 22000) stays
# ≤ 65535.
SERVER_PORT_RANGE: tuple[int, int] = (12000, 22000)


_INSTALL_KEY_SNIPPET = r"""
import hashlib, importlib.metadata as md, importlib.util, json, pathlib
spec = importlib.util.find_spec("sglang")
if spec is None or not spec.submodule_search_locations:
    print(json.dumps({"error": "sglang is not installed in this interpreter"})); raise SystemExit(0)
root = pathlib.Path(list(spec.submodule_search_locations)[0])
h = hashlib.sha256()
files = [root / "srt" / "server_args.py", root / "version.py", root / "launch_server.py"]
files += sorted((root / "srt" / "arg_groups").glob("*.py"))
for f in files:
    if f.is_file():
        h.update(f.name.encode()); h.update(f.read_bytes())
try:
    version = md.version("sglang")
except md.PackageNotFoundError:
    version = "unknown"
print(json.dumps({"version": version, "key": h.hexdigest(), "root": str(root)}))
"""

_FIELDS_SNIPPET = r"""
import dataclasses, json
from sglang.srt.server_args import ServerArgs
try:
    names = [f.name for f in dataclasses.fields(ServerArgs)]
except TypeError:
    from sglang.srt.arg_groups.overrides import record_fields  # 0.5.23: records, not dataclasses
    names = [f.name for f in record_fields(ServerArgs)]
print(json.dumps(names))
"""


@dataclass(frozen=True)
class FlagInfo:
    """One `launch_server` option as `--help` describes it."""

    name: str
    aliases: tuple[str, ...] = ()
    takes_value: bool = True
    choices: tuple[str, ...] | None = None
    deprecated: bool = False
    help: str = ""


@dataclass(frozen=True)
class ServerFlags:
    """The options one SGLang install's `launch_server` accepts."""

    version: str
    source: str  # "launch_server --help" or "ServerArgs fields (--help failed: …)"
    flags: dict[str, FlagInfo] = field(default_factory=dict)  # every spelling → its option

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def is_deprecated(self, flag: str) -> bool:
        info = self.flags.get(flag)
        return bool(info and info.deprecated)

    def check(self, flag: str, value: str | None = None) -> FlagInfo:
        """The option for ``flag``; raise MissingServerFlag naming the flag, the version and close matches."""
        info = self.flags.get(flag)
        if info is None:
            close = difflib.get_close_matches(flag, list(self.flags), n=3, cutoff=0.75)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise MissingServerFlag(
                f"SGLang {self.version}'s launch_server has no {flag} flag (read from {self.source}){hint}. "
                f"The run config asks for it; drop that setting or use a release that has the flag."
            )
        if value is not None and info.choices is not None and value not in info.choices:
            raise MissingServerFlag(
                f"SGLang {self.version}'s launch_server does not accept {flag} {value!r}; "
                f"allowed: {', '.join(info.choices)}"
            )
        return info


# An option line of argparse's help: two spaces, then "-x" or "--long ...".
_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9].*)$")
_CHOICES = re.compile(r"^\{(.*)\}$")


def _parse_spellings(spec: str) -> tuple[list[str], bool, tuple[str, ...] | None]:
    """Split '--a A, --b A' / '--x {p,q}' / '--flag, --no-flag' into names, takes_value, choices."""
    names: list[str] = []
    takes_value = False
    choices: tuple[str, ...] | None = None
    for part in spec.split(", "):
        words = part.split(" ", 1)
        if not words[0].startswith("-"):
            continue
        names.append(words[0])
        if len(words) > 1:
            takes_value = True
            m = _CHOICES.match(words[1].split(" ", 1)[0])
            if m:
                choices = tuple(c for c in m.group(1).split(",") if c)
    return names, takes_value, choices


def parse_help(text: str, *, version: str = "unknown") -> ServerFlags:
    """Parse argparse's ``--help`` output into the options it lists (all aliases, choices, deprecation)."""
    options: list[tuple[str, list[str]]] = []  # (spec, help lines)
    in_options = False
    for line in text.splitlines():
        if line and not line.startswith(" "):
            # "options:" / "<group title>:" start option sections; "usage:" does not.
            in_options = line.endswith(":") and not line.startswith("usage")
            continue
        if not in_options:
            continue
        m = _OPTION_LINE.match(line)
        if m:
            spec, _, rest = m.group(1).partition("  ")
            options.append((spec.strip(), [rest.strip()] if rest.strip() else []))
        elif options and line.strip():
            options[-1][1].append(line.strip())
    flags: dict[str, FlagInfo] = {}
    for spec, help_lines in options:
        names, takes_value, choices = _parse_spellings(spec)
        if not names:
            continue
        help_text = " ".join(help_lines)
        info = FlagInfo(
            name=names[0],
            aliases=tuple(names[1:]),
            takes_value=takes_value,
            choices=choices,
            deprecated=bool(re.match(r"\(?deprecated", help_text, re.IGNORECASE)),
            help=help_text,
        )
        for n in names:
            flags[n] = info
    if "--model-path" not in flags:
        raise ServerHelpError(
            "this does not look like `sglang.launch_server --help` output: no --model-path option found"
        )
    return ServerFlags(version=version, source="launch_server --help", flags=flags)


def flags_from_fields(names: list[str], *, version: str, why: str) -> ServerFlags:
    """The fallback: one `--field-name` per ServerArgs field (no choices, no aliases, no deprecation)."""
    flags = {}
    for n in names:
        flag = n if n.startswith("--") else "--" + n.replace("_", "-")
        flags[flag] = FlagInfo(name=flag)
    return ServerFlags(version=version, source=f"ServerArgs fields ({why})", flags=flags)


def fields_from_source(sglang_root: Path) -> list[str]:
    """ServerArgs field names and literal ``add_argument("--…")`` spellings, read with ``ast`` (no import)."""
    groups = sglang_root / "srt" / "arg_groups"
    files = [sglang_root / "srt" / "server_args.py", *sorted(groups.rglob("*.py"))]
    names: set[str] = set()
    for f in files:
        if not f.is_file():
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
        for node in ast.walk(tree):
            # ServerArgs itself (≤ 0.5.22), or the field namespaces it is assembled from (0.5.23).
            if isinstance(node, ast.ClassDef) and (
                node.name == "ServerArgs" or f.parent.name == "fields"
            ):
                names.update(
                    st.target.id
                    for st in node.body
                    if isinstance(st, ast.AnnAssign)
                    and isinstance(st.target, ast.Name)
                    and not st.target.id.startswith("_")
                )
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                names.update(
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant)
                    and isinstance(a.value, str)
                    and a.value.startswith("--")
                )
    if not names:
        raise ServerHelpError(f"no ServerArgs fields found under {sglang_root}/srt")
    return sorted(names)


def _run(python: str | Path, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_child_env(),
    )


def _child_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class InstallKey:
    version: str
    key: str
    root: str


def install_key(python: str | Path, *, timeout: float = 60) -> InstallKey:
    """Version and content hash of the SGLang installed for ``python`` (sglang is not imported)."""
    proc = _run(python, ["-c", _INSTALL_KEY_SNIPPET], timeout)
    if proc.returncode != 0:
        raise ServerHelpError(f"{python} could not be run to locate sglang:\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in data:
        raise ServerHelpError(
            f"{python}: {data['error']} (install SGLang there, or pass the interpreter that has it)"
        )
    return InstallKey(data["version"], data["key"], data["root"])


def server_flags(
    python: str | Path, *, cache_dir: Path | None, timeout: float = 300
) -> ServerFlags:
    """The flags of the `launch_server` installed for ``python``: from ``--help``, else ServerArgs fields.

    With ``cache_dir`` (dpbench passes ``.cache/sglang-help``) the parsed result is kept
    per install (version + hash of the files defining the flags), so only the first call
    per install pays SGLang's import time; None reads and writes no cache.
    """
    key = install_key(python)
    cache = None if cache_dir is None else cache_dir / f"{key.version}-{key.key[:16]}.json"
    if cache is not None and cache.is_file():
        data = json.loads(cache.read_text())
        if data.get("kind") == "help":
            return parse_help(data["text"], version=key.version)
        return flags_from_fields(data["names"], version=key.version, why=data["why"])
    proc = _run(python, ["-m", "sglang.launch_server", "--help"], timeout)
    if proc.returncode == 0 and "--model-path" in proc.stdout:
        result = parse_help(proc.stdout, version=key.version)
        payload = {"kind": "help", "text": proc.stdout}
    else:
        why = _last_error_line(proc.stderr) or f"exit status {proc.returncode}"
        fields_proc = _run(python, ["-c", _FIELDS_SNIPPET], timeout)
        if fields_proc.returncode == 0:
            names = json.loads(fields_proc.stdout.strip().splitlines()[-1])
            why = f"--help failed: {why}"
        else:
            # ServerArgs imports the same modules --help does; read its source instead.
            names = fields_from_source(Path(key.root))
            why = (
                f"--help and `import sglang.srt.server_args` failed: {why}; "
                f"flags read from the source of server_args.py"
            )
        result = flags_from_fields(names, version=key.version, why=why)
        payload = {"kind": "fields", "names": names, "why": why}
    if cache is not None:  # written whole or not at all (this package imports no dpbench helper)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**payload, "version": key.version, "key": key.key}))
        os.replace(tmp, cache)
    return result


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def dp_attention_args(flags: ServerFlags, *, tp_size: int, dp_size: int) -> list[str]:
    """The flags that ask this install for DP attention with ``dp_size`` attention-DP groups.

    Releases with ``--attn-dp-size`` (0.5.23) deprecate ``--dp-size N --enable-dp-attention``
    in its favour; older releases only have the latter.
    """
    if dp_size < 2:
        return []
    if flags.has("--attn-dp-size"):
        return ["--attn-dp-size", str(dp_size)]
    flags.check("--dp-size")
    flags.check("--enable-dp-attention")
    return ["--dp-size", str(dp_size), "--enable-dp-attention"]


def bench_serving_module(python: str | Path, *, timeout: float = 60) -> str:
    """The module name of SGLang's own serving benchmark client for ``python``'s install."""
    snippet = (
        "import importlib.util as u\n"
        "for m in ('sglang.benchmark.serving', 'sglang.bench_serving'):\n"
        "    try:\n"
        "        found = u.find_spec(m)\n"
        "    except ModuleNotFoundError:\n"
        "        found = None\n"
        "    if found:\n"
        "        print(m); break\n"
    )
    proc = _run(python, ["-c", snippet], timeout)
    name = proc.stdout.strip()
    if proc.returncode != 0 or not name:
        raise ServerHelpError(
            f"{python}: neither sglang.benchmark.serving nor sglang.bench_serving is installed"
        )
    return name


def help_digest(flags: ServerFlags) -> str:
    """A short, stable digest of the accepted flag names (for run records)."""
    return hashlib.sha256("\n".join(sorted(flags.flags)).encode()).hexdigest()[:16]


# The /generate request field that routes a request to one DP rank past the DP controller's
# own balancing (what SGLang's router sends in front of a DP server): GenerateReqInput's
# ``routed_dp_rank`` in 0.5.16, 0.5.17 and 0.5.23 (read off io_struct.py and
# DataParallelController.maybe_external_dp_rank_routing of each; 0.5.23 also accepts the
# deprecated ``data_parallel_rank`` and maps it onto ``routed_dp_rank``).
ROUTED_DP_RANK_FIELD = "routed_dp_rank"


# Emptying a running server between replays: ``/flush_cache`` (GET or POST) resets every DP
# rank's radix cache, request-to-token pool and KV allocator, and answers 200 only when every
# scheduler was fully idle (no running, waiting or chunked request, no batch in flight), else
# 400 with the reason; ``?timeout=S`` waits up to S seconds for that idle state. Read off
# http_server.py and Scheduler.flush_cache of 0.5.16, 0.5.17 and 0.5.23 (the same in all three).
# What it does not reset: the new-token ratio (SGLang resets it itself on every idle pass),
# the DP controller's round-robin position, and the server's metric counters' totals.
FLUSH_CACHE_PATH = "/flush_cache"


def flush_cache(base_url: str, *, timeout_s: float = 60.0) -> None:
    """Flush a running SGLang server's caches, waiting up to ``timeout_s`` for it to go idle;
    raises RuntimeError with SGLang's reason when it would not."""
    import urllib.error
    import urllib.request

    url = f"{base_url.rstrip('/')}{FLUSH_CACHE_PATH}?timeout={timeout_s:g}"
    req = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s + 30) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace").strip()
        raise RuntimeError(
            f"{url}: SGLang did not flush its caches (HTTP {exc.code}: {body[:300]})"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(
            f"{url}: could not reach the server to flush its caches ({exc})"
        ) from None
