"""One streaming request against SGLang's native ``/generate``: send ``input_ids``, time every SSE chunk.

SGLang streams ``data: {json}\\n\\n`` events and ends with ``data: [DONE]\\n\\n``
(``sglang/srt/entrypoints/http_server.py``). Each event carries ``output_ids`` (the
whole output so far, or the new ids with ``--incremental-streaming-output``), ``text``
unless ``--skip-tokenizer-init``, and ``meta_info`` whose ``completion_tokens`` counts
the output so far in both modes; token counting therefore uses ``completion_tokens``.
An error inside the stream is an event ``{"error": {...}}``.

Request functions follow the :class:`RequestFunc` protocol (vLLM's split): they get
the shared ``aiohttp.ClientSession`` and return a :class:`RequestOutcome`; they never
raise for a failed request, they record what failed in ``error_kind``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from dpbench.server.loadclock import CURRENT
from dpbench.sglang_compat.server import ROUTED_DP_RANK_FIELD

try:  # 3-5x faster on the cumulative chunks; optional
    import orjson

    _loads = orjson.loads
    _dumps = orjson.dumps
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


ErrorKind = Literal[
    "http", "connect", "disconnect", "truncated", "timeout", "server_error", "malformed", "client"
]
ERROR_KINDS: tuple[str, ...] = (
    "http",
    "connect",
    "disconnect",
    "truncated",
    "timeout",
    "server_error",
    "malformed",
    "client",
)


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """What to send: the prompt as token ids and how many tokens to generate."""

    id: str
    input_ids: Sequence[int]
    max_new_tokens: int
    ignore_eos: bool = True
    # a DP rank chosen in front of the server (a router), past its DP controller's balancing
    routed_dp_rank: int | None = None

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "rid": self.id,
            "input_ids": list(self.input_ids),
            "sampling_params": {
                "max_new_tokens": self.max_new_tokens,
                "ignore_eos": self.ignore_eos,
                "temperature": 0.0,
            },
            "stream": True,
        }
        if self.routed_dp_rank is not None:
            body[ROUTED_DP_RANK_FIELD] = self.routed_dp_rank
        return body


@dataclass(slots=True)
class RequestOutcome:
    """What one request did, timed on this client's monotonic clock (seconds)."""

    id: str
    input_tokens: int
    start_s: float = 0.0  # the load clock's time just before the POST (perf_counter or virtual)
    ok: bool = False
    error_kind: str | None = None  # one of ERROR_KINDS when not ok
    error: str = ""
    http_status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # one per output token after the first
    output_tokens: int = 0
    chunks: int = 0
    malformed_chunks: int = 0
    finish_reason: str | None = None
    dp_rank: int | None = None
    # prompt tokens SGLang found in its radix cache for this request (meta_info.cached_tokens)
    cached_tokens: int | None = None

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM/SGLang's TPOT; dpbench.metrics.latency)."""
        from dpbench.metrics.latency import tpot_of

        return tpot_of(self.ttft_s, self.e2e_s, self.output_tokens)


class RequestFunc(Protocol):
    async def __call__(
        self, session: aiohttp.ClientSession, base_url: str, request: GenerateRequest
    ) -> RequestOutcome: ...


DONE = object()
_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def parse_sse_line(line: bytes) -> dict[str, Any] | object | Malformed | None:
    """One SSE line → its JSON event, ``DONE``, ``Malformed(reason)``, or None for blank/comment lines."""
    line = line.strip()
    if not line or line.startswith(b":"):
        return None
    if not line.startswith(b"data:"):
        return Malformed(f"not an SSE data line: {line[:60]!r}")
    body = line[5:].lstrip()
    if body == b"[DONE]":
        return DONE
    try:
        event = _loads(body)
    except ValueError as exc:
        return Malformed(f"bad JSON ({exc}): {body[:60]!r}")
    if not isinstance(event, dict):
        return Malformed(f"event is {type(event).__name__}, not an object")
    return event


def _completion_tokens(event: dict[str, Any]) -> int | None:
    meta = event.get("meta_info")
    if isinstance(meta, dict) and isinstance(meta.get("completion_tokens"), int):
        return meta["completion_tokens"]
    ids = event.get("output_ids")
    return len(ids) if isinstance(ids, list) else None


def _finish_reason(event: dict[str, Any]) -> str | None:
    meta = event.get("meta_info")
    fr = meta.get("finish_reason") if isinstance(meta, dict) else None
    if isinstance(fr, dict):
        return str(fr.get("type"))
    return None if fr is None else str(fr)


