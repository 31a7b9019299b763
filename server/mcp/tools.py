"""The MCP server agents use (the official `mcp` SDK's MCPServer): tools that mirror what an agent
does, each one or a few calls of the Python SDK (`client.Client`) against the REST API.

Going through the REST API keeps one implementation of every rule: authentication, validation,
limits and errors are the routes' own, and a tool answers what the API would. A tool's
inputs are the fields of the request body (`SubmitIn`, `NoteIn`, `SimilarIn`) or of the query
parameters (`ExperimentsQuery`, `NotesQuery`, ... in server/api/params.py) of the route it calls:
same names, types, limits and descriptions (tests/server/test_mcp_schemas.py), but a listing
tool's first page is shorter. The tools return the API's response models (protocol/schemas.py,
which the Python SDK returns too), which the MCP SDK publishes as their output schemas; lists of
experiments carry the fields asked for, and loss curves a few points. Every answer is sent short
(server.mcp.answers).

Two transports serve these tools: stdio (`autoresearch mcp`, cli/mcp.py) and streamable HTTP at
/mcp in the server itself (server/mcp/http.py). Each gives `build_mcp` its way to reach the API
for the request at hand (`Connect`).

An API error becomes an MCP tool error (`isError`) whose text is the problem's kind and status, then
its detail (`patch-does-not-apply (422): hunk 1 ...`), with the problem+json body (and its `kind`)
as structured content. An answer the SDK could not read as its model (`SchemaError`) is the tool
error `answer-not-understood`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent, Tool, ToolAnnotations
from pydantic import AfterValidator, BaseModel, Field, ValidationError, WithJsonSchema, create_model
from pydantic.fields import FieldInfo

from client import ApiError, ArgumentsError, Client, SchemaError
from client.api import Submitted
from protocol.schemas import (
    BestOut,
    CancelOut,
    ExperimentOut,
    KeepRatesOut,
    LeaderboardOut,
    NearMissesOut,
    NoiseListOut,
    NoteIn,
    NoteOut,
    NotePage,
    ProgressOut,
    SimilarExperiment,
    SimilarIn,
    SimilarOut,
    SubmitIn,
    TrackName,
    TracksOut,
    TransferOut,
)
from protocol.spread import spread
from protocol.states import FINAL_STATUSES, ExperimentStatus
from server.api.params import ExperimentsQuery, KeepRatesQuery, NearMissesQuery, NotesQuery, TrackField
from server.mcp.answers import BRIEF_FIELDS, CURVE_POINTS, MCP_PAGE, compact_text, listed_input, rounded
from server.mcp.arguments import unknown_arguments
from server.mcp.waits import MAX_WAIT_S, Notify, follow, next_step, notifier, pending
from server.rules.failures import shown_once

# A client of the REST API for the call at hand (the caller's token; closed after the call).
Connect = Callable[[], Client]

INSTRUCTIONS = """\
An autoresearch server: agents submit changes of train.py, GPU workers run each for a fixed time
budget, and the server keeps a change only when it beats the best by more than the run-to-run
noise. Before proposing, read `best`, recent `notes` and `search` (what was tried,
kept, reverted), and ask `similar` (has this been tried?); after a finding, leave one `post_note`. Submit
with `submit` (it answers at once with the experiment's id), watch a run with `progress`, wait
for decisions with `wait`, and `cancel` a change of yours that is no longer worth its GPU time.
`near_misses` lists changes that measured a gain too small to keep (candidates to combine);
`keep_rates` says which kinds of change (a constant up or down, a region) were tried and kept.
A server may hold several tracks (a preset on one kind of hardware, each with its own best):
`tracks` lists them; name yours as `track` where a tool takes one (with one track it is the
default). `port` carries a kept change to another track, `transfer` shows how changes fared on each."""

# What a client may assume of each tool (so that it can run the reads without asking): the reads
# change nothing; submit queues at most one experiment per train.py (the same one again returns
# it); post_note adds a note each call. None reaches beyond this server.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = {"read_only_hint": False, "destructive_hint": False, "open_world_hint": False}
SUBMITS = ToolAnnotations(idempotent_hint=True, **WRITES)
POSTS = ToolAnnotations(idempotent_hint=False, **WRITES)
# Cancelling ends an experiment for good (an admin may queue it again); twice is once.
CANCELS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

RESEARCH_LOOP = """\
You are one of the agents improving train.py on this server. Read the rules first: the resource
{rules} (program.md: the train.py contract, the time budget, what the sandbox allows, how a change
is decided).

The best so far: {best}; its train.py is the resource {best_train_py}.

Loop: read the recent `notes` and `near_misses`, pick one change, ask `similar` (has this been
tried?), `submit` it, watch it with `progress` and `wait` until it is decided (each call answers
within {max_wait:g} s: call again while it is pending), and leave a `post_note` with what you learned. A
change is kept only when it beats the best by more than the run-to-run noise (`noise`).

The tools: {tools}."""


def best_in_words(best: BestOut) -> str:
    """`val_bpb 2.4469 ± 0.0012 (5 runs, experiment 1)`, numbers rounded as answers are."""
    if best.val_bpb is None:
        return f"not measured yet (experiment {best.experiment_id})"
    se = f" ± {rounded(best.se)}" if best.se is not None else ""
    return f"val_bpb {rounded(best.val_bpb)}{se} ({best.runs} runs, experiment {best.experiment_id})"


class ProgressReport(BaseModel):
    """A run's progress so far beside the best's, to compare the two loss curves."""

    experiment: ProgressOut
    best: ProgressOut | None = Field(description="the best's latest run with progress (null: none yet)")


# The fields of an experiment a list can be asked for (those of the tool `experiment`'s answer).
FIELD_NAMES = tuple(ExperimentOut.model_fields)


def known_field(name: str) -> str:
    if name not in FIELD_NAMES:
        raise ValueError(f"{name!r} is not a field of an experiment; choose from {', '.join(FIELD_NAMES)}")
    return name


ExperimentField = Annotated[
    str, AfterValidator(known_field), WithJsonSchema({"type": "string", "enum": list(FIELD_NAMES)})
]
Fields = Annotated[
    list[ExperimentField] | None,
    Field(description=f"the fields of each experiment to answer (default: {', '.join(BRIEF_FIELDS)})"),
]


def brief(experiment: ExperimentOut, fields: list[str] | None) -> dict[str, Any]:
    return experiment.model_dump(mode="json", include=set(fields or BRIEF_FIELDS))


class ExperimentList(BaseModel):
    """A page of experiments, each with the fields asked for."""

    items: list[dict[str, Any]] = Field(description="each experiment's chosen fields")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page (null: the last page)")


class WaitReport(BaseModel):
    """The experiments that are decided (or ended) and those still pending when `wait` answered."""

    decided: list[dict[str, Any]] = Field(description="each decided experiment's chosen fields")
    pending: dict[int, ExperimentStatus] = Field(description="experiment id: its status now")
    next_step: str = Field("", description="how to go on while some are pending")


class ExperimentReport(BaseModel):
    """An experiment as an agent follows it: the API's view, its change and the end of its log."""

    experiment: ExperimentOut
    decided: bool = Field(description="its status is final")
    next_step: str = Field("", description="how to go on while it is not decided")
    existing: bool = Field(False, description="the same train.py had been submitted: this is that experiment")
    diff: str = Field("", description="unified diff of train.py against its base")
    log_tail: str = Field("", description="the last lines of its latest run's log")
    similar: list[SimilarExperiment] = Field(
        default_factory=list,
        description="when just submitted: earlier experiments whose change resembles it, with outcomes",
    )


def problem_result(kind: str, status: int | None, detail: str, problem: dict[str, Any]) -> CallToolResult:
    """A tool error: the text `kind (status): detail`, and the API's problem+json as structured content."""
    head = f"{kind} ({status})" if status is not None else kind
    return CallToolResult(
        content=[TextContent(type="text", text=f"{head}: {detail}")],
        structured_content={**problem, "kind": kind},
        is_error=True,
    )


class BadArguments(Exception):
    """Arguments that pass a tool's input schema but not together (the message names them)."""


def api_errors(tool: Callable[..., Any]) -> Callable[..., Any]:
    """Answer an API error (or no answer) as a tool error that carries the problem's kind and detail."""

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except BadArguments as error:
            return problem_result("bad-arguments", None, str(error), {"detail": str(error)})
        except ApiError as error:
            kind = error.type.rsplit("/", 1)[-1] or "http-error"
            return problem_result(kind, error.status, error.detail or error.title, error.problem)
        except httpx.HTTPError as error:
            detail = f"no answer from the server ({type(error).__name__}: {error})"
            return problem_result("server-unreachable", None, detail, {"detail": detail})
        except SchemaError as error:
            problem = {"detail": str(error), "endpoint": error.endpoint, "model": error.model}
            return problem_result("answer-not-understood", None, str(error), problem)

    return call


def bad_arguments(tool: str, errors: list[dict[str, str]]) -> CallToolResult:
    """The tool error `bad-arguments`: each argument (`argument`) and what is wrong with it (`problem`)."""
    detail = "; ".join(f"{e['argument'] or 'arguments'}: {e['problem']}" for e in errors)
    return problem_result("bad-arguments", None, f"{tool}: {detail}", {"detail": detail, "errors": errors})


class AutoresearchMCP(MCPServer):
    """The SDK's server, with arguments a tool does not take, or that fail its input schema,
    answered as the tool error `bad-arguments`: which argument and why, in words (an unknown one
    with the argument it probably meant: server.mcp.arguments), not pydantic's raw text and its
    link; and every answer short (server.mcp.answers: compact text, rounded numbers)."""

    _arguments: dict[str, frozenset[str]] | None = None

    async def list_tools(self) -> list[Tool]:
        """The tools as an agent reads them: short (server.mcp.answers, `listed_input`)."""
        return [
            tool.model_copy(update={"input_schema": listed_input(tool.input_schema), "output_schema": None})
            for tool in await super().list_tools()
        ]

    async def arguments_of(self, tool: str) -> frozenset[str] | None:
        """The arguments `tool` takes (None: no such tool)."""
        if self._arguments is None:
            self._arguments = {
                t.name: frozenset(t.input_schema.get("properties", {})) for t in await self.list_tools()
            }
        return self._arguments.get(tool)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        known = await self.arguments_of(name)
        if known is not None and (unknown := unknown_arguments(arguments, known)):
            return bad_arguments(name, unknown)
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as error:
            if not isinstance(error.__cause__, ValidationError):
                raise
            errors = [
                {"argument": ".".join(str(part) for part in e["loc"]), "problem": e["msg"]}
                for e in error.__cause__.errors(include_url=False)
            ]
            return bad_arguments(name, errors)
        if not isinstance(result, CallToolResult) or result.is_error or result.structured_content is None:
            return result
        structured = rounded(result.structured_content)
        return CallToolResult(
            content=[TextContent(type="text", text=compact_text(structured))], structured_content=structured
        )


def read_text(connect: Connect, fetch: Callable[[Client], str]) -> str:
    """A resource's text from the API; an API error becomes the resource error `kind (status): detail`."""
    try:
        with connect() as client:
            return fetch(client)
    except ApiError as error:
        kind = error.type.rsplit("/", 1)[-1] or "http-error"
        raise ResourceError(f"{kind} ({error.status}): {error.detail or error.title}") from error


def experiment_number(experiment_id: str) -> int:
    if not experiment_id.isdigit() or not 1 <= int(experiment_id) <= 2**62:
        raise ResourceError(f"bad-experiment-id: {experiment_id!r} is not an experiment id (1, 2, ...)")
    return int(experiment_id)


def paged(query: type[BaseModel]) -> type[BaseModel]:
    """`query` with its `limit` defaulting to MCP_PAGE (its bounds and description kept)."""
    field = query.model_fields["limit"]
    assert field.annotation is not None
    limit = FieldInfo.merge_field_infos(field, default=MCP_PAGE)
    return create_model(f"Paged{query.__name__}", __base__=query, limit=(field.annotation, limit))


def takes_fields_of(model: type[BaseModel]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a tool whose body takes `**fields` the fields of `model` as its inputs, so that the MCP
    input schema is the REST API's request body (types, limits, descriptions), flat."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        fields = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[field.annotation, field],
                default=inspect.Parameter.empty if field.is_required() else field.default,
            )
            for name, field in model.model_fields.items()
        ]
        fn.__signature__ = signature.replace(parameters=[*own, *fields])  # type: ignore[attr-defined]
        return fn

    return decorate


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def report(
    client: Client,
    experiment: ExperimentOut,
    wait_s: float,
    max_wait_s: float,
    log_lines: int,
    notify: Notify,
    submitted: Submitted | None = None,
) -> ExperimentReport:
    """The experiment once final or after `wait_s`, at most `max_wait_s` (telling its progress
    meanwhile), with its diff and log tail (and, when it was just `submitted`, whether it existed
    and what it resembles). A crash's traceback is shown once: in the log tail when it holds it."""
    (experiment,) = follow(client, [experiment.id], min(wait_s, max_wait_s), notify, [experiment])
    log_tail = tail(client.log(experiment.id), log_lines)
    if experiment.result is not None and experiment.result.error_message:
        message = shown_once(experiment.result.error_message, log_tail)
        result = experiment.result.model_copy(update={"error_message": message})
        experiment = experiment.model_copy(update={"result": result})
    return ExperimentReport(
        experiment=experiment,
        decided=experiment.status in FINAL_STATUSES,
        next_step=next_step(pending([experiment]), max_wait_s),
        existing=submitted is not None and submitted.existing,
        diff=client.diff(experiment.id),
        log_tail=log_tail,
        similar=[] if submitted is None else submitted.similar,
    )


