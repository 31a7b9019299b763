"""results.tsv, the autoresearch log format: export, and import as history.

autoresearch's columns: commit (7 hex digits), val_bpb (6 decimals, 0.000000 for crashes),
memory_gb (1 decimal), status (keep | discard | crash: autoresearch's words, from ours through
TSV_STATUS alone), description. The export adds each
decision's numbers after them: runs (the experiment's valid runs), effect (its mean minus the
mean it was compared with), effect_se, best_runs (the runs of what it was compared with),
p_value and reason (the decision in words, on one line); empty where there are none (imported
history, the greedy rule's se and p, a crash's numbers).
Tools that read the first five columns read it as before. Import takes either header. Imported
rows are stored as history only: the numbers are a log's claim, not a measurement, so they are
never compared with `best`, and their decision columns are not kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from protocol.states import ExperimentStatus
from server.models import Experiment, ImportedResult, Result

COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")
DECISION_COLUMNS = ("runs", "effect", "effect_se", "best_runs", "p_value", "reason")
_NUMERIC_DECISION_COLUMNS = DECISION_COLUMNS[:-1]
HEADER = "\t".join(COLUMNS)  # autoresearch's own
HEADER_WITH_DECISIONS = "\t".join(COLUMNS + DECISION_COLUMNS)  # what the export writes
# autoresearch's word for each decided status (protocol.states), for an experiment with a valid
# result: kept is `keep`; measured and not kept is `discard` (a rebased or stale change went on,
# or ended, elsewhere); one without a valid result is CRASH, whatever its status. The only place
# the two vocabularies meet (docs/api.md, "results.tsv").
TSV_STATUS = {
    ExperimentStatus.KEPT: "keep",
    ExperimentStatus.REVERTED: "discard",
    ExperimentStatus.REBASED: "discard",
    ExperimentStatus.STALE: "discard",
}
CRASH = "crash"
TSV_STATUSES = (*dict.fromkeys(TSV_STATUS.values()), CRASH)
_COMMIT = re.compile(r"^[0-9a-f]{4,40}$")
_DECIDED = tuple(TSV_STATUS)


class TsvError(ValueError):
    pass


@dataclass(frozen=True)
class TsvRow:
    commit: str
    val_bpb: float
    memory_gb: float
    status: str
    description: str
    runs: int | None = None
    effect: float | None = None
    effect_se: float | None = None
    best_runs: int | None = None
    p_value: float | None = None
    reason: str = ""

    def line(self) -> str:
        """The autoresearch columns only."""
        return f"{self.commit}\t{self.val_bpb:.6f}\t{self.memory_gb:.1f}\t{self.status}\t{self.description}"

    def line_with_decision(self) -> str:
        decision = (
            _cell(self.runs, "d"),
            _cell(self.effect, ".6f"),
            _cell(self.effect_se, ".6f"),
            _cell(self.best_runs, "d"),
            _cell(self.p_value, ".4g"),
            _one_line(self.reason),
        )
        return "\t".join((self.line(), *decision))


def _cell(value: float | int | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def export_rows(session: Session, track_id: int) -> Iterator[TsvRow]:
    """A track's imported history first, then every decided experiment of it with a result, in id
    order."""
    imports = select(ImportedResult).where(ImportedResult.track_id == track_id).order_by(ImportedResult.id)
    for imported in session.scalars(imports):
        yield TsvRow(
            imported.commit, imported.val_bpb, imported.memory_gb, imported.status, imported.description
        )
    memory = (
        select(Result.experiment_id, func.max(Result.peak_memory_mb).label("peak_memory_mb"))
        .where(Result.status == "ok")
        .group_by(Result.experiment_id)
        .subquery()
    )
    with_result = select(Result.experiment_id).distinct().subquery()
    statement = (
        select(Experiment, memory.c.peak_memory_mb)
        .join(with_result, with_result.c.experiment_id == Experiment.id)
        .outerjoin(memory, memory.c.experiment_id == Experiment.id)
        .where(Experiment.status.in_(_DECIDED), Experiment.track_id == track_id)
        .order_by(Experiment.id)
    )
    for experiment, peak_memory_mb in session.execute(statement):
        ok = experiment.val_bpb is not None
        yield TsvRow(
            commit=experiment.commit_sha[:7],
            val_bpb=experiment.val_bpb if ok else 0.0,
            memory_gb=(peak_memory_mb or 0.0) / 1024 if ok else 0.0,
            status=TSV_STATUS[experiment.status] if ok else CRASH,
            description=_one_line(experiment.description),
            runs=experiment.valid_runs,
            effect=experiment.effect if ok else None,
            effect_se=experiment.effect_se if ok else None,
            best_runs=experiment.best_runs if ok and experiment.effect is not None else None,
            p_value=experiment.p_value if ok else None,
            reason=experiment.decision_reason or "",
        )


def parse(text: str) -> list[TsvRow]:
    """Rows of a results.tsv (either header), or TsvError naming the line and what is wrong with it."""
    lines = text.splitlines()
    header = lines[0].strip() if lines else ""
    if header not in (HEADER, HEADER_WITH_DECISIONS):
        raise TsvError(f"line 1: the header must be {HEADER!r} or {HEADER_WITH_DECISIONS!r} (tab-separated)")
    extended = header == HEADER_WITH_DECISIONS
    rows = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        rows.append(_parse_line(number, line, extended))
    return rows


def _parse_line(number: int, line: str, extended: bool) -> TsvRow:
    width = len(COLUMNS) + (len(DECISION_COLUMNS) if extended else 0)
    fields = line.split("\t") if extended else line.split("\t", len(COLUMNS) - 1)
    if len(fields) != width:
        raise TsvError(f"line {number}: expected {width} tab-separated columns, found {len(fields)}")
    commit, val_bpb, memory_gb, status, description = fields[: len(COLUMNS)]
    if not _COMMIT.match(commit):
        raise TsvError(f"line {number}: commit {commit[:50]!r} is not a lower-case hex commit id")
    try:
        bpb, memory = float(val_bpb), float(memory_gb)
    except ValueError as exc:
        raise TsvError(f"line {number}: val_bpb and memory_gb must be numbers") from exc
    if not (math.isfinite(bpb) and math.isfinite(memory) and 0 <= bpb <= 1e6 and 0 <= memory <= 1e6):
        raise TsvError(f"line {number}: val_bpb and memory_gb must be finite numbers from 0 to 1e6")
    if status not in TSV_STATUSES:
        raise TsvError(f"line {number}: status {status[:20]!r} is not one of {', '.join(TSV_STATUSES)}")
    description = description.strip()
    if "\0" in description or len(description) > 500:
        raise TsvError(f"line {number}: the description must be at most 500 characters, without NUL")
    for name, cell in zip(_NUMERIC_DECISION_COLUMNS, fields[len(COLUMNS) :], strict=False):
        try:
            if cell and not math.isfinite(float(cell)):
                raise ValueError(cell)
        except ValueError as exc:
            raise TsvError(f"line {number}: {name} must be a finite number or empty") from exc
    return TsvRow(commit, bpb, memory, status, description)


def import_rows(session: Session, rows: list[TsvRow], track_id: int) -> tuple[int, int]:
    """Store rows not already imported into the track's history; return (imported, skipped as
    already present)."""
    present = {
        TsvRow(r.commit, r.val_bpb, r.memory_gb, r.status, r.description).line()
        for r in session.scalars(select(ImportedResult).where(ImportedResult.track_id == track_id))
    }
    imported = 0
    for row in rows:
        if row.line() in present:
            continue
        present.add(row.line())
        session.add(
            ImportedResult(
                track_id=track_id,
                commit=row.commit,
                val_bpb=row.val_bpb,
                memory_gb=row.memory_gb,
                status=row.status,
                description=row.description,
            )
        )
        imported += 1
    return imported, len(rows) - imported
