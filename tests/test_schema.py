"""One definition per option: every CLI option and job-file key of a tier comes from its schema.

The checks walk the schema itself (``dpbench.core.schema.options``), never a list kept beside it:
an option added to ``TwinConfig``/``TwinInputs``/``RunOptions`` is covered here without
touching this file, and fails here if any path drops or renames it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dpbench.core.schema import Option, SchemaError, build, from_dict, options, to_dict
from dpbench.twin.config import TwinConfig, TwinConfigError, TwinInputs, make_config


def _candidates(opt: Option) -> list[tuple[Any, str]]:
    """Values other than the default, as (value, CLI text), most likely valid first."""
    d = opt.default
    if opt.base is bool:
        return [(not d, "")]
    if opt.choices is not None:
        return [(c, c) for c in opt.choices if c != d]
    if opt.base is int:
        return [(v, str(v)) for v in ([2 * d, d + 1, d - 1] if d is not None else [8, 2, 16, 100])]
    if opt.base is float:
        return [(v, repr(v)) for v in ([d / 2, 2 * d] if d else [0.5, 0.002, 2.0])]
    if opt.base is str:
        return [("some/run.json", "some/run.json")]
    raise AssertionError(f"{opt.name}: no candidate values for {opt.base}")


def _valid_change(cls: type, opt: Option, make: Any) -> tuple[Any, Any, str]:
    for value, text in _candidates(opt):
        if value == opt.default:
            continue
        try:
            return make(**{opt.name: value}), value, text
        except (SchemaError, TwinConfigError, ValueError):
            continue
    raise AssertionError(
        f"{cls.__name__}.{opt.name}: no valid non-default value among the candidates"
    )


def _cli_args(opt: Option, value: Any, text: str) -> list[str]:
    decl = opt.decls[0]
    if opt.base is bool:
        on, _, off = decl.partition("/")
        return [on if value else off]
    return [decl, text]


def _twin_opts(cls: type) -> list[Option]:
    return [o for o in options(cls) if o.cli]


@pytest.mark.parametrize(
    "opt", _twin_opts(TwinConfig) + _twin_opts(TwinInputs), ids=lambda o: o.name
)
def test_every_twin_option_reaches_the_job_file_through_the_cli(opt, monkeypatch, tmp_path):
    """``dpbench twin run --X v`` writes a job whose config (or inputs) differs from the default in
    exactly X, and the job file reads back to the same schema instance."""
    from typer.testing import CliRunner

    from dpbench.twin import cli
    from dpbench.twin.job import read_job

    cls = TwinConfig if opt in options(TwinConfig) else TwinInputs
    want, value, text = _valid_change(cls, opt, make_config if cls is TwinConfig else TwinInputs)
    if opt.name == "calibration":
        cal = tmp_path / "cal.json"
        cal.write_text("{}")
        text = str(cal)
        want = TwinInputs(calibration=str(cal.resolve()))
    if opt.name == "replay_arrivals":
        want = make_config(replay_arrivals=str((tmp_path / text).resolve()))
    seen: dict[str, Any] = {}

    def capture(version, args, deadline_s, on_event):
        seen["job"] = read_job(args[0])
        seen["raw"] = json.loads(Path(args[0]).read_text())
        raise RuntimeError("captured")

    monkeypatch.setattr(cli, "_installed_sglang", lambda: None)
    monkeypatch.setattr(cli, "_run_in_release_env", capture)
    monkeypatch.chdir(tmp_path)
    args = ["run", "long-prompt-burst-small", "--sglang", "0.5.16", *_cli_args(opt, value, text)]
    res = CliRunner().invoke(cli.app, args)
    assert "job" in seen, res.output
    _, config, inputs = seen["job"]
    got = config if cls is TwinConfig else inputs
    base = make_config(record_timeline=False) if cls is TwinConfig else TwinInputs()
    if cls is TwinConfig:
        want = build(TwinConfig, {**_flat(want), "record_timeline": False})
    assert got == want and got != base
    assert seen["raw"]["config"] == to_dict(config)  # the JSON carries the schema as it is


def _flat(obj: Any) -> dict[str, Any]:
    from dpbench.core.schema import flat_values

    return flat_values(obj)


@pytest.mark.parametrize("opt", options(TwinConfig), ids=lambda o: o.name)
def test_every_twin_option_is_an_arm_mode(opt, tmp_path):
    """A sweep arm ``VERSION:NAME=VALUE`` sets that option in the arm process's job file."""
    from dpbench.twin.job import apply_modes, arm_overrides
    from dpbench.twin.sweep import arm_base_config, read_sweep_job, write_sweep_job

    base = arm_base_config()
    for value, text in _candidates(opt):
        if opt.base is bool:
            text = str(value).lower()
        try:
            version, modes = arm_overrides(f"0.5.16:{opt.name}={text}")
            config = apply_modes(base, modes)
        except (TwinConfigError, ValueError):
            continue
        break
    else:
        pytest.fail(f"{opt.name}: no valid arm value")
    assert version == "0.5.16" and modes == {opt.name: value}
    job = read_sweep_job(
        write_sweep_job(
            tmp_path / "job.json", spec="s", seeds=[0], dps=[2], chunks=[8192], requests=None,
            base=config,
        )
    )  # fmt: skip
    assert job["config"] == config


def test_a_job_file_with_an_unknown_key_fails_naming_it(tmp_path):
    from dpbench.twin.job import job_dict, read_job

    data = job_dict("long-prompt-burst", make_config())
    data["config"]["scheduler"]["chunked_prefil_size"] = 4096
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TwinConfigError, match=r"unknown key.*'chunked_prefil_size'"):
        read_job(path)


