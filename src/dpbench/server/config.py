"""The server run config and the `sglang.launch_server` command built from it, flag by flag checked.

A :class:`ServerConfig` says what server to start (model, parallelism, prefill delayer,
KV budget, …) in SGLang-independent terms; :func:`build_command` turns it into the
command line for one SGLang install, checking every emitted flag (and every choice)
against that install's ``launch_server --help`` (:mod:`dpbench.sglang_compat.server`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from dpbench.sglang_compat.server import ServerFlags, dp_attention_args


class ServerConfigError(ValueError):
    """A run config value is out of range or inconsistent."""


@dataclass(frozen=True, kw_only=True)
class DelayerConfig:
    """PrefillDelayer on/off and its parameters; None leaves SGLang's default."""

    enabled: bool = field(metadata={"help": "pass --enable-prefill-delayer"})
    max_delay_passes: int | None = field(
        default=None, metadata={"help": "--prefill-delayer-max-delay-passes"}
    )
    token_usage_low_watermark: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-token-usage-low-watermark"}
    )
    queue_min_ratio: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-queue-min-ratio"}
    )
    max_delay_ms: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-max-delay-ms"}
    )

    def __post_init__(self) -> None:
        if self.max_delay_passes is not None and self.max_delay_passes < 1:
            raise ServerConfigError(
                f"delayer max_delay_passes must be ≥ 1, got {self.max_delay_passes}"
            )
        if (
            self.token_usage_low_watermark is not None
            and not 0 <= self.token_usage_low_watermark <= 1
        ):
            raise ServerConfigError(
                f"delayer token_usage_low_watermark must be in [0, 1], got {self.token_usage_low_watermark}"
            )
        if not self.enabled and any(
            v is not None
            for v in (
                self.max_delay_passes,
                self.token_usage_low_watermark,
                self.queue_min_ratio,
                self.max_delay_ms,
            )
        ):
            raise ServerConfigError(
                "delayer parameters were given with the delayer off; enable it or drop them"
            )


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """What server to start, independent of the SGLang version that will run it."""

    model_path: str = field(
        metadata={"help": "checkpoint dir, or a config-only dir with load_format='dummy'"}
    )
    load_format: str | None = field(default=None, metadata={"help": "'dummy' for random weights"})
    tp_size: int = field(
        default=1, metadata={"help": "tensor-parallel size (GPUs per server, all nodes)"}
    )
    dp_size: int = field(
        default=1, metadata={"help": "attention-DP groups; >1 enables DP attention"}
    )
    delayer: DelayerConfig = field(default_factory=lambda: DelayerConfig(enabled=False))
    max_total_tokens: int | None = field(
        default=None, metadata={"help": "KV pool tokens (per DP rank)"}
    )
    kv_cache_dtype: str | None = field(
        default=None, metadata={"help": "--kv-cache-dtype (the KV plan's dtype)"}
    )
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    attention_backend: str | None = None
    enable_metrics: bool = True
    skip_tokenizer_init: bool = True
    trust_remote_code: bool = False
    host: str = "127.0.0.1"
    port: int = 30000
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = field(
        default=None, metadata={"help": "host:port of node 0 (multi-node)"}
    )
    extra_args: tuple[str, ...] = field(
        default=(), metadata={"help": "more launch_server flags, checked too"}
    )

    def __post_init__(self) -> None:
        for name in ("tp_size", "dp_size", "nnodes"):
            if getattr(self, name) < 1:
                raise ServerConfigError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.dp_size > 1 and self.tp_size % self.dp_size:
            raise ServerConfigError(
                f"dp_size ({self.dp_size}) must divide tp_size ({self.tp_size}): DP attention splits the TP group"
            )
        if self.tp_size % self.nnodes:
            raise ServerConfigError(
                f"tp_size ({self.tp_size}) must be a multiple of nnodes ({self.nnodes})"
            )
        if not 0 <= self.node_rank < self.nnodes:
            raise ServerConfigError(
                f"node_rank must be in [0, {self.nnodes}), got {self.node_rank}"
            )
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ServerConfigError(
                "a multi-node run (nnodes > 1) needs dist_init_addr='<node-0 host>:<port>'"
            )
        if self.delayer.enabled and self.dp_size < 2:
            raise ServerConfigError(
                "the prefill delayer negotiates across DP ranks; it needs dp_size ≥ 2"
            )
        if self.max_total_tokens is not None and self.max_total_tokens < 1:
            raise ServerConfigError(f"max_total_tokens must be ≥ 1, got {self.max_total_tokens}")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ServerConfigError(
                f"mem_fraction_static must be in (0, 1), got {self.mem_fraction_static}"
            )
        if not 0 < self.port < 65536:
            raise ServerConfigError(f"port must be in 1..65535, got {self.port}")

    @property
    def gpus_per_node(self) -> int:
        return self.tp_size // self.nnodes


