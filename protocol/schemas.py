"""Request and response bodies of the HTTP API (pydantic). docs/api.md describes them in prose.

Every string that reaches the database is bounded and free of NUL characters and unpaired
surrogates (PostgreSQL stores neither: `Input` checks every string field of every request body),
and every number is finite and within the column's range, so that bad input is a 422 and never a
database error. Paths and query strings are checked for NUL by `server.core.no_nul`. The schema
states it (NUL_FREE: every string of a request that has no pattern of its own), so that a client
generated from the OpenAPI document never sends what is refused.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from protocol.result import ErrorClass, ProgressEvent, ResultStatus, RunConditions, RunResult
from protocol.states import (
    Decision,
    Direction,
    ExperimentStatus,
    Part,
    Rule,
    RunKind,
    RunState,
    SimilarityKind,
)

# The largest integer accepted: exact as a JSON double, so that every client reads the bound alike
# (2**63 - 1 is not), and far beyond any count of steps, tokens or parameters.
MAX_INT = 2**53
Name = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")]


def storable_text(value: object) -> object:
    """`value` (a string, or a list or dict of them) if PostgreSQL can store every string in it."""
    if isinstance(value, str):
        if "\0" in value:
            raise ValueError("must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError("must be valid Unicode text (unpaired surrogate)") from exc
    elif isinstance(value, list | tuple):
        for item in value:
            storable_text(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            storable_text(key)
            storable_text(item)
    return value


def storable_log(value: str) -> str:
    """Logs are the harness's record of what train.py printed: keep them, minus what cannot be stored."""
    return value.replace("\0", "\ufffd").encode("utf-8", "replace").decode("utf-8")


SHA_PATTERN = r"^[0-9a-fA-F]{4,40}$"  # a full or abbreviated commit id
NUL_FREE = r"^[^\x00]*$"  # what PostgreSQL can store (storable_text also refuses lone surrogates)
# The pattern a request's free text states; `Input` (and server.core.no_nul for URLs) checks it,
# with its own message.
STATES_NUL_FREE: dict[str, Any] = {"pattern": NUL_FREE}
Text = Annotated[str, Field(json_schema_extra=STATES_NUL_FREE)]
PAGE_LIMIT = 200  # the most items one page of a list answers
Sha = Annotated[str, Field(pattern=SHA_PATTERN)]
# A track's name: part of a git ref (tracks/<name>/best) and of URLs.
TRACK_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"
TrackName = Annotated[str, Field(pattern=TRACK_PATTERN)]


class Input(BaseModel):
    """A request body: every string in every field must be storable (checked after the field's
    own validators, so a log that replaced its NUL characters passes)."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: object) -> object:
        return storable_text(value)


class Strict(Input):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# Agents ---------------------------------------------------------------------------------------


class Edit(Strict):
    """One search/replace edit of train.py."""  # applied by server/trainpy/edits.py

    old: Text = Field(min_length=1, description="text of train.py to replace: it must occur exactly once")
    new: Text = Field(description="what replaces it (empty: delete it)")


# Search/replace edits applied in order to the base's train.py, the change's third form.
Edits = Annotated[
    list[Edit],
    Field(
        min_length=1,
        max_length=50,
        description="search/replace edits applied in order to base's train.py (instead of patch or "
        "train_py); each `old` must occur exactly once in the text the edits before it left",
    ),
]


class SubmitIn(Strict):
    # Exactly one of the three (`submit` refuses anything else with 422).
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["patch"], "properties": {"patch": {"type": "string", **STATES_NUL_FREE}}},
                {"required": ["train_py"], "properties": {"train_py": {"type": "string", **STATES_NUL_FREE}}},
                {"required": ["edits"], "properties": {"edits": {"type": "array"}}},
            ]
        }
    )

    description: Annotated[Text, Field(min_length=1, max_length=500)]
    hypothesis: Annotated[Text, Field(max_length=2000)] | None = None
    base: Sha | None = Field(
        None, description="commit to apply the change to; default: the current best of the track"
    )
    patch: Text | None = Field(None, description="unified diff of train.py against base")
    train_py: Text | None = Field(None, description="the whole new train.py (instead of patch)")
    edits: Edits | None = None
    track: TrackName | None = Field(None, description="its track (default: base's, else the only one)")


class BestBefore(BaseModel):
    """What the experiment was compared with: the best, or its base when the best had moved on."""

    commit: str | None
    val_bpb: float | None = Field(description="its mean val_bpb at the time")


class ComparisonOut(BaseModel):
    """The latest judgement's numbers: effect ± standard error, runs on each side, p-value."""

    effect: float = Field(
        description="mean val_bpb minus the reference's mean (negative is better); for a re-applied "
        "change, pooled with its effects on its former bases (docs/api.md)"
    )
    se: float | None = Field(description="standard error of the effect (null for the greedy rule)")
    runs: int = Field(description="the experiment's valid runs it rests on, on its former bases too")
    reference_runs: int = Field(
        description="the references' valid runs it rests on (a kept change's repeats only: docs/api.md)"
    )
    p_value: float | None = Field(description="one-sided p-value that the experiment is not better")
    upper_bound: float | None = Field(
        description="one-sided (1 - alpha) upper confidence bound of the effect"
    )
    sigma: float | None = Field(description="the noise estimate used")
    sigma_df: int | None = Field(description="its degrees of freedom")


