"""What an MCP tool's answer looks like to the agent that reads it: short.

An agent pays for every character of an answer in its context, so the MCP server sends each
tool's answer as compact JSON text: no indentation, no null or empty fields, and numbers rounded
to SIGNIFICANT_DIGITS significant digits. The structured content (what a client validates
against the tool's output schema) keeps every field, with the same rounded numbers. Lists come
in small pages (MCP_PAGE, with the API's cursor), experiments in lists with a few fields unless
asked for others (BRIEF_FIELDS), and loss curves thinned to a few points (protocol.spread);
docs/agents.md has each tool's typical size.

The list of tools is read by every agent at the start of every session, so it is short too
(`listed_input`): input schemas without pydantic's titles, an optional argument as what it takes
(not "it or null, default null"), and no output schemas, which repeated the API's response models
(docs/api.md) at three times the size of everything else; an answer's fields are named in words
in the tools' descriptions and in docs/agents.md.

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


def listed_input(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as listed: closed to arguments it does not take (which a call is
    refused for: server.mcp.arguments), without the `title` pydantic gives every field, and an
    optional argument as what it takes: it is left out, not sent as null."""
    return {**plainer(schema), "additionalProperties": False}


_NULL = {"type": "null"}


def plainer(value: Any) -> Any:
    """JSON Schema `value` without `title` keywords (a property named title stays), and with
    `{anyOf: [X, null], default: null}` as X."""
    if isinstance(value, list):
        return [plainer(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {k: plainer(v) for k, v in value.items() if not (k == "title" and isinstance(v, str))}
    choices = out.get("anyOf")
    if "default" in out and out["default"] is None and choices and len(choices) == 2 and _NULL in choices:
        (taken,) = (choice for choice in choices if choice != _NULL)
        out = {**{k: v for k, v in out.items() if k not in ("anyOf", "default")}, **taken}
    return out