async def sglang_generate(
    session: aiohttp.ClientSession, base_url: str, request: GenerateRequest
) -> RequestOutcome:
    """POST ``/generate`` with ``stream: true`` and time the chunks (a :class:`RequestFunc`)."""
    out = RequestOutcome(id=request.id, input_tokens=len(request.input_ids))
    body = _dumps(request.payload())
    tokens = 0
    saw_done = False
    load_clock = CURRENT.get()
    clock = load_clock.now
    out.start_s = st = clock()
    last = st
    try:
        async with session.post(f"{base_url}/generate", data=body, headers=_JSON) as resp:
            out.http_status = resp.status
            if resp.status != 200:
                out.error_kind = "http"
                out.error = f"HTTP {resp.status}: {(await resp.text(errors='replace'))[:500]}"
                return out
            async for line in resp.content:
                now = clock()  # arrival time, before any parsing cost
                parsed = parse_sse_line(line)
                if parsed is None:
                    continue
                if parsed is DONE:
                    saw_done = True
                    break
                if isinstance(parsed, Malformed):
                    out.malformed_chunks += 1
                    if not out.error:
                        out.error = parsed.reason
                    continue
                assert isinstance(parsed, dict)
                out.chunks += 1
                if "error" in parsed:
                    err = parsed["error"]
                    out.error_kind = "server_error"
                    out.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
                    continue
                n = _completion_tokens(parsed)
                if n is None:
                    out.malformed_chunks += 1
                    if not out.error:
                        out.error = "event without meta_info.completion_tokens or output_ids"
                    continue
                if n > tokens:
                    load_clock.tokens(n - tokens)
                    if tokens == 0:
                        out.ttft_s = now - st
                        if n > 1:  # several tokens in the first chunk: spread like later chunks
                            out.itl_s.extend([0.0] * (n - 1))
                    else:
                        gap = (now - last) / (n - tokens)
                        out.itl_s.extend([gap] * (n - tokens))
                    tokens = n
                    last = now
                meta = parsed.get("meta_info")
                if isinstance(meta, dict):
                    fr = _finish_reason(parsed)
                    if fr is not None:
                        out.finish_reason = fr
                        if fr == "abort":  # SGLang aborted it (e.g. could never fit in the KV pool)
                            reason = meta.get("finish_reason") or {}
                            out.error_kind = "server_error"
                            out.error = f"aborted by the server: {reason.get('message', '')}"[:500]
                    if out.dp_rank is None and isinstance(meta.get("dp_rank"), int):
                        out.dp_rank = meta["dp_rank"]
                    if isinstance(meta.get("cached_tokens"), int):
                        out.cached_tokens = meta["cached_tokens"]
        # virtual time guarantees only that the clock never passes a token on its way: once
        # the last token is counted it may move on before [DONE] is read, by however far this
        # machine's timing lets it, so a virtual request ends at its last token
        out.e2e_s = (last if load_clock.virtual and tokens else clock()) - st
        out.output_tokens = tokens
        if out.error_kind is None:
            if not saw_done:
                out.error_kind = "truncated"
                out.error = "the stream ended without data: [DONE]"
            elif out.malformed_chunks:
                out.error_kind = "malformed"
            else:
                out.ok = True
    except TimeoutError:
        out.error_kind, out.error = "timeout", "no data before the client timeout"
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        out.error_kind, out.error = "disconnect", f"{type(exc).__name__}: {exc}"[:500]
    except aiohttp.ClientConnectorError as exc:
        out.error_kind, out.error = "connect", f"{type(exc).__name__}: {exc}"[:500]
    except aiohttp.ClientConnectionError as exc:
        out.error_kind = "disconnect" if out.http_status else "connect"
        out.error = f"{type(exc).__name__}: {exc}"[:500]
    except (aiohttp.ClientError, ValueError) as exc:  # e.g. "Line is too long"
        out.error_kind, out.error = "client", f"{type(exc).__name__}: {exc}"[:500]
    if not out.ok:
        out.output_tokens = tokens
        if out.e2e_s is None:
            out.e2e_s = clock() - st
    return out


# bench_serving's aiohttp timeout (6 h): a request queued behind a long burst may wait many
# minutes for its first byte, and a client that gives up first aborts it on the server
DEFAULT_READ_TIMEOUT_S = 6 * 60 * 60.0


def make_session(
    *, max_connections: int = 0, read_timeout_s: float | None = DEFAULT_READ_TIMEOUT_S
) -> aiohttp.ClientSession:
    """The one ClientSession a run shares: unbounded pool (the driver bounds concurrency), big read buffer."""
    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, connect=30.0, sock_read=read_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=1 << 20)