def test_schema_rejects_unknown_names_and_types():
    with pytest.raises(SchemaError, match="has no option 'dpsize'"):
        build(TwinConfig, {"dpsize": 2})
    with pytest.raises(SchemaError, match="want a JSON object"):
        from_dict(TwinConfig, [1, 2])
    assert from_dict(TwinConfig, to_dict(make_config(dp_size=8))) == make_config(dp_size=8)


# options that only take another value beside another one (the schema's cross-checks)
PREREQUISITES = {
    "node_rank": {"nnodes": (2, ["--nnodes", "2"]),
                  "dist_init_addr": ("node0:5000", ["--dist-init-addr", "node0:5000"])},
    "serial_forward": {"simulate_forward": (True, ["--simulate-forward"])},
    "clock": {"simulate_forward": (True, ["--simulate-forward"])},
    "pass_charge_ms": {"simulate_forward": (True, ["--simulate-forward"]),
                       "clock": ("virtual", ["--clock", "virtual"])},
    "pass_charge": {"simulate_forward": (True, ["--simulate-forward"]),
                    "clock": ("virtual", ["--clock", "virtual"])},
}  # fmt: skip


def _server_opts() -> list[tuple[str, type, Option]]:
    from dpbench.server.fidelity import Inputs
    from dpbench.server.run import RunOptions

    out = [("run", RunOptions, o) for o in options(RunOptions) if o.cli and not o.argument]
    out += [("fidelity", Inputs, o) for o in options(Inputs) if o.cli and not o.argument]
    return out


@pytest.mark.parametrize(
    "command, cls, opt", _server_opts(), ids=lambda x: getattr(x, "name", str(x))
)
def test_every_server_option_reaches_its_schema_through_the_cli(command, cls, opt, monkeypatch):
    """``dpbench server run/fidelity --X v`` hands the command a RunOptions/Inputs that differs
    from the default in exactly X (the schema builds both; nothing lists the options)."""
    from typer.testing import CliRunner

    from dpbench.core.schema import replace
    from dpbench.server import cli
    from dpbench.server import fidelity as fid
    from dpbench.server.fidelity import Inputs

    spec = "long-prompt-burst-small"
    base = cls(spec=spec)
    extra: list[str] = []
    for name, (val, args) in PREREQUISITES.get(opt.name, {}).items():
        if cls is Inputs and name not in {f.name for f in dataclasses.fields(Inputs)}:
            continue  # Inputs runs the simulated forward always
        base = replace(base, **{name: val})
        extra += args
    if opt.name == "python":  # --python and --sglang exclude each other; neither is the default
        want, value, text = (
            replace(base, python="/usr/bin/python3"),
            "/usr/bin/python3",
            "/usr/bin/python3",
        )
    elif opt.base is tuple:
        want, value, text = replace(base, extra_args=("--foo",)), ("--foo",), "--foo"
    else:
        want, value, text = _valid_change(cls, opt, lambda **kw: replace(base, **kw))
    seen = {}

    def capture(got, **_):
        seen["got"] = got
        raise RuntimeError("captured")

    if command == "run":
        monkeypatch.setattr(cli, "prepare", capture)
    else:
        monkeypatch.setattr(fid, "run", capture)
    res = CliRunner().invoke(cli.app, [command, spec, *extra, *_cli_args(opt, value, text)])
    assert "got" in seen, res.output
    got = seen["got"]
    if command == "fidelity":
        want = replace(want, release="0.5.23")  # --sglang's default
    assert got == want and got != (base if command == "run" else replace(base, release="0.5.23"))


def test_an_input_error_names_fields_as_each_caller_spells_them():
    import typing

    from dpbench.core.schema import InputError

    class Bad(InputError):
        SPELLING: typing.ClassVar = {"rate": "spec.rate", "window": "seed"}

    exc = Bad("{rate} is 0 in {window} {1}; allowed: {rate} > 0 ({unknown} stays)")
    assert str(exc) == "spec.rate is 0 in seed {1}; allowed: spec.rate > 0 ({unknown} stays)"
    assert exc.spelled({"rate": "--rate", "window": "--window"}) == (
        "--rate is 0 in --window {1}; allowed: --rate > 0 ({unknown} stays)"
    )


def test_cli_names_are_the_flags_and_arguments_typed():
    from dpbench.core.schema import cli_names
    from dpbench.workload.importers.source import TraceSource

    names = cli_names(TraceSource)
    assert names["format"] == "FORMAT" and names["path"] == "PATH"
    assert names["rate_scale"] == "--rate-scale" and names["window_start_s"] == "--window-start-s"
    assert cli_names(TwinConfig)["enable_prefill_delayer"] == "--delayer"  # not --delayer/--no-…


def test_a_field_error_from_the_cli_names_the_flag():
    from typer.testing import CliRunner

    from dpbench.workload.cli import app

    res = CliRunner().invoke(app, ["import", "mooncake", "x.jsonl", "-o", "o", "--window-s", "-1"])
    assert res.exit_code == 2
    assert res.output.splitlines()[-1] == (
        "Error: Invalid value: --window-s is -1.0; allowed: a number > 0, or unset"
    )


def test_schema_options_show_their_choices_and_metavars():
    from dpbench.core.cli_help import choices
    from dpbench.core.schema import _typer_param

    dispatch = next(o for o in options(TwinConfig) if o.name == "dispatch")
    info = _typer_param(dispatch).annotation.__metadata__[0]
    assert info.metavar == choices(dispatch.choices) == "{round_robin|shortest_queue|cache_aware}"
    assert "one of" not in info.help  # the metavar lists them
    arrivals = next(o for o in options(TwinConfig) if o.name == "replay_arrivals")
    assert _typer_param(arrivals).annotation.__metadata__[0].metavar == "FILE"
