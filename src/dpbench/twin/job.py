"""A twin run handed to another interpreter: one JSON job file built from the schema, and the arms
(``VERSION[:MODE,…]``) that sweeps, fidelity and the divergence finder name settings by.

The job file is ``{"spec", "inputs", "config"}`` with :class:`TwinInputs` and
:class:`TwinConfig` as :func:`dpbench.core.schema.to_dict` writes them; ``python -m
dpbench.twin.run JOB -o OUT`` reads it back with :func:`read_job` (an unknown key fails).
Nothing here imports SGLang.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpbench.core.schema import SchemaError, from_dict, parse_overrides, replace, to_dict
from dpbench.twin.config import TwinConfig, TwinConfigError, TwinInputs


def job_dict(spec: str, config: TwinConfig, inputs: TwinInputs | None = None) -> dict[str, Any]:
    return {"spec": str(spec), "inputs": to_dict(inputs or TwinInputs()), "config": to_dict(config)}


def write_job(
    path: str | Path, spec: str, config: TwinConfig, inputs: TwinInputs | None = None
) -> Path:
    from dpbench.core.atomic import write_json

    write_json(Path(path), job_dict(spec, config, inputs))
    return Path(path)


def read_job(path: str | Path) -> tuple[str, TwinConfig, TwinInputs]:
    """``(spec, config, inputs)`` of a job file; a bad file or value names what was wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TwinConfigError(f"twin job {path}: cannot read it as JSON ({exc})") from exc
    if not isinstance(data, dict) or set(data) != {"spec", "inputs", "config"}:
        raise TwinConfigError(
            f"twin job {path}: want an object with exactly spec, inputs and config"
        )
    try:
        return (
            str(data["spec"]),
            from_dict(TwinConfig, data["config"], where=f"{path}: config"),
            from_dict(TwinInputs, data["inputs"], where=f"{path}: inputs"),
        )
    except (SchemaError, TypeError) as exc:
        raise TwinConfigError(str(exc)) from None


# -- arms ------------------------------------------------------------------------------------
# An arm is VERSION[:MODE[,MODE…]]; a mode is a named setting below or any TwinConfig option as
# NAME=VALUE (e.g. 0.5.16:finished_filter_rule=every_pass), so a fidelity fix can be measured
# on and off with the same seeds and a new option is an arm mode without further code.
ARM_MODES: dict[str, dict[str, Any]] = {
    "ablation": {"hide_delayer_from_chunked_req": True},
    "no-radix": {"radix_cache": False},
    "no-overlap": {"overlap_schedule": False},
    "no-chunk-reset": {"chunk_merge_resets_batch_is_full": False},
    "physical": {"cost_topology": "physical"},
    "fit": {"cost_profile": "published-fit"},
}
# short names for options, as NAME=VALUE
ARM_KEYS: dict[str, str] = {
    "conservativeness": "schedule_conservativeness",
    "batch-is-full": "batch_is_full_rule",
    "finished-filter": "finished_filter_rule",
}


def arm_overrides(arm: str) -> tuple[str, dict[str, Any]]:
    """``"0.5.17:ablation,batch-is-full=always"`` → ``("0.5.17", {option: value})``; a bad
    mode fails naming the modes and options there are."""
    version, _, modes = arm.partition(":")
    if not version:
        raise ValueError(f"arm {arm!r}: no release before ':'")
    out: dict[str, Any] = {}
    for mode in filter(None, (m.strip() for m in modes.split(","))):
        name, eq, value = mode.partition("=")
        if not eq and name in ARM_MODES:
            out.update(ARM_MODES[name])
            continue
        try:
            out.update(
                parse_overrides(TwinConfig, [f"{ARM_KEYS.get(name, name)}={value}" if eq else mode])
            )
        except SchemaError as exc:
            raise ValueError(
                f"arm {arm!r}: mode {mode!r}: {exc}. Named modes: {', '.join(ARM_MODES)}; "
                f"short names: {', '.join(f'{k}=X' for k in ARM_KEYS)}"
            ) from None
    return version, out


def apply_modes(config: TwinConfig, modes: dict[str, Any]) -> TwinConfig:
    try:
        return replace(config, **modes)
    except SchemaError as exc:
        raise TwinConfigError(str(exc)) from None