def build_args(cfg: ServerConfig, flags: ServerFlags) -> list[str]:
    """The `launch_server` arguments for ``cfg``; every flag and choice checked against ``flags``."""
    out: list[str] = []

    def add(flag: str, value: object = None) -> None:
        text = None if value is None else str(value)
        info = flags.check(flag, text)
        if text is None and info.takes_value:
            raise AssertionError(f"{flag} takes a value")  # a bug in this module, not in the config
        out.append(flag)
        if text is not None:
            out.append(text)

    add("--model-path", cfg.model_path)
    if cfg.load_format:
        add("--load-format", cfg.load_format)
    if cfg.trust_remote_code:
        add("--trust-remote-code")
    add("--tp-size", cfg.tp_size)
    dp_args = dp_attention_args(flags, tp_size=cfg.tp_size, dp_size=cfg.dp_size)
    for tok in dp_args:
        if tok.startswith("--"):
            flags.check(tok)
    out += dp_args
    if cfg.delayer.enabled:
        add("--enable-prefill-delayer")
        for flag, value in (
            ("--prefill-delayer-max-delay-passes", cfg.delayer.max_delay_passes),
            ("--prefill-delayer-token-usage-low-watermark", cfg.delayer.token_usage_low_watermark),
            ("--prefill-delayer-queue-min-ratio", cfg.delayer.queue_min_ratio),
            ("--prefill-delayer-max-delay-ms", cfg.delayer.max_delay_ms),
        ):
            if value is not None:
                add(flag, value)
    for flag, value in (
        ("--max-total-tokens", cfg.max_total_tokens),
        ("--kv-cache-dtype", cfg.kv_cache_dtype),
        ("--mem-fraction-static", cfg.mem_fraction_static),
        ("--chunked-prefill-size", cfg.chunked_prefill_size),
        ("--max-running-requests", cfg.max_running_requests),
        ("--attention-backend", cfg.attention_backend),
    ):
        if value is not None:
            add(flag, value)
    if cfg.enable_metrics:
        add("--enable-metrics")
    if cfg.skip_tokenizer_init:
        add("--skip-tokenizer-init")
    if cfg.nnodes > 1:
        add("--nnodes", cfg.nnodes)
        add("--node-rank", cfg.node_rank)
        add("--dist-init-addr", cfg.dist_init_addr)
    add("--host", cfg.host)
    add("--port", cfg.port)
    for tok in cfg.extra_args:
        if tok.startswith("--"):
            flags.check(tok.split("=", 1)[0])
    out += list(cfg.extra_args)
    return out


def build_command(
    cfg: ServerConfig, flags: ServerFlags, *, python: str | Path | None = None
) -> list[str]:
    """``[python, -m, sglang.launch_server, *build_args(cfg, flags)]``."""
    return [str(python or sys.executable), "-m", "sglang.launch_server", *build_args(cfg, flags)]