class RunOut(BaseModel):
    """One run of an experiment."""

    number: int
    kind: RunKind
    state: RunState
    seed: int | None = Field(description="ctx.seed of the run (null: run before per-run seeds)")
    attempts: int
    queue_position: int | None = Field(
        None, description="runs ahead of it in the queue (0: next to run); only while queued"
    )
    started_at: datetime | None
    finished_at: datetime | None
    result_status: ResultStatus | None
    val_bpb: float | None = Field(description="its score, when the run ended ok")


class ResultOut(BaseModel):
    """The harness's measurements (RunResult without the log, which is at /log)."""

    status: ResultStatus
    error_class: str | None
    error_message: str | None
    val_bpb: float | None
    training_seconds: float | None
    startup_seconds: float | None
    score_seconds: float | None = Field(description="how long the model ran while scored (eval and probe)")
    score_bound_seconds: float | None = Field(
        description="the most it could have: past it the run is invalid (score_over_budget)"
    )
    total_seconds: float | None
    peak_memory_mb: float | None
    tokens: int | None
    steps: int | None
    num_params: int | None
    mfu_percent: float | None
    device: str
    harness_id: str
    seed: int | None = Field(description="ctx.seed the run had")
    sandbox: bool
    conditions: RunConditions | None = Field(
        None,
        description="the machine when it ran: a fixed piece of work's speed, the load, the GPU's readings",
    )
    worker: str | None = Field(None, description="the worker that ran it")
    extra: dict[str, Any] = Field(default_factory=dict, description="RunResult fields newer than this server")
    received_at: datetime


class ExperimentOut(BaseModel):
    id: int
    track: str | None = Field(None, description="the track it runs on (null: a server before tracks)")
    status: ExperimentStatus
    agent: str
    source: Literal["agent", "baseline", "rebase", "port"]
    description: str
    hypothesis: str | None
    base: str | None
    commit: str
    attempts: int = Field(description="attempts of its latest run (a lost worker counts one)")
    cancel_requested: bool
    queue_position: int | None = Field(
        None, description="runs ahead of its run in the queue (0: next to run); only while it is queued"
    )
    created_at: datetime
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    run_seconds: float | None = Field(None, description="from the (last) claim to the result")
    decision: Decision | None
    reason: str | None = Field(description="the decision's reason, or where the judgement stands")
    best_before: BestBefore | None
    comparison: ComparisonOut | None
    rebased_from: int | None
    rebased_to: int | None
    ported_from: int | None = Field(
        None, description="a port: the kept experiment of another track whose change this one carries"
    )
    val_bpb: float | None = Field(description="the mean of its valid runs")
    valid_runs: int = Field(description="runs that ended ok on its track's platform and harness")
    runs: list[RunOut]
    result: ResultOut | None = Field(description="the latest run's result")


class ExperimentPage(BaseModel):
    items: list[ExperimentOut]
    next_cursor: str | None


class ProgressOut(BaseModel):
    experiment_id: int
    run: int | None = Field(description="the run these samples are of")
    events: list[ProgressEvent]


class BestOut(BaseModel):
    track: str | None = Field(None, description="its track (null: a server before tracks)")
    commit: str
    val_bpb: float | None = Field(description="the mean of the best's valid runs")
    runs: int = Field(description="its valid runs")
    measured: bool = Field(
        description="whether it has a valid run; until it has, nothing is kept against it (a best whose "
        "runs lost their workers is queued again when the server starts)"
    )
    se: float | None = Field(description="standard error of that mean, from the noise estimate")
    experiment_id: int | None
    platform: str | None
    harness_id: str | None
    measured_on: str | None = Field(
        None, description="how its value was measured: its runs, on which workers, when, how fast they read"
    )
    train_py: str


