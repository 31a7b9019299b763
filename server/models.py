"""The database schema (SQLAlchemy 2 typed ORM). Alembic migrations in migrations/ create it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import text as sql
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from protocol.states import Decision, ExperimentStatus, LeaseState, RunKind, RunState, TokenKind

# A row of a Core statement, whatever its columns (the worker endpoints' plain statements).
AnyRow = Row[*tuple[Any, ...]]


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


E = TypeVar("E", bound=StrEnum)


class Word(TypeDecorator[E]):
    """A column of one of protocol.states' enums, stored as its word (VARCHAR(16), as always) and
    read back as the enum: a status is typed where it is used, and a word that is not one of the
    enum's fails at the write, not at a later read."""

    impl = String(16)
    cache_ok = True

    def __init__(self, enum: type[E]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime()}


# Statuses, decisions and run states are protocol.states' enums (stored as their strings). A
# candidate whose train.py matches an experiment in one of these is not run again.
NOT_RERUN_STATUSES = tuple(
    set(ExperimentStatus) - {ExperimentStatus.CANCELLED, ExperimentStatus.INFRA_FAILED}
)

TOKEN_KINDS = tuple(TokenKind)


# What a row written without a track belongs to: the first track, the project from before tracks
# (migration 0014), whose best is the research repo's `best` branch.
FIRST_TRACK_ID = 1
_FIRST_TRACK = sql(str(FIRST_TRACK_ID))  # the track_id columns' server default


