"""Server command building against the real `sglang.launch_server --help` of installed releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import release_run

from dpbench.core.paths import cache_dir
from dpbench.envs.venv import env_path
from dpbench.server.config import DelayerConfig, ServerConfig, ServerConfigError, build_args
from dpbench.sglang_compat.server import (
    FlagInfo,
    MissingServerFlag,
    ServerFlags,
    fields_from_source,
    parse_help,
    server_flags,
)

RELEASES = ("0.5.23", "0.5.16")


def _release_python(version: str):
    python = env_path(version) / "bin" / "python"
    if not (env_path(version) / "dpbench-env.json").is_file() or not python.exists():
        pytest.skip(f"SGLang {version} environment not built (dpbench env create {version})")
    return python


@pytest.fixture(scope="module", params=RELEASES)
def release(request):
    python = _release_python(request.param)
    return (
        request.param,
        python,
        server_flags(python, cache_dir=cache_dir() / "sglang-help"),
    )  # cached per install after the first run


def _configs():
    yield ServerConfig(
        model_path="/m",
        load_format="dummy",
        tp_size=8,
        dp_size=8,
        delayer=DelayerConfig(enabled=True, max_delay_passes=30, token_usage_low_watermark=0.8),
        max_total_tokens=267333,
        chunked_prefill_size=8192,
        attention_backend="triton",
        mem_fraction_static=0.85,
        max_running_requests=256,
        kv_cache_dtype="fp8_e4m3",
        port=31000,
    )
    yield ServerConfig(model_path="/m", tp_size=8, dp_size=8, delayer=DelayerConfig(enabled=False))
    yield ServerConfig(
        model_path="/m",
        load_format="dummy",
        tp_size=16,
        dp_size=16,
        nnodes=2,
        node_rank=1,
        dist_init_addr="10.0.0.1:5000",
        delayer=DelayerConfig(enabled=True),
        host="0.0.0.0",
    )


def _emitted_flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("--")]


@pytest.mark.sglang
def test_every_emitted_flag_exists_in_the_release(release):
    version, _python, flags = release
    assert flags.version == version
    for cfg in _configs():
        args = build_args(cfg, flags)
        for flag in _emitted_flags(args):
            assert flags.has(flag), f"{flag} not accepted by SGLang {version} ({flags.source})"
        assert args[args.index("--tp-size") + 1] == str(cfg.tp_size)
        assert ("--enable-prefill-delayer" in args) == cfg.delayer.enabled


@pytest.mark.sglang
def test_dp_attention_spelling_follows_the_release(release):
    _version, _python, flags = release
    args = build_args(ServerConfig(model_path="/m", tp_size=8, dp_size=4), flags)
    if flags.has("--attn-dp-size"):  # 0.5.23: --enable-dp-attention is deprecated in its favour
        assert args[args.index("--attn-dp-size") + 1] == "4"
        assert "--enable-dp-attention" not in args
    else:
        assert args[args.index("--dp-size") + 1] == "4" and "--enable-dp-attention" in args


@pytest.mark.sglang
def test_sglangs_own_parser_accepts_the_command():
    """0.5.23's prepare_server_args parses what the launcher builds into the intended ServerArgs."""
    python = _release_python("0.5.23")
    flags = server_flags(python, cache_dir=cache_dir() / "sglang-help")
    cfg = next(iter(_configs()))
    args = build_args(cfg, flags)
    probe = (
        "import json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "a = prepare_server_args(json.loads(sys.argv[1]))\n"
        "print(json.dumps({k: getattr(a, k) for k in ('tp_size', 'attn_dp_size', 'enable_prefill_delayer',"
        " 'prefill_delayer_max_delay_passes', 'max_total_tokens', 'load_format', 'skip_tokenizer_init',"
        " 'enable_metrics', 'attention_backend', 'chunked_prefill_size', 'kv_cache_dtype', 'port')}))\n"
    )
    proc = release_run([str(python), "-c", probe, json.dumps(args)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert parsed == {
        "tp_size": 8,
        "attn_dp_size": 8,
        "enable_prefill_delayer": True,
        "prefill_delayer_max_delay_passes": 30,
        "max_total_tokens": 267333,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "enable_metrics": True,
        "attention_backend": "triton",
        "chunked_prefill_size": 8192,
        "kv_cache_dtype": "fp8_e4m3",
        "port": 31000,
    }


@pytest.mark.sglang
def test_a_missing_flag_or_choice_is_a_clear_error(release):
    version, _python, flags = release
    cfg = ServerConfig(
        model_path="/m", tp_size=2, dp_size=2, extra_args=("--no-such-flag-xyz", "1")
    )
    with pytest.raises(
        MissingServerFlag, match=rf"SGLang {version}'s launch_server has no --no-such-flag-xyz"
    ):
        build_args(cfg, flags)
    if flags.flags["--attention-backend"].choices is not None:  # only --help lists choices
        with pytest.raises(
            MissingServerFlag, match=r"does not accept --attention-backend 'warp-drive'; allowed: "
        ):
            build_args(ServerConfig(model_path="/m", attention_backend="warp-drive"), flags)
    # A release without the delayer flags (simulated by removing them) is refused, naming the flag.
    pruned = ServerFlags(
        flags.version,
        flags.source,
        {k: v for k, v in flags.flags.items() if "prefill-delayer" not in k},
    )
    with pytest.raises(MissingServerFlag, match="no --enable-prefill-delayer flag"):
        build_args(
            ServerConfig(
                model_path="/m", tp_size=2, dp_size=2, delayer=DelayerConfig(enabled=True)
            ),
            pruned,
        )


@pytest.mark.sglang
def test_help_is_cached_per_install(release):
    _version, python, flags = release
    again = server_flags(
        python, cache_dir=cache_dir() / "sglang-help"
    )  # second call reads .cache/sglang-help, no SGLang import
    assert set(again.flags) == set(flags.flags) and again.source == flags.source


def test_parse_help_reads_aliases_choices_and_deprecation():
    text = (
        "usage: x [-h] --model-path MODEL_PATH\n\noptions:\n"
        "  -h, --help            show this help message and exit\n"
        "  --model-path MODEL_PATH, --model MODEL_PATH\n"
        "                        The path of the model weights.\n"
        "  --load-format {auto,dummy}\n                        The format.\n"
        "  --enable-dp-attention\n                        Deprecated. Use --attn-dp-size <dp-size> instead.\n"
        "  --enable-tf32-matmul, --no-enable-tf32-matmul\n                        Toggle.\n"
    )
    f = parse_help(text, version="t")
    assert f.flags["--model"].name == "--model-path" and f.flags["--model"].takes_value
    assert f.flags["--load-format"].choices == ("auto", "dummy")
    assert (
        f.is_deprecated("--enable-dp-attention")
        and not f.flags["--enable-dp-attention"].takes_value
    )
    assert f.has("--no-enable-tf32-matmul")


def test_config_errors_name_the_field():
    with pytest.raises(ServerConfigError, match=r"dp_size \(3\) must divide tp_size \(8\)"):
        ServerConfig(model_path="/m", tp_size=8, dp_size=3)
    with pytest.raises(ServerConfigError, match="needs dp_size ≥ 2"):
        ServerConfig(model_path="/m", tp_size=1, dp_size=1, delayer=DelayerConfig(enabled=True))
    with pytest.raises(ServerConfigError, match="needs dist_init_addr"):
        ServerConfig(model_path="/m", tp_size=16, dp_size=16, nnodes=2)
    with pytest.raises(ServerConfigError, match="delayer off"):
        DelayerConfig(enabled=False, max_delay_passes=5)


def test_legacy_dp_spelling_without_attn_dp_size():
    flags = ServerFlags(
        "old",
        "test",
        {
            n: FlagInfo(
                n,
                takes_value=n
                not in ("--enable-dp-attention", "--enable-metrics", "--skip-tokenizer-init"),
            )
            for n in (
                "--model-path",
                "--tp-size",
                "--dp-size",
                "--enable-dp-attention",
                "--enable-metrics",
                "--skip-tokenizer-init",
                "--host",
                "--port",
            )
        },
    )
    args = build_args(ServerConfig(model_path="/m", tp_size=4, dp_size=4), flags)
    assert args[args.index("--dp-size") + 1] == "4" and "--enable-dp-attention" in args


@pytest.mark.sglang
def test_source_fallback_knows_every_flag_the_launcher_emits(release):
    """When --help cannot run, the flags read from server_args.py's source still cover the launcher."""
    version, python, flags = release
    from dpbench.sglang_compat.server import flags_from_fields, install_key

    root = install_key(python).root
    fallback = flags_from_fields(fields_from_source(Path(root)), version=version, why="test")
    for cfg in _configs():
        for flag in _emitted_flags(build_args(cfg, flags)):
            assert fallback.has(flag), f"{flag} missing from the source fallback of {version}"