class LineageEntry(BaseModel):
    experiment_id: int
    commit: str
    val_bpb: float | None
    improvement: float | None = Field(description="best before minus this val_bpb")
    agent: str
    description: str
    finished_at: datetime | None


class RankedResult(BaseModel):
    experiment_id: int
    commit: str
    val_bpb: float
    status: ExperimentStatus
    agent: str
    description: str


class AgentStanding(BaseModel):
    agent: str
    submitted: int
    queued: int
    running: int
    kept: int
    reverted: int = Field(description="measured but not kept (reverted, rebased or stale)")
    failed: int = Field(
        description="ended without a valid result: crashes, invalid runs, infrastructure failures"
    )
    best_val_bpb: float | None
    improvement: float = Field(description="total val_bpb this agent's kept experiments took off the best")
    last_submitted_at: datetime | None
    integrity_events: list[int] = Field(
        default_factory=list,
        description="its integrity events not cleared (GET /integrity-events); while any is, its queued "
        "experiments are held",
    )


class NoiseOut(BaseModel):
    """The run-to-run noise of val_bpb of one track on one platform and harness."""

    track: str | None = Field(None, description="its track (null: a server before tracks)")
    platform: str
    harness_id: str
    sigma: float | None = Field(
        description="pooled standard deviation of val_bpb between runs of one train.py"
    )
    df: int = Field(
        description="degrees of freedom: the sum over experiments of their valid runs minus one, less one "
        "for each worker offset fitted on them"
    )
    runs: int = Field(description="valid runs it rests on (of experiments with several)")
    experiments: int = Field(description="experiments with several valid runs")
    current: bool = Field(description="the track's platform and harness: the estimate decisions use")
    updated_at: datetime
    offsets: dict[str, float] = Field(
        default_factory=dict,
        description="on a fleet, each worker's offset now (by name): how much worse than the fleet its "
        'runs read, taken off every run before it is compared (docs/api.md, "Decisions")',
    )


class RuleOut(BaseModel):
    decision_rule: Rule
    alpha: float
    min_delta: float
    noise_runs: int
    best_repeats: int
    max_runs: int
    screen_margin: float
    futility_margin: float
    best_rerun_every: int


class NoiseListOut(BaseModel):
    rule: RuleOut
    estimates: list[NoiseOut]


class LeaderboardOut(BaseModel):
    best: BestOut
    noise: NoiseOut | None = Field(description="the noise estimate of the track's platform and harness")
    lineage: list[LineageEntry]
    top: list[RankedResult]
    agents: list[AgentStanding]


class ChildrenOut(BaseModel):
    commit: str
    experiment_id: int | None
    children: list[ExperimentOut]


class AgentsOut(BaseModel):
    agents: list[AgentStanding]


class IntegrityEventOut(BaseModel):
    """A run that ended in an integrity class: what it was, its evidence, and whether it was cleared."""

    id: int
    agent: str
    experiment_id: int
    run: int
    error_class: str = Field(description="non_causal or score_over_budget (docs/runner.md)")
    evidence: str | None = Field(description="the harness's message: which check failed, with its figures")
    result_id: str = Field(description="the run's result, kept: GET /experiments/{experiment_id} and its log")
    created_at: datetime
    cleared_at: datetime | None
    cleared_by: str | None
    clear_note: str | None = Field(description="why the admin cleared it")


class IntegrityEventsOut(BaseModel):
    items: list[IntegrityEventOut] = Field(description="newest first")


class ClearIn(Strict):
    """An admin clears an integrity event: the agent's queued experiments run again once none is open."""

    note: Text = Field(min_length=1, max_length=2000, description="why it is cleared (kept with the event)")


class CancelOut(BaseModel):
    experiment: ExperimentOut


class ImportOut(BaseModel):
    imported: int
    skipped: int


class HealthOut(BaseModel):
    status: Literal["ok"]
    database: str
    research_repo: str


# Notes ----------------------------------------------------------------------------------------

NOTE_MAX_CHARS = 2000  # a finding or a plan in a few sentences; a longer argument is a hypothesis


class NoteIn(Strict):
    """A note for the other agents: one finding, hypothesis or plan, optionally about an experiment
    or a commit."""

    text: Annotated[Text, Field(min_length=1, max_length=NOTE_MAX_CHARS)] = Field(
        description="the note, e.g. 'hypothesis: a longer warmup helps at depth 8; trying 3 variants'"
    )
    experiment_id: int | None = Field(None, ge=1, le=MAX_INT, description="the experiment it is about")
    commit: Sha | None = Field(None, description="the commit it is about (full or abbreviated id)")