class Track(Base):
    """One track: a preset on one platform, with its own baseline, best lineage and noise.

    Results are compared only within a track. `platforms` is which devices may serve it (an
    fnmatch pattern, or several separated by commas; None: any); the first worker accepted pins
    `platform` (its device) and `harness_id`, unless the server's settings or the admin did, and
    a worker on another device or harness is not accepted from then on (server/rules/tracks.py).
    """

    __tablename__ = "tracks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    preset: Mapped[str | None] = mapped_column(String(32))
    platforms: Mapped[str | None] = mapped_column(String(200))
    harness_id: Mapped[str | None] = mapped_column(String(128))
    platform: Mapped[str | None] = mapped_column(String(200))
    baseline_commit: Mapped[str | None] = mapped_column(String(40))
    best_commit: Mapped[str | None] = mapped_column(String(40))
    # The best's value and runs are its experiment's (val_bpb, valid_runs).
    best_experiment_id: Mapped[int | None] = mapped_column(Integer)
    # The last experiment id when the best became the best: the best gets a repeat for every
    # BEST_RERUN_EVERY experiments of its track after it (server/flows/decisions.py, best_repeats_due).
    best_since_experiment_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    archived_at: Mapped[datetime | None]


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (UniqueConstraint("kind", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[TokenKind] = mapped_column(Word(TokenKind))
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class Worker(Base):
    __tablename__ = "workers"
    __table_args__ = (UniqueConstraint("token_id", "name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"))
    name: Mapped[str] = mapped_column(String(100))
    device: Mapped[str] = mapped_column(String(200))
    memory_gb: Mapped[float] = mapped_column(Float)
    harness_id: Mapped[str] = mapped_column(String(128))
    preset: Mapped[str | None] = mapped_column(String(32))
    # Why no track accepts it (None: some track does); shown on the workers page.
    refused: Mapped[str | None] = mapped_column(Text)
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Experiment(Base):
    __tablename__ = "experiments"
    __table_args__ = (
        Index("ix_experiments_agent", "agent_id", "id"),
        # A track's experiments, newest first (its pages, its results.tsv, the repeats due).
        Index("ix_experiments_track", "track_id", "id"),
        Index("ix_experiments_base", "base_commit", "id"),
        Index("ix_experiments_blob", "train_py_blob"),
        Index("ix_experiments_bpb", "val_bpb"),
        # by_commit and measured_bpb: the oldest experiment of a commit, one index lookup.
        Index("ix_experiments_commit", "commit_sha", "id"),
        # Decided experiments whose change is not summarised yet (server/crud/change_kinds.py).
        Index("ix_experiments_changes_parsed", "changes_parsed", "id"),
        # GET /experiments?status=... pages newest first.
        Index("ix_experiments_status_id", "status", "id"),
        # Per-agent standings of each track read only this index (no table lookups).
        Index(
            "ix_experiments_standing",
            "track_id",
            "agent_id",
            "status",
            "val_bpb",
            "best_before_val_bpb",
            "created_at",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    track_id: Mapped[int] = mapped_column(ForeignKey("tracks.id"), server_default=_FIRST_TRACK)
    agent_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))
    source: Mapped[str] = mapped_column(String(16))  # agent | baseline | rebase | port
    description: Mapped[str] = mapped_column(Text)
    hypothesis: Mapped[str | None] = mapped_column(Text)
    base_commit: Mapped[str | None] = mapped_column(String(40))
    commit_sha: Mapped[str] = mapped_column(String(40))
    train_py_blob: Mapped[str | None] = mapped_column(String(40))
    status: Mapped[ExperimentStatus] = mapped_column(Word(ExperimentStatus))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    queued_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    decision: Mapped[Decision | None] = mapped_column(Word(Decision))  # once decided
    # The latest judgement in words: the decision's reason, or why it is still running.
    decision_reason: Mapped[str | None] = mapped_column(Text)
    # The comparison the latest judgement made (server/rules/judge.py): the reference (the best, or the
    # base when the best moved) as it was, effect = mean - reference mean and its standard error,
    # the runs on each side, the one-sided p-value, and the noise estimate it used.
    best_before_commit: Mapped[str | None] = mapped_column(String(40))
    best_before_val_bpb: Mapped[float | None] = mapped_column(Float)
    effect: Mapped[float | None] = mapped_column(Float)
    effect_se: Mapped[float | None] = mapped_column(Float)
    effect_bound: Mapped[float | None] = mapped_column(Float)  # one-sided (1 - ALPHA) upper bound
    compared_runs: Mapped[int | None] = mapped_column(Integer)
    best_runs: Mapped[int | None] = mapped_column(Integer)
    p_value: Mapped[float | None] = mapped_column(Float)
    sigma: Mapped[float | None] = mapped_column(Float)
    sigma_df: Mapped[int | None] = mapped_column(Integer)
    rebased_from_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id"))
    rebased_to_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id"))
    # A port: the kept experiment of another track whose change this one carried here.
    ported_from_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id"))
    # Its valid runs (ok, on the project's platform and harness): how many, their mean (for
    # sorting and the leaderboard) and sum of squared deviations from it (for the noise estimate).
    valid_runs: Mapped[int] = mapped_column(default=0)
    val_bpb: Mapped[float | None] = mapped_column(Float)
    val_bpb_m2: Mapped[float] = mapped_column(Float, default=0.0)
    platform: Mapped[str | None] = mapped_column(String(200))
    # Whether both train.py files of its change parsed (server/trainpy/changes.py), once decided and
    # summarised into change_kinds; None until then.
    changes_parsed: Mapped[bool | None] = mapped_column(Boolean)


class Run(Base):
    """One run of an experiment: its first run, a confirmation run, or a repeat of the best.

    Runs are what workers claim. Each has its own seed (ctx.seed), derived from the experiment id
    and the run number, and its own attempts; a lease and a result belong to one run.
    """

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("experiment_id", "number"),
        # Claims: the first queued run of the worker's tracks, by queue time.
        Index("ix_runs_queue", "status", "track_id", "queued_at", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"))
    # Its experiment's track, on the run itself: a claim picks from the queue on one index.
    track_id: Mapped[int] = mapped_column(ForeignKey("tracks.id"), server_default=_FIRST_TRACK)
    number: Mapped[int]  # 1, 2, ... within its experiment
    seed: Mapped[int | None] = mapped_column(BigInteger)  # None: run before per-run seeds existed
    kind: Mapped[RunKind] = mapped_column(Word(RunKind))
    status: Mapped[RunState] = mapped_column(Word(RunState))
    attempts: Mapped[int] = mapped_column(default=0)
    queued_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class NoiseEstimate(Base):
    """The run-to-run noise of val_bpb of one track (on its platform and harness), pooled over its
    experiments.

    Pooled from the measuring runs of every experiment that has several (server/rules/noise_pool.py,
    winsorized), and stored as sum_sq = df * sigma^2 with df = the sum of their runs minus one, so
    sigma = sqrt(sum_sq / df). Pooled again whenever a measuring run arrives.
    """

    __tablename__ = "noise_estimates"

    track_id: Mapped[int] = mapped_column(
        ForeignKey("tracks.id"), primary_key=True, default=FIRST_TRACK_ID, server_default=_FIRST_TRACK
    )
    platform: Mapped[str] = mapped_column(String(200), primary_key=True)
    harness_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    sum_sq: Mapped[float] = mapped_column(Float, default=0.0)
    df: Mapped[int] = mapped_column(default=0)
    runs: Mapped[int] = mapped_column(default=0)  # valid runs of the experiments that have several
    experiments: Mapped[int] = mapped_column(default=0)  # experiments with several valid runs
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Lease(Base):
    __tablename__ = "leases"
    __table_args__ = (Index("ix_leases_active", "state", "expires_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    worker_id: Mapped[str] = mapped_column(ForeignKey("workers.id"), index=True)
    attempt: Mapped[int]
    state: Mapped[LeaseState] = mapped_column(Word(LeaseState))
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


class Result(Base):
    """The RunResult a worker reported, field for field, plus where it came from."""

    __tablename__ = "results"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # the worker's result_id
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), unique=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id"))
    worker_id: Mapped[str] = mapped_column(ForeignKey("workers.id"))
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    status: Mapped[str] = mapped_column(String(16))
    error_class: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    val_bpb: Mapped[float | None] = mapped_column(Float)
    training_seconds: Mapped[float | None] = mapped_column(Float)
    startup_seconds: Mapped[float | None] = mapped_column(Float)
    score_seconds: Mapped[float | None] = mapped_column(Float)
    score_bound_seconds: Mapped[float | None] = mapped_column(Float)
    total_seconds: Mapped[float | None] = mapped_column(Float)
    peak_memory_mb: Mapped[float | None] = mapped_column(Float)
    tokens: Mapped[int | None] = mapped_column(BigInteger)
    steps: Mapped[int | None] = mapped_column(BigInteger)
    num_params: Mapped[int | None] = mapped_column(BigInteger)
    mfu_percent: Mapped[float | None] = mapped_column(Float)
    device: Mapped[str] = mapped_column(String(200))
    harness_id: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int | None] = mapped_column(BigInteger)
    sandbox: Mapped[bool] = mapped_column(Boolean)
    # protocol.result.RunConditions: the machine's speed, load and GPU readings when it ran.
    conditions: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    log_tail: Mapped[str] = mapped_column(Text)
    # RunResult fields newer than this schema (a newer harness): kept, not lost.
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ProgressSample(Base):
    __tablename__ = "progress_events"
    __table_args__ = (Index("ix_progress_experiment", "experiment_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    attempt: Mapped[int]
    step: Mapped[int] = mapped_column(BigInteger)
    loss: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    fraction: Mapped[float] = mapped_column(Float)
    phase: Mapped[str] = mapped_column(String(16))
    elapsed_s: Mapped[float] = mapped_column(Float)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"))
    status_code: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class IntegrityEvent(Base):
    """A run that ended in an integrity class (protocol.result.INTEGRITY_CLASSES): its agent's
    queued experiments are held until an admin clears the event. The result row is the evidence."""

    __tablename__ = "integrity_events"
    __table_args__ = (Index("ix_integrity_events_open", "cleared_at", "agent_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"))
    result_id: Mapped[str] = mapped_column(ForeignKey("results.id"), unique=True)
    error_class: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    cleared_at: Mapped[datetime | None]
    cleared_by: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))
    clear_note: Mapped[str | None] = mapped_column(Text)


class ImportedResult(Base):
    """A row of an imported results.tsv: history as the log claimed it, never compared with `best`."""

    __tablename__ = "imported_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    track_id: Mapped[int] = mapped_column(ForeignKey("tracks.id"), server_default=_FIRST_TRACK)
    commit: Mapped[str] = mapped_column(String(40))
    val_bpb: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # keep | discard | crash
    description: Mapped[str] = mapped_column(Text)
    imported_at: Mapped[datetime] = mapped_column(default=utcnow)


class Note(Base):
    """A short note an agent or a person left for the others, optionally about an experiment or a
    commit: a hypothesis, a finding, what is being tried next."""

    __tablename__ = "notes"
    __table_args__ = (
        # GET /notes pages newest first, overall or filtered by one link or one author.
        Index("ix_notes_experiment", "experiment_id", "id"),
        Index("ix_notes_commit", "commit_sha", "id"),
        Index("ix_notes_author", "author_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    author_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"))
    text: Mapped[str] = mapped_column(Text)
    experiment_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id"))
    commit_sha: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class ChangeKind(Base):
    """One kind of change a decided experiment made (server/rules/keep_rates.py): a constant it set, with
    the way its value moved and both values, or a region of train.py it touched. Written shortly
    after the experiment is decided (server/crud/change_kinds.py), so that keep rates and near
    misses never diff train.py files on a request."""

    __tablename__ = "change_kinds"

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), primary_key=True)
    part: Mapped[str] = mapped_column(String(16), primary_key=True)  # protocol.states.Part
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    direction: Mapped[str | None] = mapped_column(String(8))  # protocol.states.Direction; constants only
    old: Mapped[float | None] = mapped_column(Float)  # a constant's value before (None: it is new)
    new: Mapped[float | None] = mapped_column(Float)  # and after (None: it went)


# The tables as Core `Table`s (which `Model.__table__` is not typed as), for the plain Core
# statements of the worker endpoints (server/crud/leases.py, server/crud/results.py).
EXPERIMENTS = cast(Table, Experiment.__table__)
RUNS = cast(Table, Run.__table__)
LEASES = cast(Table, Lease.__table__)
RESULTS = cast(Table, Result.__table__)
TRACKS = cast(Table, Track.__table__)
NOISE = cast(Table, NoiseEstimate.__table__)
CHANGE_KINDS = cast(Table, ChangeKind.__table__)
INTEGRITY_EVENTS = cast(Table, IntegrityEvent.__table__)


# "Has this been tried?" (server/rules/similarity.py, server/crud/similar.py): what each experiment's
# change touched, stored when it is queued so that finding similar changes reads rows, not git.


class ExperimentChange(Base):
    """The change an experiment made to its base's train.py (server/trainpy/changes.py's summary)."""

    __tablename__ = "experiment_changes"
    __table_args__ = (
        # The candidates of the similarity rule, each one index lookup: the same lines changed,
        # and the same constants set with the same other lines (their values compared after).
        Index("ix_experiment_changes_lines", "lines_sha"),
        Index("ix_experiment_changes_shape", "shape_sha"),
    )

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), primary_key=True)
    parsed: Mapped[bool] = mapped_column(Boolean)
    lines_sha: Mapped[str] = mapped_column(String(64))  # sha256 of the removed and added lines
    # sha256 of the constants' names and the code lines; None when no constant was set (or unparsed)
    shape_sha: Mapped[str | None] = mapped_column(String(64))
    code_lines: Mapped[int] = mapped_column(Integer)  # changed lines that are not constants'
    # {"constants": [[name, old, new], ...], "regions": [...], "removed": [...], "added": [...]}
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    touched: Mapped[str] = mapped_column(Text)  # the changed lines, `-` or `+` first, one a line


class ExperimentConstant(Base):
    """A constant an experiment's change set, and its new value (GET /experiments?constant=NAME;
    the nearby values of a constant are a range of this index)."""

    __tablename__ = "experiment_constants"
    __table_args__ = (Index("ix_experiment_constants_value", "name", "value"),)

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)  # None: the change removed it


class ExperimentCodeLine(Base):
    """A changed line of an experiment's code (not a constant's assignment), by its hash: the
    changes that share a line with a new one are the candidates of overlapping_code."""

    __tablename__ = "experiment_code_lines"
    __table_args__ = (Index("ix_experiment_code_lines_line", "line_sha"),)

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), primary_key=True)
    line_sha: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of `-line` or `+line`
