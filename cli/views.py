"""Experiments as terminal text: one-line summaries, a table, and a detailed view."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from protocol.result import ProgressEvent
from protocol.schemas import ExperimentOut, NoiseOut, SimilarExperiment
from protocol.states import ExperimentStatus


def bpb(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def as_json(
    value: BaseModel | Sequence[BaseModel | Mapping[str, object]] | Mapping[str, object] | None,
) -> str:
    """An answer (or several) as the API sent it, or a command's own facts, indented: what --json
    prints."""
    return json.dumps(_plain(value), indent=2)


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(item) for item in value]
    return value


def progress(sample: ProgressEvent) -> str:
    """`train, step 120, loss 3.2011, 40% of the budget`."""
    parts = [sample.phase, f"step {sample.step}"]
    if sample.loss is not None:
        parts.append(f"loss {sample.loss:.4f}")
    parts.append(f"{100 * sample.fraction:.0f}% of the budget")
    return ", ".join(parts)


def noise(estimate: NoiseOut | None) -> str:
    """`sigma 0.0061 from 14 runs of 3 experiments (cpu)`, with the workers' offsets on a fleet
    (`; offsets gpu0 -0.0021, gpu1 +0.0021`), or why there is none yet."""
    if estimate is None or estimate.sigma is None:
        return "not measured yet"
    offsets = ", ".join(f"{name} {offset:+.4f}" for name, offset in estimate.offsets.items())
    return (
        f"sigma {estimate.sigma:.4f} from {estimate.runs} runs of {estimate.experiments} "
        f"experiment{'' if estimate.experiments == 1 else 's'} ({estimate.platform})"
        + (f"; offsets {offsets}" if offsets else "")
    )


def outcome(experiment: ExperimentOut) -> str:
    """The status, with the harness's verdict when the run did not produce a valid score."""
    result = experiment.result
    if result and result.status != "ok":
        detail = result.status + (f": {result.error_class}" if result.error_class else "")
        return f"{experiment.status} ({detail})"
    if experiment.status == ExperimentStatus.QUEUED and experiment.queue_position is not None:
        return f"queued ({experiment.queue_position} ahead of it)"
    return str(experiment.status)


def summary(experiment: ExperimentOut) -> str:
    """`experiment 12 kept: val_bpb 0.981234 (mean of 3 runs) (reason)`."""
    line = f"experiment {experiment.id} {outcome(experiment)}"
    if experiment.val_bpb is not None:
        line += f": val_bpb {bpb(experiment.val_bpb)}"
        if experiment.valid_runs > 1:
            line += f" (mean of {experiment.valid_runs} runs)"
    if experiment.reason:
        line += f" ({experiment.reason})"
    if experiment.rebased_to:
        line += f"; re-run on the new best as experiment {experiment.rebased_to}"
    return line


def effect(experiment: ExperimentOut) -> str:
    """`-0.0031 ± 0.0009 (3 vs 8 runs), p = 0.002`, or `-` before any comparison."""
    c = experiment.comparison
    if c is None:
        return "-"
    text = f"{c.effect:+.4f}"
    if c.se is not None:
        text += f" ± {c.se:.4f}"
    text += f" ({c.runs} vs {c.reference_runs} runs)"
    if c.p_value is not None:
        text += f", p = {c.p_value:.3f}" if c.p_value >= 0.001 else ", p < 0.001"
    return text


def table(experiments: list[ExperimentOut]) -> str:
    rows = [("ID", "STATUS", "VAL_BPB", "RUNS", "EFFECT", "AGENT", "DESCRIPTION")]
    rows += [
        (
            str(e.id),
            outcome(e),
            bpb(e.val_bpb),
            str(e.valid_runs),
            effect(e).split(" (")[0],
            e.agent,
            e.description.splitlines()[0][:70],
        )
        for e in experiments
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return "\n".join(
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row[:6], widths, strict=True)), row[6]]
        ).rstrip()
        for row in rows
    )


def details(experiment: ExperimentOut) -> str:
    """Everything an agent needs to learn from one experiment, one field a line."""
    lines = [
        summary(experiment),
        f"  description:  {experiment.description}",
        f"  agent:        {experiment.agent} ({experiment.source})",
        f"  base:         {experiment.base or '-'}",
        f"  commit:       {experiment.commit}",
        f"  attempts:     {experiment.attempts}",
    ]
    if experiment.hypothesis:
        lines.insert(2, f"  hypothesis:   {experiment.hypothesis}")
    best_before = experiment.best_before
    if best_before:
        lines.append(f"  compared to:  {bpb(best_before.val_bpb)} ({best_before.commit or '-'})")
    if experiment.comparison:
        lines.append(f"  effect:       {effect(experiment)}")
    runs = experiment.runs
    if len(runs) > 1 or (runs and runs[0].seed is not None):
        lines.append(
            "  runs:         "
            + "; ".join(
                f"{r.number} {r.kind} {r.state}"
                + (f" {bpb(r.val_bpb)}" if r.val_bpb is not None else "")
                + (f" ({r.result_status})" if r.result_status not in (None, "ok") else "")
                + (f" seed {r.seed}" if r.seed is not None else "")
                for r in runs
            )
        )
    result = experiment.result
    if result:
        measured = [
            ("val_bpb", bpb(result.val_bpb)),
            ("training s", _number(result.training_seconds)),
            ("total s", _number(result.total_seconds)),
            ("peak MB", _number(result.peak_memory_mb)),
            ("steps", _number(result.steps)),
            ("tokens", _number(result.tokens)),
            ("params", _number(result.num_params)),
            ("MFU %", _number(result.mfu_percent)),
            ("device", result.device or "-"),
        ]
        lines.append("  result:       " + ", ".join(f"{name} {value}" for name, value in measured))
        if result.error_message:
            lines.append(f"  error:        {result.error_class}: {result.error_message}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.2f}"


def similar(items: list[SimilarExperiment]) -> list[str]:
    """Similar experiments (SimilarExperiment), one line each:
    `  #12 reverted val_bpb 1.020000 (+0.0200 ± 0.0040): nearby_constants, LR 0.02 (here 0.021) - lr 0.02`."""
    out = []
    for item in items:
        effect = ""
        if item.effect is not None:
            se = f" ± {item.se:.4f}" if item.se is not None else ""
            effect = f" ({item.effect:+.4f}{se})"
        out.append(
            f"  #{item.experiment_id} {item.status} val_bpb {bpb(item.val_bpb)}{effect}: "
            f"{item.kind}, {item.detail} - {item.description}"
        )
    return out
