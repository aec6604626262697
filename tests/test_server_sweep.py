"""`dpbench server sweep`'s bad input: one line naming what is wrong, before any server starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dpbench.server import cli


@pytest.mark.parametrize(
    "args, says",
    [
        (["--sglang", "0.5.17"], "needs ≥ 2 arms"),
        (["--sglang", "0.5.17", "--sglang", "0.5.17"], "named twice"),
        (["--sglang", "0.5.16", "--sglang", "0.5.17:ablation"], "twin's modes do not apply"),
        (["--sglang", "0.5.16", "--sglang", "0.5.17", "--seeds", "1"], "need ≥ 2 seeds"),
        (["--sglang", "0.5.16", "--sglang", "0.5.17", "--requests", "0"], "must be ≥ 1"),
    ],
)
def test_a_sweep_refuses_what_it_cannot_pair(args, says, monkeypatch):
    started = []
    monkeypatch.setattr("dpbench.server.sweep_cli._runs", lambda *a: started.append(a))
    res = CliRunner().invoke(cli.app, ["sweep", "long-prompt-burst-small", *args])
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split()), res.output
    assert not started