class NoteOut(BaseModel):
    id: int
    author: str
    text: str
    experiment_id: int | None
    commit: str | None = Field(description="full commit id")
    created_at: datetime


class NotePage(BaseModel):
    items: list[NoteOut]
    next_cursor: str | None


# Workers --------------------------------------------------------------------------------------


class RegisterIn(Strict):
    name: Name
    device: Annotated[Text, Field(min_length=1, max_length=200)]
    memory_gb: float = Field(ge=0, le=1e6)
    harness_id: Annotated[Text, Field(min_length=1, max_length=128)]
    preset: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")] | None = Field(
        None, description="the worker's harness preset: a track of another preset does not accept it"
    )


class RegisterOut(BaseModel):
    worker_id: str
    harness_id: str
    platform: str
    lease_seconds: float
    heartbeat_seconds: float
    tracks: list[str] = Field(default_factory=list, description="the tracks this worker serves")


class ClaimIn(Strict):
    worker_id: Annotated[Text, Field(min_length=1, max_length=36)]
    wait_s: float = Field(0.0, ge=0, le=30)


class ClaimOut(BaseModel):
    lease_id: str
    experiment_id: int
    run: int = Field(description="the run's number within its experiment (1 = its first run)")
    seed: int = Field(description="ctx.seed for this run")
    attempt: int = Field(description="attempt of this run (a lost lease runs it again)")
    description: str
    train_py: str
    train_py_sha256: str
    lease_expires_at: datetime
    progress_seconds: float = Field(1.0, description="send progress this often (scaled to the fleet)")


class HeartbeatOut(BaseModel):
    lease_expires_at: datetime
    cancel: bool
    progress_seconds: float = Field(1.0, description="send progress this often (scaled to the fleet)")


