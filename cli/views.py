"""Experiments as terminal text: one-line summaries, a table, and a detailed view."""

from __future__ import annotations

from typing import Any

Experiment = dict[str, Any]


def bpb(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def outcome(experiment: Experiment) -> str:
    """The status, with the harness's verdict when the run did not produce a valid score."""
    result = experiment.get("result")
    if result and result["status"] != "ok":
        detail = result["status"] + (f": {result['error_class']}" if result.get("error_class") else "")
        return f"{experiment['status']} ({detail})"
    if experiment["status"] == "queued" and experiment.get("queue_position") is not None:
        return f"queued (#{experiment['queue_position'] + 1} in line)"
    return str(experiment["status"])


def summary(experiment: Experiment) -> str:
    """`experiment 12 kept: val_bpb 0.981234 (reason)`."""
    line = f"experiment {experiment['id']} {outcome(experiment)}"
    if experiment.get("val_bpb") is not None:
        line += f": val_bpb {bpb(experiment['val_bpb'])}"
    if experiment.get("reason"):
        line += f" ({experiment['reason']})"
    if experiment.get("rebased_to"):
        line += f"; re-run on the new best as experiment {experiment['rebased_to']}"
    return line


def table(experiments: list[Experiment]) -> str:
    rows = [("ID", "STATUS", "VAL_BPB", "AGENT", "DESCRIPTION")]
    rows += [
        (str(e["id"]), outcome(e), bpb(e.get("val_bpb")), e["agent"], e["description"].splitlines()[0][:70])
        for e in experiments
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)), row[4]]
        ).rstrip()
        for row in rows
    )


def details(experiment: Experiment) -> str:
    """Everything an agent needs to learn from one experiment, one field a line."""
    lines = [
        summary(experiment),
        f"  description:  {experiment['description']}",
        f"  agent:        {experiment['agent']} ({experiment['source']})",
        f"  base:         {experiment.get('base') or '-'}",
        f"  commit:       {experiment['commit']}",
        f"  attempts:     {experiment['attempts']}",
    ]
    if experiment.get("hypothesis"):
        lines.insert(2, f"  hypothesis:   {experiment['hypothesis']}")
    best_before = experiment.get("best_before")
    if best_before:
        lines.append(
            f"  best before:  {bpb(best_before.get('val_bpb'))} ({best_before.get('commit') or '-'})"
        )
    result = experiment.get("result")
    if result:
        measured = [
            ("val_bpb", bpb(result.get("val_bpb"))),
            ("training s", _number(result.get("training_seconds"))),
            ("total s", _number(result.get("total_seconds"))),
            ("peak MB", _number(result.get("peak_memory_mb"))),
            ("steps", _number(result.get("steps"))),
            ("tokens", _number(result.get("tokens"))),
            ("params", _number(result.get("num_params"))),
            ("MFU %", _number(result.get("mfu_percent"))),
            ("device", result.get("device") or "-"),
        ]
        lines.append("  result:       " + ", ".join(f"{name} {value}" for name, value in measured))
        if result.get("error_message"):
            lines.append(f"  error:        {result['error_class']}: {result['error_message']}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.2f}"
