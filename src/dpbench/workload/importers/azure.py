"""Azure's LLM inference trace format (AzurePublicDataset: ``AzureLLMInferenceTrace_{conv,code}.csv``,
and the 2024 week-long traces of the same columns).

CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is wall-clock
``YYYY-MM-DD HH:MM:SS[.fffffff]`` (up to 7 fractional digits), in time order. No prefix or
session information: every prompt is its own. Upstream: github.com/Azure/AzurePublicDataset,
``data/`` (CC-BY-4.0); cite Patel et al., "Splitwise", ISCA 2024.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import numpy as np

from dpbench.workload.importers.base import RawTrace, TraceImportError, check_order, where

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
UPSTREAM_DIR = "github.com/Azure/AzurePublicDataset, data/"
UPSTREAM_FILES = ("AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv")
LICENCE = "CC-BY-4.0"
UPSTREAM = f"{UPSTREAM_DIR}{UPSTREAM_FILES[0]} ({LICENCE})"


def _seconds(text: str, path: Path, line: int) -> float:
    """Seconds since the epoch (UTC assumed; only differences matter) of a TIMESTAMP value."""
    head, dot, frac = text.strip().partition(".")
    try:
        whole = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
        if dot and not (frac.isdigit() and len(frac) <= 9):
            raise ValueError
    except ValueError:
        raise TraceImportError(
            f"{where(path, line, 'TIMESTAMP')}: {text!r}; allowed: YYYY-MM-DD HH:MM:SS[.fraction]"
        ) from None
    return (whole - datetime(1970, 1, 1)).total_seconds() + (float("0." + frac) if dot else 0.0)


def _tokens(text: str, field: str, path: Path, line: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise TraceImportError(
            f"{where(path, line, field)}: {text!r}; allowed: an integer ≥ 1 (tokens)"
        )
    return value


def read(path: Path) -> RawTrace:
    """Every request of an Azure LLM trace CSV, checked (the first bad line is named)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = csv.reader(fh)
        header = next(rows, None)
        if header is None:
            raise TraceImportError(
                f"{path}: empty file; allowed: an Azure trace CSV, first line {','.join(HEADER)}"
            )
        if tuple(h.strip() for h in header) != HEADER:
            raise TraceImportError(
                f"{where(path, 1)}: header {','.join(header)!r}; allowed: {','.join(HEADER)}"
            )
        ts: list[float] = []
        inp: list[int] = []
        out: list[int] = []
        lines: list[int] = []
        for row in rows:
            n = rows.line_num
            if not row or not "".join(row).strip():
                continue
            if len(row) != len(HEADER):
                raise TraceImportError(
                    f"{where(path, n)}: {len(row)} fields; allowed: {len(HEADER)} ({','.join(HEADER)})"
                )
            ts.append(_seconds(row[0], path, n))
            inp.append(_tokens(row[1], "ContextTokens", path, n))
            out.append(_tokens(row[2], "GeneratedTokens", path, n))
            lines.append(n)
    if not ts:
        raise TraceImportError(f"{path}: a header and no requests; allowed: one or more rows")
    arrival = np.array(ts, dtype=np.float64)
    line = np.array(lines, dtype=np.int64)
    check_order(path, arrival, line, "TIMESTAMP")
    return RawTrace(
        path=path,
        arrival_s=arrival - arrival[0],
        input_len=np.array(inp, dtype=np.int64),
        output_len=np.array(out, dtype=np.int64),
        line=line,
        blocks=None,
        block_size=None,
    )