class ProgressEventIn(ProgressEvent, Input):
    """A progress sample. A non-finite loss (a diverged run) is stored as null."""

    model_config = ConfigDict(extra="ignore")

    step: int = Field(ge=0, le=MAX_INT)
    fraction: float = Field(0.0, ge=0.0, le=1.0)
    elapsed_s: float = Field(0.0, ge=0.0, le=1e9)
    tokens_per_s: float | None = Field(None, ge=0.0, le=1e15)

    @field_validator("loss")
    @classmethod
    def _finite_or_none(cls, value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None


class ProgressIn(Strict):
    events: list[ProgressEventIn] = Field(max_length=1000)


class RunConditionsIn(RunConditions, Input):
    """The conditions as the worker's harness read them; bounded so that they can always be stored."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    speed_gflops: float | None = Field(None, ge=0.0, le=1e9)
    load_1m: float | None = Field(None, ge=0.0, le=1e6)
    gpu_sm_clock_mhz: float | None = Field(None, ge=0.0, le=1e6)
    gpu_temp_c: float | None = Field(None, ge=-100.0, le=1e3)
    gpu_power_w: float | None = Field(None, ge=0.0, le=1e6)


class RunResultIn(RunResult, Input):
    """RunResult as the worker measured it; bounded so that it can always be stored."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    error_class: ErrorClass | None = None
    error_message: Annotated[str, AfterValidator(storable_log), Field(max_length=100_000)] | None = None
    val_bpb: float | None = Field(None, ge=0.0, le=1e6)
    training_seconds: float | None = Field(None, ge=0.0, le=1e9)
    startup_seconds: float | None = Field(None, ge=0.0, le=1e9)
    score_seconds: float | None = Field(None, ge=0.0, le=1e9)
    score_bound_seconds: float | None = Field(None, ge=0.0, le=1e9)
    total_seconds: float | None = Field(None, ge=0.0, le=1e9)
    peak_memory_mb: float | None = Field(None, ge=0.0, le=1e12)
    tokens: int | None = Field(None, ge=0, le=MAX_INT)
    steps: int | None = Field(None, ge=0, le=MAX_INT)
    num_params: int | None = Field(None, ge=0, le=MAX_INT)
    mfu_percent: float | None = Field(None, ge=0.0, le=1e6)
    device: Annotated[Text, Field(min_length=1, max_length=200)] = "cpu"
    harness_id: Annotated[Text, Field(max_length=128)] = ""
    conditions: RunConditionsIn | None = None
    log_tail: Annotated[str, AfterValidator(storable_log), Field(max_length=1_000_000)] = ""


class ResultIn(Strict):
    result_id: Annotated[
        str,
        Field(
            pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
            json_schema_extra={"format": "uuid"},
            description="a UUID the worker chose for this result (the same again: the same answer)",
        ),
    ]
    result: RunResultIn


class ResultOutcome(BaseModel):
    experiment_id: int
    run: int
    decision: Decision | None
    status: ExperimentStatus
    reason: str


class ReleaseIn(Strict):
    reason: Annotated[Text, Field(max_length=2000)] = ""
    count_attempt: bool = Field(
        False,
        description="true when the run failed on this worker (the runner broke, not the candidate): "
        "the attempt counts, so an experiment that breaks every worker ends after MAX_ATTEMPTS",
    )


# Has this been tried: near misses and keep rates -----------------------------------------------


class ConstantSetOut(BaseModel):
    name: str
    old: float | None = Field(description="its value before (null: the change added it)")
    new: float | None = Field(description="its value after (null: the change removed it)")
    direction: Direction


class ChangeOut(BaseModel):
    """What a change made, as stored when it was decided."""  # server/trainpy/changes.py

    parsed: bool | None = Field(
        description="both train.py files parse; when not, its constants and regions are unknown"
    )
    constants: list[ConstantSetOut] = Field(description="the constants it set, by name")
    regions: list[str] = Field(description="the functions, classes or methods it touched, or `module`")


class NearMissOut(BaseModel):
    """A reverted experiment that may still be better than what it was measured against."""

    experiment_id: int
    agent: str
    description: str
    effect: float = Field(description="its mean val_bpb minus its reference's (negative is better)")
    se: float = Field(description="the effect's standard error")
    pooled_se: bool = Field(description="se from the pooled noise: its decision (greedy rule) stated none")
    z: float = Field(description="effect / se: the gain in standard errors (below zero); the ranking")
    runs: int = Field(description="its valid runs the effect rests on")
    reference_runs: int
    val_bpb: float | None = Field(description="the mean of its valid runs")
    reference: str | None = Field(description="the commit it was compared with (the best at the time)")
    reference_is_best: bool = Field(description="that commit is the current best")
    applies_to_best: bool = Field(description="its diff applies to the current best and changes it")
    reason: str | None = Field(description="why it was reverted")
    changes: ChangeOut
    finished_at: datetime | None


class NearMissesOut(BaseModel):
    track: str | None = Field(None, description="its track (null: a server before tracks)")
    noise_sigma: float | None = Field(description="the pooled noise, for decisions without a standard error")
    best: str | None = Field(description="the current best commit")
    items: list[NearMissOut] = Field(description="strongest evidence first (lowest `z`)")


class BestEffectOut(BaseModel):
    experiment_id: int
    effect: float = Field(description="the most negative effect measured (negative is better)")
    se: float | None


class TallyOut(BaseModel):
    tried: int = Field(description="decided experiments counted (for a kind: whose change included it)")
    measured: int = Field(description="of those, with a valid run")
    kept: int
    rate: float | None = Field(description="kept / tried")
    best: BestEffectOut | None


class KeepRateOut(TallyOut):
    """One kind of change: a constant moved one way, or a region touched."""

    part: Part
    name: str
    direction: Direction | None = Field(description="how the constant moved; null for regions")
    alone: int = Field(description="tried as the change's only constant (or its only region)")


class KeepRateTotalsOut(TallyOut):
    unparsed: int = Field(description="of those, changes whose train.py did not parse: in no kind")


class KeepRatesOut(BaseModel):
    track: str | None = Field(None, description="its track (null: a server before tracks)")
    platform: str | None
    harness_id: str | None
    overall: KeepRateTotalsOut
    kinds_total: int = Field(description="kinds that match the filters, before `limit`")
    kinds: list[KeepRateOut] = Field(description="most tried first")


# Has this been tried? (server/rules/similarity.py: the rule; docs/api.md, "Similar experiments")


class SimilarIn(Strict):
    """A change not submitted: which experiments made the same or nearly the same one?"""

    model_config = ConfigDict(json_schema_extra=SubmitIn.model_config.get("json_schema_extra"))

    base: Sha | None = Field(
        None, description="commit the change is made on; default: the current best of the track"
    )
    patch: Text | None = Field(None, description="unified diff of train.py against base")
    train_py: Text | None = Field(None, description="the whole new train.py (instead of patch)")
    edits: Edits | None = None
    track: TrackName | None = Field(None, description="its track (default: base's, else the only one)")


class SimilarExperiment(BaseModel):
    """An experiment whose change resembles the one asked about, with its outcome."""

    experiment_id: int
    track: str | None = Field(None, description="the track it ran on (null: a server before tracks)")
    kind: SimilarityKind = Field(description="how it resembles it (docs/api.md, 'Similar experiments')")
    distance: float = Field(description="0: the same; up to the kind's threshold")
    detail: str = Field(description="what is alike, in words")
    same_base: bool = Field(description="made on the same base commit")
    status: ExperimentStatus
    decision: Decision | None
    val_bpb: float | None = Field(description="the mean of its valid runs")
    valid_runs: int
    effect: float | None = Field(description="its latest judgement's effect (mean minus reference mean)")
    se: float | None = Field(description="the effect's standard error")
    agent: str
    description: str
    base: str | None
    commit: str


class SimilarOut(BaseModel):
    experiment_id: int | None = Field(description="the experiment asked about; null for a proposed change")
    similar: list[SimilarExperiment] = Field(description="most alike first")


class SubmitOut(ExperimentOut):
    """The experiment submitted, and the earlier experiments whose change resembles its own."""

    similar: list[SimilarExperiment] = Field(description="earlier experiments, most alike first")


# Tracks (docs/api.md, "Tracks") ---------------------------------------------------------------


class TrackIn(Strict):
    """A new track (admin): its name, preset and platforms; its baseline is the first track's
    baseline train.py and program.md unless given."""

    name: TrackName
    preset: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")] | None = Field(
        None, description="the harness preset its workers run (a worker of another preset is not accepted)"
    )
    platforms: Annotated[Text, Field(min_length=1, max_length=200)] | None = Field(
        None,
        description="the devices that may serve it: device names or fnmatch patterns, comma-separated "
        "(`NVIDIA H100*`); default: any; the first worker accepted pins its device as the platform",
    )
    platform: Annotated[Text, Field(min_length=1, max_length=200)] | None = Field(
        None, description="pins the platform now (a device name workers report)"
    )
    harness_id: Annotated[Text, Field(min_length=1, max_length=128)] | None = Field(
        None, description="pins the harness id now (else the first worker accepted pins it)"
    )
    train_py: Annotated[Text, Field(min_length=1)] | None = Field(
        None, description="its baseline train.py (default: the first track's baseline)"
    )
    program_md: Annotated[Text, Field(min_length=1, max_length=200_000)] | None = Field(
        None, description="its program.md, the rules its agents follow (default: the first track's)"
    )


