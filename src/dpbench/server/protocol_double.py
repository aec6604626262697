"""A PROTOCOL TEST DOUBLE of an SGLang server: ``/generate`` streaming and ``/metrics`` exposition, no model.

This is not SGLang and produces no benchmark numbers about SGLang. It speaks the wire
format SGLang 0.5.x speaks (``sglang/srt/entrypoints/http_server.py``: ``data: {json}\\n\\n``
events with cumulative ``output_ids``/``text`` and ``meta_info.completion_tokens``,
then ``data: [DONE]``; in-stream errors as ``{"error": {...}}``), with a known
server-side timing (first token after ``first_token_delay_s``, then one token every
``itl_s``), so a load client's parsing, fault handling and timing accuracy can be
tested against it. Knobs inject faults into every n-th request (in arrival order):
HTTP errors, mid-stream disconnects, malformed chunks, in-stream errors, slow streams.

``/metrics`` is real Prometheus exposition (prometheus-client's registry) carrying the
series names SGLang exports for the PrefillDelayer and token usage, with ``dp_rank``
labels, updated deterministically per request. ``/double/stats`` reports what the double
did (faults assigned, the first-token delay it actually achieved), for tests.

Run standalone: ``python -m dpbench.server.protocol_double --port 8000 [--first-token-delay-ms 100 ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

FAULTS = ("http_error", "disconnect", "malformed", "server_error", "slow")

# The (input_estimation, output_allow, output_reason, actual_execution) outcomes the
# double cycles through, one per request; shapes as SGLang's metrics_collector labels them.
_OUTCOME_CYCLE = (
    ("all", "true", "no_wait", "true"),
    ("mixed", "false", "delay", "false"),
    ("all", "true", "wait_success", "true"),
    ("none", "true", "", "false"),
)


@dataclass(frozen=True)
class DoubleConfig:
    """Timing and fault knobs of the protocol test double (every_n = 0 disables a fault)."""

    first_token_delay_s: float = 0.05
    itl_s: float = 0.01
    http_error_every: int = 0
    http_error_status: int = 503
    disconnect_every: int = 0
    disconnect_after_tokens: int = 2
    malformed_every: int = 0
    server_error_every: int = 0
    slow_every: int = 0
    slow_factor: float = 5.0
    emit_text: bool = True  # False mimics --skip-tokenizer-init (output_ids only)
    dp_size: int = 2
    model: str = "protocol-double"

    def fault_for(self, k: int) -> str | None:
        """The fault of the k-th request (1-based arrival order), first match in FAULTS order."""
        for name in FAULTS:
            every = getattr(self, f"{name}_every")
            if every and k % every == 0:
                return name
        return None


class _Metrics:
    """SGLang-named Prometheus series, per DP rank, in a private registry."""

    def __init__(self, dp_size: int, model: str) -> None:
        self.registry = CollectorRegistry()
        base = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"]
        self.base = {
            "model_name": model,
            "engine_type": "unified",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        r = self.registry
        self.outcomes = PromCounter(
            "sglang:prefill_delayer_outcomes",
            "Prefill delayer outcome counts.",
            [*base, "input_estimation", "output_allow", "output_reason", "actual_execution"],
            registry=r,
        )
        self.wait_passes = PromHistogram(
            "sglang:prefill_delayer_wait_forward_passes",
            "Forward passes waited.",
            base,
            buckets=(0, 5, 20, 29),
            registry=r,
        )
        self.wait_seconds = PromHistogram(
            "sglang:prefill_delayer_wait_seconds",
            "Seconds waited.",
            base,
            buckets=(0, 1, 2, 5),
            registry=r,
        )
        self.steps = PromCounter(
            "sglang:dp_attention_steps",
            "MLP-sync steps on this DP rank.",
            [*base, "rank_state"],
            registry=r,
        )
        self.token_usage = PromGauge("sglang:token_usage", "KV token usage.", base, registry=r)
        self.used = PromGauge("sglang:num_used_tokens", "Used KV tokens.", base, registry=r)
        self.running = PromGauge("sglang:num_running_reqs", "Running requests.", base, registry=r)
        self.pool = 100_000
        self.dp_size = dp_size
        self.in_use = [0] * dp_size
        self.running_n = [0] * dp_size
        for rank in range(dp_size):
            lab = self.labels(rank)
            self.token_usage.labels(**lab).set(0)
            self.used.labels(**lab).set(0)
            self.running.labels(**lab).set(0)
            for st in ("active", "idle"):
                self.steps.labels(**lab, rank_state=st)

    def labels(self, rank: int) -> dict[str, str]:
        return {**self.base, "tp_rank": str(rank), "dp_rank": str(rank)}

    def admit(self, k: int, rank: int, tokens: int) -> None:
        est, allow, reason, executed = _OUTCOME_CYCLE[k % len(_OUTCOME_CYCLE)]
        lab = self.labels(rank)
        self.outcomes.labels(
            **lab,
            input_estimation=est,
            output_allow=allow,
            output_reason=reason,
            actual_execution=executed,
        ).inc()
        if allow == "true" and executed == "true":
            self.wait_passes.labels(**lab).observe(k % 7)
            self.wait_seconds.labels(**lab).observe((k % 7) * 0.01)
        self.in_use[rank] += tokens
        self.running_n[rank] += 1
        self._set(rank)

    def step(self, rank: int) -> None:
        self.steps.labels(**self.labels(rank), rank_state="active").inc()

    def release(self, rank: int, tokens: int) -> None:
        self.in_use[rank] -= tokens
        self.running_n[rank] -= 1
        self._set(rank)

    def _set(self, rank: int) -> None:
        lab = self.labels(rank)
        self.token_usage.labels(**lab).set(self.in_use[rank] / self.pool)
        self.used.labels(**lab).set(self.in_use[rank])
        self.running.labels(**lab).set(self.running_n[rank])


class ProtocolDouble:
    """The aiohttp application of the protocol test double, and what it recorded."""

    def __init__(self, config: DoubleConfig = DoubleConfig()) -> None:
        self.config = config
        self.arrivals = 0
        self.flushes = 0
        self.faults: Counter[str] = Counter()
        self.first_token_actual_s: list[float] = []
        self.metrics = _Metrics(config.dp_size, config.model)
        self.app = web.Application(client_max_size=64 << 20)
        self.app.add_routes(
            [
                web.post("/generate", self.generate),
                web.put("/generate", self.generate),
                web.get("/health", self.health),
                web.get("/health_generate", self.health),
                web.get("/metrics", self.prom),
                web.get("/v1/models", self.models),
                web.get("/model_info", self.model_info),
                web.get("/double/stats", self.stats),
                web.post("/flush_cache", self.flush_cache),
            ]
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def flush_cache(self, request: web.Request) -> web.Response:
        """SGLang's answer once its caches are empty; the double keeps none."""
        self.flushes += 1
        return web.Response(status=200, text="Cache flushed.\n")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.config.model, "object": "model"}]}
        )

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.config.model, "tokenizer_path": None})

    async def prom(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "requests": self.arrivals,
                "flushes": self.flushes,
                "faults": dict(self.faults),
                "first_token_actual_s": self.first_token_actual_s,
                "config": asdict(self.config),
            }
        )

    async def generate(self, request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        loop_t0 = asyncio.get_running_loop().time()
        self.arrivals += 1
        k = self.arrivals
        cfg = self.config
        fault = cfg.fault_for(k)
        if fault:
            self.faults[fault] += 1
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        if fault == "http_error":
            return web.json_response(
                {"error": {"message": "injected by the protocol test double"}},
                status=cfg.http_error_status,
            )
        prompt = body.get("input_ids")
        if prompt is None and isinstance(body.get("text"), str):
            prompt = body["text"].split()
        if not isinstance(prompt, list):
            return web.json_response(
                {"error": {"message": "input_ids (a list) or text is required"}}, status=400
            )
        params = body.get("sampling_params") or {}
        n_out = int(params.get("max_new_tokens", 16))
        stream = bool(body.get("stream", False))
        rid = str(body.get("rid") or f"double-{k}")
        rank = k % cfg.dp_size
        self.metrics.admit(k, rank, len(prompt) + n_out)
        itl = cfg.itl_s * (cfg.slow_factor if fault == "slow" else 1.0)
        try:
            if not stream:
                await asyncio.sleep(cfg.first_token_delay_s + itl * max(0, n_out - 1))
                return web.json_response(self._event(rid, k, rank, len(prompt), n_out, n_out, True))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            # Sleep to absolute deadlines from arrival so the double's own timing does not drift.
            for i in range(1, n_out + 1):
                deadline = loop_t0 + cfg.first_token_delay_s + itl * (i - 1)
                delay = deadline - asyncio.get_running_loop().time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if fault == "disconnect" and i > cfg.disconnect_after_tokens:
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if fault == "malformed" and i == 2:
                    await resp.write(b'data: {"output_ids": [1, 2, \n\n')
                event = self._event(rid, k, rank, len(prompt), i, n_out, i == n_out)
                await resp.write(
                    b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
                )
                if i == 1:
                    self.first_token_actual_s.append(time.perf_counter() - t_recv)
                self.metrics.step(rank)
            if fault == "server_error":
                await resp.write(
                    b'data: {"error":{"message":"injected in-stream error","code":400}}\n\n'
                )
            await resp.write(b"data: [DONE]\n\n")
            with contextlib.suppress(ConnectionResetError):
                await resp.write_eof()
            return resp
        finally:
            self.metrics.release(rank, len(prompt) + n_out)

    def _event(
        self, rid: str, k: int, rank: int, n_in: int, n_done: int, n_out: int, last: bool
    ) -> dict:
        ids = [(k * 31 + j) % 1000 + 3 for j in range(n_done)]
        ev: dict = {
            "output_ids": ids,
            "meta_info": {
                "id": rid,
                "finish_reason": {"type": "length", "length": n_out} if last else None,
                "prompt_tokens": n_in,
                "completion_tokens": n_done,
                "cached_tokens": 0,
                "dp_rank": rank,
            },
        }
        if self.config.emit_text:
            ev["text"] = " ".join(f"w{i}" for i in ids)
        return ev


class DoubleThread:
    """Run a :class:`ProtocolDouble` on its own event loop in a background thread (a context manager)."""

    def __init__(
        self, config: DoubleConfig = DoubleConfig(), host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.double = ProtocolDouble(config)
        self.host, self.port = host, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="protocol-double", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> DoubleThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.double.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    for f in fields(DoubleConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool",):
            p.add_argument(
                flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default
            )
        else:
            kind = {"float": float, "int": int, "str": str}[str(f.type)]
            p.add_argument(flag, type=kind, default=f.default)
    args = vars(p.parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    double = ProtocolDouble(DoubleConfig(**args))
    try:
        import uvloop  # the double should not be the bottleneck when it is available

        uvloop.install()
    except ImportError:
        pass
    web.run_app(double.app, host=host, port=port, access_log=None, print=None, backlog=4096)


if __name__ == "__main__":
    main()
