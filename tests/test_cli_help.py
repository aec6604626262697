"""`dpbench --help` and every group's and command's help at 80 columns: summaries that fit,
values named by what they are (never a Python type or module path), and a sub-command whose
module fails to import failing loudly; the shared option declarations and arm check."""

from __future__ import annotations

import re
import typing

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from dpbench import cli
from dpbench.core.cli_options import ArmsOpt, OutputOpt, SeedsOpt, TimeoutOpt

# what typer writes for a value when nobody named it, or Python showing through
PYTHON_IN_HELP = [
    (r"<(?:list\[)?(?:str|int|float|bool|path|file|dir|text|datetime|uuid)\]?>", "a Python type"),
    (r"<(?:int|float) range>", "a Python range type"),
    (r"\ba field of\b", "a schema's field"),
    (r"\bdpbench\.[a-z_]+\.[a-z_.]+", "a module path"),
    (r"``", "reStructuredText markup"),
    (r"\{[a-z_]+\}(?! *\|)", "a Python parameter name in braces"),
]
SUMMARY_MAX = 60


def _walk(command, path=()):
    yield path, command
    if isinstance(command, TyperGroup):
        for name in command.list_commands(None):
            yield from _walk(command.get_command(None, name), (*path, name))


def _help(args: list[str]) -> str:
    # click formats a real 80-column terminal at 78 (its max_width is the terminal's less 2):
    # `COLUMNS=80 dpbench --help` cut `bench`'s summary while a width of 80 here did not
    result = CliRunner().invoke(
        cli.app, [*args, "--help"], env={"COLUMNS": "80"}, terminal_width=78
    )
    assert result.exit_code == 0, result.output
    return result.output


def _all_commands():
    return list(_walk(typer.main.get_command(cli.app)))


def test_the_tree_holds_every_area_and_command():
    paths = {" ".join(p) for p, _ in _all_commands()}
    assert set(cli.COMMANDS) <= paths
    for expected in ("twin run", "twin sweep", "twin capacity", "workload import", "server run"):
        assert expected in paths
    assert len(paths) >= 36  # the root, 11 areas, 24 commands at the time of writing


def test_every_help_screen_reads_at_80_columns():
    problems = []
    for path, command in _all_commands():
        text = _help(list(path))
        where = "dpbench " + " ".join(path)
        for line in text.splitlines():
            if len(line) > 80:
                problems.append(f"{where}: a line over 80 columns: {line!r}")
            # "..." nowhere, usage lines included (click's own marks a repeated argument so)
            if "..." in line:
                problems.append(f"{where}: cut text: {line.strip()!r}")
            for pattern, what in PYTHON_IN_HELP:
                if re.search(pattern, line):
                    problems.append(f"{where}: {what}: {line.strip()!r}")
        summary = command.get_short_help_str(limit=10_000)
        first = " ".join((command.help or "").split("\n\n")[0].split())
        if not path:
            continue
        if len(summary) > SUMMARY_MAX:
            problems.append(f"{where}: summary of {len(summary)} characters: {summary!r}")
        if summary != first:
            problems.append(f"{where}: summary {summary!r} is not its first paragraph {first!r}")
    assert not problems, "\n".join(problems)


def test_the_root_lists_every_command_with_its_whole_summary():
    text = _help([])
    listed = text.split("Commands:")[1]
    for name in cli.COMMANDS:
        summary = cli.load(name).get_short_help_str(limit=10_000)
        assert re.search(rf"^  {re.escape(name)} +{re.escape(summary)}$", listed, re.M), name


def test_usage_names_arguments_and_choices():
    assert "Usage: dpbench compare [OPTIONS] COMMIT_A COMMIT_B" in _help(["compare"])
    text = _help(["workload", "import"])
    assert "Usage: dpbench workload import [OPTIONS] {mooncake|azure} PATH" in text
    assert "--overlong {drop|truncate}" in text
    assert "--window-start-s SECONDS" in text
    text = _help(["twin", "run"])
    assert "--dispatch {round_robin|shortest_queue|cache_aware}" in text
    assert "--idle-pass-s SECONDS" in text and "--dp N" in text
    assert "Usage: dpbench bench [OPTIONS] [VERSIONS]\n" in _help(["bench"])
    assert "Usage: dpbench twin [OPTIONS] COMMAND [ARGS]\n" in _help(["twin"])


def test_a_subcommand_whose_module_fails_to_import_fails_help_loudly(tmp_path, monkeypatch):
    (tmp_path / "dpbench_broken_area.py").write_text(
        "raise RuntimeError('boom: a dependency is missing')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "twin", ("dpbench_broken_area", "app"))
    runner = CliRunner()
    result = runner.invoke(cli.app, ["--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "Error: `dpbench twin` is unavailable: importing dpbench_broken_area failed with "
        "RuntimeError: boom: a dependency is missing "
        "(`python -c 'import dpbench_broken_area'` shows where)"
    )
    assert runner.invoke(cli.app, ["twin", "run", "--help"]).exit_code == 1
    # the other areas are loaded on their own and still work
    assert runner.invoke(cli.app, ["workload", "--help"]).exit_code == 0


def test_a_module_without_the_named_command_fails_loudly_too(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "bench", ("dpbench.mainjob.job", "no_such_command"))
    result = CliRunner().invoke(cli.app, ["--help"])
    assert result.exit_code == 1
    assert "`dpbench bench` is unavailable: importing dpbench.mainjob.job failed with " in (
        result.output
    )
    assert "AttributeError" in result.output


def test_twin_sweep_and_capacity_share_one_declaration_of_each_option():
    from dpbench.twin.capacity_cli import capacity
    from dpbench.twin.cli import sweep

    shared = {"sglang": ArmsOpt, "seeds": SeedsOpt, "timeout": TimeoutOpt, "output": OutputOpt}
    for fn in (sweep, capacity):
        hints = typing.get_type_hints(fn, include_extras=True)
        for name, alias in shared.items():
            # the very declaration object: a copy of it elsewhere would not compare equal
            assert hints[name] == alias, (fn.__name__, name)
    sweep_help, capacity_help = _help(["twin", "sweep"]), _help(["twin", "capacity"])
    for flag in ("--sglang ARM", "--seeds N", "--timeout SECONDS", "-o, --output FILE"):
        assert flag in sweep_help and flag in capacity_help
    assert "[default: 20]" in sweep_help and "[default: 3]" in capacity_help


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("sweep", ["--sglang", "0.5.16"], "give at least 2 arms (--sglang A --sglang B)"),
        ("sweep", ["--sglang", "0.5.16", "--sglang", "0.5.17:warp"], "0.5.17:warp"),
        ("capacity", ["--sglang", "0.5.16:warp"], "0.5.16:warp"),
    ],
)
def test_both_commands_check_their_arms_the_same_way(command, args, message):
    result = CliRunner().invoke(
        cli.app, ["twin", command, "long-prompt-burst", *args], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for --sglang: " in result.output
    assert message in " ".join(result.output.split())