class TrackOut(BaseModel):
    name: str
    preset: str | None
    platforms: str | None = Field(description="the devices that may serve it (null: any)")
    platform: str | None = Field(description="the platform it measures on (null until a worker pins it)")
    harness_id: str | None
    branch: str = Field(description="its best's branch in the research repo")
    baseline: str | None = Field(description="its baseline commit")
    best: str | None = Field(description="its best commit")
    best_experiment_id: int | None
    experiments: int
    queued: int = Field(description="its runs waiting for a worker")
    workers: int = Field(description="workers online that serve it")
    created_at: datetime
    archived_at: datetime | None


class TracksOut(BaseModel):
    tracks: list[TrackOut] = Field(description="the first track first")


class PortIn(Strict):
    """Carry a kept change of one track to another, to be decided there on its own runs."""

    track: TrackName = Field(description="the track to port it to")
    description: Annotated[Text, Field(min_length=1, max_length=500)] | None = Field(
        None, description="default: the origin's description"
    )


class TransferTrack(BaseModel):
    """A change's outcome on one track: its latest decided (else newest) experiment there."""

    track: str
    experiment_id: int
    status: ExperimentStatus
    decision: Decision | None
    effect: float | None = Field(description="mean val_bpb minus its reference's (negative is better)")
    se: float | None = Field(description="the effect's standard error (null under the greedy rule)")
    runs: int | None = Field(description="its valid runs the effect rests on")
    reference_runs: int | None
    val_bpb: float | None
    ported_from: int | None


class TransferItem(BaseModel):
    """One change (the same lines removed and added) tried on more than one track."""

    description: str = Field(description="the first experiment's")
    agent: str = Field(description="who tried it first")
    first_experiment_id: int
    tracks: list[TransferTrack] = Field(description="one per track, in track order")


class TransferOut(BaseModel):
    items: list[TransferItem] = Field(description="newest change first")
