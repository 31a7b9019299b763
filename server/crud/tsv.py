"""results.tsv, the autoresearch log format: export, and import as history.

Columns: commit (7 hex digits), val_bpb (6 decimals, 0.000000 for crashes), memory_gb
(1 decimal), status (keep | discard | crash), description. Imported rows are stored as history
only: the numbers are a log's claim, not a measurement, so they are never compared with `best`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import KEPT, REBASED, REVERTED, STALE, Experiment, ImportedResult, Result

HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription"
TSV_STATUSES = ("keep", "discard", "crash")
_COMMIT = re.compile(r"^[0-9a-f]{4,40}$")


class TsvError(ValueError):
    pass


@dataclass(frozen=True)
class TsvRow:
    commit: str
    val_bpb: float
    memory_gb: float
    status: str
    description: str

    def line(self) -> str:
        return f"{self.commit}\t{self.val_bpb:.6f}\t{self.memory_gb:.1f}\t{self.status}\t{self.description}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def export_rows(session: Session) -> Iterator[TsvRow]:
    """Imported history first, then every experiment with a result, in id order."""
    for imported in session.scalars(select(ImportedResult).order_by(ImportedResult.id)):
        yield TsvRow(
            imported.commit, imported.val_bpb, imported.memory_gb, imported.status, imported.description
        )
    statement = (
        select(
            Experiment.commit_sha,
            Experiment.status,
            Experiment.description,
            Result.status.label("result_status"),
            Result.val_bpb,
            Result.peak_memory_mb,
        )
        .join(Result, Result.experiment_id == Experiment.id)
        .where(Experiment.status.in_((KEPT, REVERTED, REBASED, STALE)))
        .order_by(Experiment.id)
    )
    for row in session.execute(statement):
        ok = row.result_status == "ok" and row.val_bpb is not None
        yield TsvRow(
            commit=row.commit_sha[:7],
            val_bpb=row.val_bpb if ok else 0.0,
            memory_gb=(row.peak_memory_mb or 0.0) / 1024 if ok else 0.0,
            status="keep" if row.status == KEPT else "discard" if ok else "crash",
            description=_one_line(row.description),
        )


def parse(text: str) -> list[TsvRow]:
    """Rows of a results.tsv, or TsvError naming the line and what is wrong with it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise TsvError(f"line 1: the header must be {HEADER!r} (tab-separated)")
    rows = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t", 4)
        if len(fields) != 5:
            raise TsvError(f"line {number}: expected 5 tab-separated columns, found {len(fields)}")
        commit, val_bpb, memory_gb, status, description = fields
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
        rows.append(TsvRow(commit, bpb, memory, status, description))
    return rows


def import_rows(session: Session, rows: list[TsvRow]) -> tuple[int, int]:
    """Store rows not already imported; return (imported, skipped as already present)."""
    present = {
        TsvRow(r.commit, r.val_bpb, r.memory_gb, r.status, r.description).line()
        for r in session.scalars(select(ImportedResult))
    }
    imported = 0
    for row in rows:
        if row.line() in present:
            continue
        present.add(row.line())
        session.add(ImportedResult(**asdict(row)))
        imported += 1
    return imported, len(rows) - imported