ExperimentId = Annotated[int, Field(ge=1, le=2**62)]
TrackArg = TrackField


# The tool `search`: GET /experiments's query, and the fields to answer.
SearchArgs = create_model("SearchArgs", __base__=paged(ExperimentsQuery), fields=(Fields, None))


class SimilarArgs(SimilarIn):
    """The tool `similar`: an experiment, or a change not submitted (POST /similar's body)."""

    experiment_id: ExperimentId | None = Field(
        None, description="an experiment: the others that made its change (instead of a change)"
    )


RunNumber = Annotated[int, Field(ge=1, le=10_000, description="a run's number (default: the latest)")]
WaitS = Annotated[
    float,
    Field(
        ge=0,
        le=3600,
        description="seconds to wait for the decision; a call waits at most as its description says",
    ),
]
LogLines = Annotated[int, Field(ge=0, le=2000, description="lines of the log's end to return")]


def build_mcp(connect: Connect, max_wait_s: float = MAX_WAIT_S, **options: Any) -> MCPServer:
    """The MCP server with every tool; `connect` gives each call its API client; no call waits
    longer than `max_wait_s` (server.mcp.waits); `options` go to MCPServer (the HTTP transport's
    authentication)."""
    # WARNING: the SDK configures the root logger when none is set; the server keeps its own level.
    mcp = AutoresearchMCP(
        name="autoresearch",
        version=importlib.metadata.version("autoresearch-server"),
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        **options,
    )

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Any]:
        """`mcp.tool`, described by the function's docstring on one line, with the cap on waits."""

        def register(fn: Callable[..., Any]) -> Any:
            text = " ".join((fn.__doc__ or "").split()).replace("MAX_WAIT", f"{max_wait_s:g} s")
            return mcp.tool(annotations=annotations, description=text)(fn)

        return register

    @tool(READ_ONLY)
    @api_errors
    def best(
        train_py: Annotated[bool, Field(description="with the whole train.py (default: without)")] = False,
        track: TrackArg = None,
    ) -> BestOut:
        """The current best of a track: its val_bpb (the mean of its runs ± its standard error),
        runs, commit and experiment; its train.py when asked (`train_py`), or as the resource
        autoresearch://best/train.py. Start every change from that train.py."""
        with connect() as client:
            found = client.best(track)
        return found if train_py else found.model_copy(update={"train_py": ""})

    @tool(SUBMITS)
    @api_errors
    @takes_fields_of(SubmitIn)
    def submit(
        ctx: Context, wait_s: WaitS = 0.0, log_lines: LogLines = 40, **change: Any
    ) -> ExperimentReport:
        """Submit a change of train.py with a one-line description: search/replace `edits`
        ([{old, new}], each `old` copied exactly from the base and occurring once; the most
        reliable form), a unified diff `patch` against `base` (default the best), or a whole
        `train_py`. Answers at once with the experiment (its
        id, queued); with `wait_s`, first waits that long for the decision, at most MAX_WAIT: kept
        (it beat the best beyond the noise) or not, with effect ± noise and the reason. The same
        train.py submitted again returns the existing experiment (`existing`). While it waits, it
        sends progress notifications."""
        with connect() as client:
            submitted = client.submit(**{k: v for k, v in change.items() if v is not None})
            return report(client, submitted, wait_s, max_wait_s, log_lines, notifier(ctx), submitted)

    @tool(READ_ONLY)
    @api_errors
    def experiment(
        ctx: Context,
        experiment_id: ExperimentId,
        wait_s: WaitS = 0.0,
        log_lines: LogLines = 40,
    ) -> ExperimentReport:
        """One experiment: status, decision and its reason (effect ± noise, runs), result, its diff
        and the end of its log; with `wait_s`, first wait that long for its decision, at most
        MAX_WAIT (sending progress notifications meanwhile)."""
        with connect() as client:
            experiment = client.experiment(experiment_id)
            return report(client, experiment, wait_s, max_wait_s, log_lines, notifier(ctx))

    @tool(READ_ONLY)
    @api_errors
    def wait(
        ctx: Context,
        experiment_ids: Annotated[list[ExperimentId], Field(min_length=1, max_length=50)],
        wait_s: WaitS = 3600,
        fields: Fields = None,
    ) -> WaitReport:
        """Wait until one of `experiment_ids` that is pending is decided (or ended), or all are,
        for at most `wait_s` and at most MAX_WAIT (call again to wait longer: `next_step`);
        answers the decided ones (their `fields`; `experiment` has all of one) and the status of
        the pending ones. Sends progress notifications of the first pending one meanwhile."""
        with connect() as client:
            seen = follow(client, experiment_ids, min(wait_s, max_wait_s), notifier(ctx))
        still = pending(seen)
        return WaitReport(
            decided=[brief(e, fields) for e in seen if e.id not in still],
            pending=still,
            next_step=next_step(still, max_wait_s),
        )

    @tool(READ_ONLY)
    @api_errors
    def progress(
        experiment_id: ExperimentId,
        run: RunNumber | None = None,
        points: Annotated[
            int, Field(ge=1, le=1000, description="samples of each curve, evenly spaced, the latest included")
        ] = CURVE_POINTS,
    ) -> ProgressReport:
        """A run's progress so far (default its latest run with any): phase, step, loss and the
        share of the budget used at `points` samples, beside the best's latest run, to compare the
        two loss curves while it trains."""
        with connect() as client:
            mine = client.progress(experiment_id, run)
            best_id = client.best(client.experiment(experiment_id).track).experiment_id
            best = client.progress(best_id) if best_id is not None and best_id != experiment_id else None
            return ProgressReport(
                experiment=mine.model_copy(update={"events": spread(mine.events, points)}),
                best=None
                if best is None
                else best.model_copy(update={"events": spread(best.events, points)}),
            )

    @tool(CANCELS)
    @api_errors
    def cancel(experiment_id: ExperimentId) -> CancelOut:
        """Cancel an experiment of yours: queued, it never runs; running, its run is stopped and
        its worker goes on to the next. A decided experiment cannot be cancelled; a cancelled one is
        answered as it is (twice is once)."""
        with connect() as client:
            return client.cancel(experiment_id)

    @tool(READ_ONLY)
    @api_errors
    @takes_fields_of(SearchArgs)
    def search(**query: Any) -> ExperimentList:
        """Experiments, newest first, filtered by status, agent, text, the constant a change set
        (`constant="MATRIX_LR"`) or text of the lines it changed: what was tried, kept, reverted or
        failed, before you try it again. Each with its `fields`; pages of `limit`, the next from
        `cursor`."""
        fields = query.pop("fields")
        with connect() as client:
            page = client.search(**query)
            return ExperimentList(items=[brief(e, fields) for e in page.items], next_cursor=page.next_cursor)

    @tool(READ_ONLY)
    @api_errors
    def leaderboard(track: TrackArg = None) -> LeaderboardOut:
        """A track's best, noise, lineage of kept changes, best results and each agent's standing."""
        with connect() as client:
            return client.leaderboard(track)

    @tool(READ_ONLY)
    @api_errors
    def noise(track: TrackArg = None) -> NoiseListOut:
        """The decision rule's settings and the run-to-run noise of val_bpb of a track: an effect
        smaller than the noise is not evidence."""
        with connect() as client:
            return client.noise(track)

    # Tracks: one preset on one kind of hardware each -------------------------------------------

    @tool(READ_ONLY)
    @api_errors
    def tracks() -> TracksOut:
        """The tracks, each a preset on one kind of hardware with its own best."""
        with connect() as client:
            return client.tracks()

    @tool(SUBMITS)
    @api_errors
    def port(ctx: Context, experiment_id: ExperimentId, track: TrackName) -> ExperimentReport:
        """Carry a kept change to another `track`: onto its best, decided on its own runs."""
        with connect() as client:
            ported = client.port(experiment_id, track)
            return report(client, ported, 0.0, max_wait_s, 0, notifier(ctx), ported)

    @tool(READ_ONLY)
    @api_errors
    def transfer() -> TransferOut:
        """Changes tried on several tracks: effect ± se on each."""
        with connect() as client:
            return client.transfer()

    @tool(READ_ONLY)
    @api_errors
    @takes_fields_of(paged(NotesQuery))
    def notes(**query: Any) -> NotePage:
        """Notes agents and people left (findings, hypotheses, plans), newest first. Read the
        recent ones before proposing."""
        with connect() as client:
            return client.notes(**query)

    @tool(POSTS)
    @api_errors
    @takes_fields_of(NoteIn)
    def post_note(**note: Any) -> NoteOut:
        """Leave a note for the other agents: one per finding, tied to the experiment or commit it
        is about."""
        with connect() as client:
            return client.post_note(**note)

    # Has this been tried: near misses and keep rates ------------------------------------------

    @tool(READ_ONLY)
    @api_errors
    @takes_fields_of(paged(NearMissesQuery))
    def near_misses(**query: Any) -> NearMissesOut:
        """Changes that were measured and not kept although they measured better than what they
        were measured against (a gain short of significance), strongest evidence first (z =
        effect / se), with effect ± se, runs, the constants and regions each changed, and whether
        its diff still applies to the best: candidates to combine into one change."""
        with connect() as client:
            return client.near_misses(**query)

    @tool(READ_ONLY)
    @api_errors
    @takes_fields_of(paged(KeepRatesQuery))
    def keep_rates(**query: Any) -> KeepRatesOut:
        """What was tried and what helped, by kind of change: per constant and direction (`LR up`,
        `LR down`) and per region of train.py (a function, class or method, or `module`), how many
        decided experiments tried it, were measured, were kept, and the best effect seen."""
        with connect() as client:
            return client.keep_rates(**query)

    # Has this been tried? ------------------------------------------------------------------

    @tool(READ_ONLY)
    @api_errors
    @takes_fields_of(SimilarArgs)
    def similar(**given: Any) -> SimilarOut:
        """Has this been tried? Before submitting a change (`edits` or a `patch` against `base`,
        default the best, or a whole `train_py`), or for an experiment (`experiment_id`): the
        experiments that made the same change, or nearly, most alike first, with their outcomes.
        Nothing is submitted. Skip or rethink a change that was already measured."""
        experiment_id = given.pop("experiment_id")
        with connect() as client:
            try:
                return client.similar(experiment_id, **given)
            except ArgumentsError as error:  # the SDK's rule: one or the other
                raise BadArguments(f"similar: {error}") from error

    # Resources: what an agent reads, as plain text ----------------------------------------------

    @mcp.resource(
        "autoresearch://rules",
        name="rules",
        mime_type="text/markdown",
        description="program.md: the rules every agent follows (the train.py contract, the time budget, "
        "what the sandbox allows, how decisions are made). Read it first.",
    )
    def rules() -> str:
        return read_text(connect, lambda client: client.program_md())

    @mcp.resource(
        "autoresearch://tracks/{track}/rules",
        name="a track's rules",
        mime_type="text/markdown",
        description="program.md of track `track`: the rules its agents follow.",
    )
    def track_rules(track: str) -> str:
        return read_text(connect, lambda client: client.program_md(track))

    @mcp.resource(
        "autoresearch://tracks/{track}/best/train.py",
        name="a track's best train.py",
        mime_type="text/x-python",
        description="The current best train.py of track `track`.",
    )
    def track_best_train_py(track: str) -> str:
        return read_text(connect, lambda client: client.best(track).train_py)

    @mcp.resource(
        "autoresearch://best/train.py",
        name="best train.py",
        mime_type="text/x-python",
        description="The current best train.py, as plain text: start every change from it.",
    )
    def best_train_py() -> str:
        return read_text(connect, lambda client: client.best().train_py)

    @mcp.resource(
        "autoresearch://results.tsv",
        name="results.tsv",
        mime_type="text/tab-separated-values",
        description="Every result, oldest first: commit, val_bpb, memory_gb, status, description.",
    )
    def results_tsv() -> str:
        return read_text(connect, lambda client: client.results_tsv())

    @mcp.resource(
        "autoresearch://experiments/{experiment_id}/train.py",
        name="an experiment's train.py",
        mime_type="text/x-python",
        description="The whole train.py of experiment `experiment_id`.",
    )
    def experiment_train_py(experiment_id: str) -> str:
        return read_text(connect, lambda client: client.train_py(experiment_number(experiment_id)))

    @mcp.resource(
        "autoresearch://experiments/{experiment_id}/diff",
        name="an experiment's diff",
        mime_type="text/x-diff",
        description="The unified diff of experiment `experiment_id`'s train.py against its base.",
    )
    def experiment_diff(experiment_id: str) -> str:
        return read_text(connect, lambda client: client.diff(experiment_number(experiment_id)))

    @mcp.prompt(
        name="research_loop",
        description="Start a research loop: where the rules are, the best so far, and the loop to follow.",
    )
    async def research_loop(track: str | None = None) -> str:
        tools = ", ".join(f"`{t.name}`" for t in await mcp.list_tools())
        rules, train_py = (
            ("autoresearch://rules", "autoresearch://best/train.py")
            if track is None
            else (f"autoresearch://tracks/{track}/rules", f"autoresearch://tracks/{track}/best/train.py")
        )

        def state(client: Client) -> str:
            best = best_in_words(client.best(track))
            if track is not None:
                best = f"{best} on track {track} (name it as `track` in every tool call)"
            return RESEARCH_LOOP.format(
                rules=rules, best=best, best_train_py=train_py, max_wait=max_wait_s, tools=tools
            )

        return await anyio.to_thread.run_sync(read_text, connect, state)

    return mcp
