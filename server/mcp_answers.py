"""What an MCP tool's answer looks like to the agent that reads it: short.

An agent pays for every character of an answer in its context, so the MCP server sends each
tool's answer as compact JSON text: no indentation, no null or empty fields, and numbers rounded
to SIGNIFICANT_DIGITS significant digits. The structured content (what a client validates
against the tool's output schema) keeps every field, with the same rounded numbers. Lists come
in small pages (MCP_PAGE, with the API's cursor), experiments in lists with a few fields unless
asked for others (BRIEF_FIELDS), and loss curves thinned to a few points (client.spread);
docs/agents.md has each tool's typical size.

Why 5 significant digits: a relative error under 5e-5, below the run-to-run noise of val_bpb
(relative 1e-4 or more on every preset measured, docs/benchmarks.md), and of every other figure
an answer carries (losses, throughput, seconds), so no digit a decision could turn on is lost.
"""

from __future__ import annotations

import json
import math
from typing import Any

SIGNIFICANT_DIGITS = 5
# The first page of a listing tool (search, notes, near_misses, keep_rates): smaller than the
# API's, since an agent reads every item; the answer's cursor gives the next.
MCP_PAGE = 10
# An experiment in a list (search, wait): what it is, who tried it and how it was decided. The
# tool `experiment` has every field, its diff and its log.
BRIEF_FIELDS = ("id", "status", "agent", "description", "decision", "reason", "val_bpb", "valid_runs")
CURVE_POINTS = 20  # the samples of a loss curve the tool `progress` answers by default


def rounded(value: Any) -> Any:
    """`value` (JSON data) with every float rounded to SIGNIFICANT_DIGITS significant digits."""
    if isinstance(value, float):
        result = float(f"{value:.{SIGNIFICANT_DIGITS - 1}e}")
        return result if math.isfinite(result) else value  # the largest floats would round past the top
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def without_empty(value: Any) -> Any:
    """`value` (JSON data) without object fields that are null, "", [] or {} (after their own
    empty fields are gone); list items stay, so positions keep their meaning."""
    if isinstance(value, dict):
        kept = {key: without_empty(item) for key, item in value.items()}
        return {
            key: item
            for key, item in kept.items()
            if item is not None and item != "" and item != [] and item != {}
        }
    if isinstance(value, list):
        return [without_empty(item) for item in value]
    return value


def compact_text(value: Any) -> str:
    """The answer's text: `value` (already rounded) without empty fields, as JSON without spaces."""
    return json.dumps(without_empty(value), separators=(",", ":"), ensure_ascii=False)
