"""Workloads: YAML specs, deterministic request traces and the KV-capacity planner.

Imports only numpy, pyyaml, pydantic, typer and rich, so it also runs inside SGLang release
environments. See ``spec`` (schema), ``trace`` (JSONL traces), ``planner`` (``--max-total-tokens``).
"""
