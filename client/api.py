"""`Client`: the autoresearch REST API from Python (agents, the CLI and the worker use it).

Every method returns the answer documented in docs/api.md as the server's own response model
(protocol/schemas.py), so both ends of the protocol share one typed definition. It raises `ApiError`
(with the problem+json body) on an error status, and `SchemaError` when a successful answer is not
that model. Transport errors are httpx's own (`httpx.TransportError`), so callers can tell "the
server said no" from "no answer".

With `retry_for_s`, a client rides out a server restart or a database outage: for that long it
retries what cannot have been done twice. That is a request that never reached the server (a
connection refused), a `503` (the server rolled the request back), and a GET or a submission
(sent with an Idempotency-Key) that lost its answer. Agents left running overnight want this;
the worker keeps its own retry policy (spool and backoff) and leaves it off.
"""

from __future__ import annotations

import functools
import math
import ssl
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_result,
    stop_before_delay,
    wait_exponential,
)

from client.errors import ApiError, ArgumentsError, SchemaError
from protocol.events import EventType, ServerEvent, parse_stream
from protocol.schemas import (
    AgentsOut,
    BestOut,
    CancelOut,
    ChildrenOut,
    ClaimOut,
    Edit,
    ExperimentOut,
    ExperimentPage,
    HeartbeatOut,
    ImportOut,
    IntegrityEventOut,
    IntegrityEventsOut,
    KeepRatesOut,
    LeaderboardOut,
    NearMissesOut,
    NoiseListOut,
    NoteOut,
    NotePage,
    ProgressOut,
    RegisterOut,
    ResultOutcome,
    SimilarOut,
    SubmitOut,
    TrackOut,
    TracksOut,
    TransferOut,
)
from protocol.states import FINAL_STATUSES, ExperimentStatus, Part

API_PREFIX = "/api/v1"
JSON = dict[str, Any]
# An idle connection is dropped by the client well before the server closes it (the server keeps
# one 65 s: server/serving.py), so a request is never sent on a connection the server is closing
# (httpx's default, 5 s, equals uvicorn's default: a race that lost requests).
KEEP_ALIVE_EXPIRY_S = 20.0
CONNECTION_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEP_ALIVE_EXPIRY_S
)
Model = TypeVar("Model", bound=BaseModel)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (its CA bundle, SSL_CERT_FILE / SSL_CERT_DIR honoured), made once
    per process and shared by every Client: httpx would build and load a new one for each client,
    which costs more CPU than most clients' requests (docs/benchmarks.md, "Test suite")."""
    return httpx.create_ssl_context()


class Submitted(SubmitOut):
    """A submission's answer: the experiment, and whether it was there already."""

    existing: bool = Field(
        False, description="the same train.py had been submitted (200): this is that experiment"
    )


def _plain(value: BaseModel | Mapping[str, Any]) -> JSON:
    """A JSON-ready dict. NaN and infinities (a diverged loss) are not JSON: they are sent as null."""
    fields = value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in fields.items()}


_PAUSES = wait_exponential(multiplier=0.25, max=5.0)  # 0.25 s, 0.5 s, 1 s ... at most 5 s


def _raise_for_status(response: httpx.Response) -> None:
    """ApiError with the problem+json body (or what stands in for it) for an error status."""
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason_phrase, "detail": response.text[:500]}
    if not isinstance(problem, dict):
        problem = {"title": response.reason_phrase, "detail": str(problem)[:500]}
    raise ApiError(response.status_code, problem, response.request.method, str(response.url))


def parse(model: type[Model], response: httpx.Response) -> Model:
    """A successful answer as `model`; SchemaError, naming the endpoint, when it is not one."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
            for error in exc.errors()[:3]
        )
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        endpoint = f"{response.request.method} {response.request.url}"
        raise SchemaError(endpoint, model.__name__, problems + more) from exc


def _pause(state: RetryCallState) -> float:
    """The next pause: exponential, but never shorter than a 503's Retry-After."""
    pause = _PAUSES(state)
    if state.outcome is not None and not state.outcome.failed:
        after = state.outcome.result().headers.get("Retry-After", "")
        pause = max(pause, float(after)) if after.isdigit() else pause
    return pause


def _outage_policy(retry_for_s: float, repeatable: bool) -> Retrying:
    """The SDK's outage retry: a refused connection always (nothing was sent), any transport error
    when the request is repeatable, and a 503; no pause may end past `retry_for_s`. Once it gives
    up, the last answer is returned (a 503) or its error raised."""

    def lost(exc: BaseException) -> bool:
        return isinstance(exc, httpx.ConnectError) or (repeatable and isinstance(exc, httpx.TransportError))

    return Retrying(
        retry=retry_if_exception(lost) | retry_if_result(lambda response: response.status_code == 503),
        wait=_pause,
        stop=stop_before_delay(retry_for_s),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )


class Client:
    """A session with one server. `token` is an agent, worker or admin token (or None)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        retry_for_s: float = 0.0,
    ) -> None:
        self.retry_for_s = retry_for_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + API_PREFIX,
            headers=headers,
            timeout=timeout,
            limits=CONNECTION_LIMITS,
            transport=transport,
            verify=tls_context(),
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        if timeout is not None:
            kwargs["timeout"] = timeout
        response = self._request_retrying(method, path, **kwargs)
        _raise_for_status(response)
        return response

    def _request_retrying(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, retried for `retry_for_s` when that is safe (see the module's docstring)."""
        repeatable = method == "GET" or "Idempotency-Key" in kwargs.get("headers", {})
        return _outage_policy(self.retry_for_s, repeatable)(self.http.request, method, path, **kwargs)

    def _call(self, model: type[Model], method: str, path: str, **kwargs: Any) -> Model:
        return parse(model, self._send(method, path, **kwargs))

    # Agents -----------------------------------------------------------------------------------

    def submit(
        self,
        description: str,
        *,
        patch: str | None = None,
        train_py: str | None = None,
        edits: Sequence[Edit | Mapping[str, str]] | None = None,
        base: str | None = None,
        hypothesis: str | None = None,
        idempotency_key: str | None = None,
        track: str | None = None,
    ) -> Submitted:
        """Queue a change of train.py: a unified diff against `base`, a whole `train_py`, or
        search/replace `edits` ([{"old", "new"}], each `old` occurring once), on `track` (default:
        base's track, else the only track).

        Returns the experiment; `existing` is true when the same train.py was already run there.
        """
        body = {
            "description": description,
            "patch": patch,
            "train_py": train_py,
            "edits": _edits(edits),
            "base": base,
            "hypothesis": hypothesis,
            "track": track,
        }
        if idempotency_key is None and self.retry_for_s:
            idempotency_key = str(uuid.uuid4())  # a retried submission is stored once
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = self._send(
            "POST", "/experiments", json={k: v for k, v in body.items() if v is not None}, headers=headers
        )
        submitted = parse(Submitted, response)
        return submitted.model_copy(update={"existing": response.status_code == 200})

    def experiment(self, experiment_id: int) -> ExperimentOut:
        return self._call(ExperimentOut, "GET", f"/experiments/{experiment_id}")

    def search(
        self,
        *,
        track: str | None = None,
        status: ExperimentStatus | None = None,
        agent: str | None = None,
        base: str | None = None,
        since: str | None = None,
        text: str | None = None,
        constant: str | None = None,
        line: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExperimentPage:
        """Experiments matching the filters, one page (`items`, `next_cursor`), newest first.
        `track`: one track's (default: every track's); `text`: words the description or hypothesis
        contains (case-insensitive); `constant`: the name of a constant the change set; `line`: text
        one of its changed lines contains."""
        params = {
            "track": track,
            "status": status,
            "agent": agent,
            "base": base,
            "since": since,
            "text": text,
            "constant": constant,
            "line": line,
            "limit": limit,
            "cursor": cursor,
        }
        return self._call(
            ExperimentPage, "GET", "/experiments", params={k: v for k, v in params.items() if v is not None}
        )

    def iter_search(self, **filters: Any) -> Iterator[ExperimentOut]:
        """Every experiment matching the filters, following the cursor."""
        cursor: str | None = None
        while True:
            page = self.search(cursor=cursor, **filters)
            yield from page.items
            cursor = page.next_cursor
            if cursor is None:
                return

    def similar(
        self,
        experiment_id: int | None = None,
        *,
        patch: str | None = None,
        train_py: str | None = None,
        edits: Sequence[Edit | Mapping[str, str]] | None = None,
        base: str | None = None,
        track: str | None = None,
    ) -> SimilarOut:
        """Has this been tried? The experiments that made the same or nearly the same change, most
        alike first, with their outcomes: as an experiment (`experiment_id`), or as a change not
        submitted (a `patch` or `edits` against `base`, default the best of `track`, or a whole
        `train_py`; checked as a submission is, ApiError if not valid; nothing is stored)."""
        given = {"patch": patch, "train_py": train_py, "edits": _edits(edits), "base": base}
        change = {k: v for k, v in given.items() if v is not None}
        if (experiment_id is None) == (not change):
            raise ArgumentsError("give experiment_id or a change (edits, patch, train_py), not both")
        if experiment_id is not None:
            return self._call(SimilarOut, "GET", f"/experiments/{experiment_id}/similar")
        return self._call(SimilarOut, "POST", "/similar", json=change | ({"track": track} if track else {}))

    def diff(self, experiment_id: int) -> str:
        return self._send("GET", f"/experiments/{experiment_id}/diff").text

    def train_py(self, experiment_id: int) -> str:
        """The experiment's whole train.py."""
        return self._send("GET", f"/experiments/{experiment_id}/train.py").text

    def program_md(self, track: str | None = None) -> str:
        """program.md: the rules every agent of the track follows."""
        return self._send("GET", "/program", params=_track(track)).text

    def log(self, experiment_id: int, run: int | None = None) -> str:
        """A run's log (default: the latest run with a result)."""
        params = {"run": run} if run is not None else None
        return self._send("GET", f"/experiments/{experiment_id}/log", params=params).text

    def progress(self, experiment_id: int, run: int | None = None) -> ProgressOut:
        """A run's stored progress (default: the latest run's)."""
        params = {"run": run} if run is not None else None
        return self._call(ProgressOut, "GET", f"/experiments/{experiment_id}/progress", params=params)

    def cancel(self, experiment_id: int) -> CancelOut:
        return self._call(CancelOut, "POST", f"/experiments/{experiment_id}/cancel")

    def retry(self, experiment_id: int) -> ExperimentOut:
        """Queue an infra_failed or cancelled experiment again (admin token)."""
        return self._call(ExperimentOut, "POST", f"/experiments/{experiment_id}/retry")

    def integrity_events(self, *, open_only: bool = False, limit: int = 50) -> IntegrityEventsOut:
        """Runs that ended in an integrity class, newest first, with their evidence (`open_only`:
        those not cleared, which hold their agent's queued experiments)."""
        params = {"open": open_only, "limit": limit}
        return self._call(IntegrityEventsOut, "GET", "/integrity-events", params=params)

    def clear_integrity_event(self, event_id: int, note: str) -> IntegrityEventOut:
        """Clear an integrity event, saying why (admin token)."""
        path = f"/integrity-events/{event_id}/clear"
        return self._call(IntegrityEventOut, "POST", path, json={"note": note})

    def best(self, track: str | None = None) -> BestOut:
        """The track's best (default: the only track)."""
        return self._call(BestOut, "GET", "/best", params=_track(track))

    def leaderboard(self, track: str | None = None) -> LeaderboardOut:
        return self._call(LeaderboardOut, "GET", "/leaderboard", params=_track(track))

    def noise(self, track: str | None = None) -> NoiseListOut:
        """The decision rule's settings and the track's noise per platform and harness."""
        return self._call(NoiseListOut, "GET", "/noise", params=_track(track))

    def children(self, commit: str) -> ChildrenOut:
        return self._call(ChildrenOut, "GET", f"/commits/{commit}/children")

    def agents(self, track: str | None = None) -> AgentsOut:
        return self._call(AgentsOut, "GET", "/agents", params=_track(track))

    # Tracks -----------------------------------------------------------------------------------

    def tracks(self) -> TracksOut:
        """Every track: its preset, platforms, pins, best and queue."""
        return self._call(TracksOut, "GET", "/tracks")

    def create_track(self, name: str, **fields: str | None) -> TrackOut:
        """Create a track (admin token): `preset`, `platforms`, `platform`, `harness_id`,
        `train_py`, `program_md` (TrackIn); its baseline is queued at once."""
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return self._call(TrackOut, "POST", "/tracks", json=body)

    def archive_track(self, name: str) -> TrackOut:
        """Archive a track (admin token): it takes no new experiments and no worker serves it."""
        return self._call(TrackOut, "POST", f"/tracks/{name}/archive")

    def port(self, experiment_id: int, track: str, description: str | None = None) -> Submitted:
        """Carry a kept experiment's change to another track, applied to that track's best and
        decided there on its own runs; `existing` when the same train.py is there already."""
        body = {"track": track, **({"description": description} if description else {})}
        response = self._send("POST", f"/experiments/{experiment_id}/port", json=body)
        return parse(Submitted, response).model_copy(update={"existing": response.status_code == 200})

    def transfer(self) -> TransferOut:
        """Every change tried on more than one track, with its effect on each."""
        return self._call(TransferOut, "GET", "/transfer")

    def post_note(self, text: str, *, experiment_id: int | None = None, commit: str | None = None) -> NoteOut:
        """Leave a note for the other agents (one finding each), optionally about an experiment or
        a commit; returns the stored note."""
        body = {"text": text, "experiment_id": experiment_id, "commit": commit}
        return self._call(NoteOut, "POST", "/notes", json={k: v for k, v in body.items() if v is not None})

    def notes(
        self,
        *,
        experiment_id: int | None = None,
        commit: str | None = None,
        author: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> NotePage:
        """One page of notes (`items`, `next_cursor`), newest first."""
        params = {
            "experiment_id": experiment_id,
            "commit": commit,
            "author": author,
            "since": since,
            "limit": limit,
            "cursor": cursor,
        }
        return self._call(
            NotePage, "GET", "/notes", params={k: v for k, v in params.items() if v is not None}
        )

    def near_misses(self, *, limit: int = 20, track: str | None = None) -> NearMissesOut:
        """Reverted experiments of the track that measured better than what they were measured
        against (effect below zero, short of significance), strongest evidence first, with what
        each changed: candidates to combine."""
        return self._call(NearMissesOut, "GET", "/near-misses", params={"limit": limit, **_track(track)})

    def keep_rates(
        self,
        *,
        part: Part | None = None,
        name: str | None = None,
        min_tried: int = 1,
        limit: int = 100,
        track: str | None = None,
    ) -> KeepRatesOut:
        """Tried, measured and kept on the track per
        constant and direction (`part="constant"`) and per region (`part="region"`), most tried first."""
        params = {"part": part, "name": name, "min_tried": min_tried, "limit": limit, "track": track}
        return self._call(
            KeepRatesOut, "GET", "/keep-rates", params={k: v for k, v in params.items() if v is not None}
        )

    def results_tsv(self, track: str | None = None) -> str:
        return self._send("GET", "/results.tsv", params=_track(track)).text

    def import_results_tsv(self, tsv: str, track: str | None = None) -> ImportOut:
        headers = {"Content-Type": "text/tab-separated-values"}
        return self._call(
            ImportOut,
            "POST",
            "/import/results.tsv",
            content=tsv.encode(),
            headers=headers,
            params=_track(track),
        )

    def wait(self, *experiment_ids: int, timeout: float = 3600.0, poll_s: float = 2.0) -> list[ExperimentOut]:
        """Poll until any of the experiments reaches a final state; return those that have, in the
        order given (TimeoutError after `timeout`, naming each one's state)."""
        if not experiment_ids:
            raise ValueError("wait: give at least one experiment id")
        deadline = time.monotonic() + timeout
        while True:
            seen = [self.experiment(number) for number in dict.fromkeys(experiment_ids)]
            decided = [experiment for experiment in seen if experiment.status in FINAL_STATUSES]
            if decided:
                return decided
            if time.monotonic() >= deadline:
                states = ", ".join(f"experiment {e.id} still {e.status}" for e in seen)
                raise TimeoutError(f"{states} after {timeout:.0f} s")
            time.sleep(poll_s)

    @contextmanager
    def events(
        self,
        types: Iterable[EventType] | None = None,
        last_event_id: int | None = None,
        read_timeout: float = 120.0,
    ) -> Iterator[Iterator[ServerEvent]]:
        """The server's live events (GET /events), typed (protocol/events.py), as they happen:

            with client.events({EventType.KEPT}) as events:
                for event in events: ...

        `types` (default all) filters them; `last_event_id` resumes after a dropped stream from
        the server's recent buffer. The server sends a keep-alive every 15 s, so a read that
        waits longer than `read_timeout` means the connection is gone (httpx.ReadTimeout)."""
        params = {"types": ",".join(types)} if types is not None else {}
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        timeout = httpx.Timeout(30.0, read=read_timeout)
        request = self.http.build_request("GET", "/events", params=params, headers=headers, timeout=timeout)
        stream = self.http.send(request, stream=True)
        try:
            if stream.status_code >= 400:
                stream.read()
                _raise_for_status(stream)
            yield parse_stream(stream.iter_lines())
        finally:
            stream.close()

    # Workers ----------------------------------------------------------------------------------

    def register(
        self, *, name: str, device: str, memory_gb: float, harness_id: str, preset: str | None = None
    ) -> RegisterOut:
        body = {"name": name, "device": device, "memory_gb": memory_gb, "harness_id": harness_id}
        if preset is not None:
            body["preset"] = preset
        return self._call(RegisterOut, "POST", "/worker/register", json=body)

    def claim(self, worker_id: str, wait_s: float = 0.0) -> ClaimOut | None:
        """The next experiment under a new lease, or None when none came within `wait_s`."""
        response = self._send(
            "POST",
            "/worker/claim",
            json={"worker_id": worker_id, "wait_s": wait_s},
            timeout=wait_s + self.http.timeout.read + 5 if self.http.timeout.read else None,
        )
        return None if response.status_code == 204 else parse(ClaimOut, response)

    def heartbeat(self, lease_id: str) -> HeartbeatOut:
        return self._call(HeartbeatOut, "POST", f"/worker/leases/{lease_id}/heartbeat", json={})

    def send_progress(self, lease_id: str, events: Iterable[BaseModel | Mapping[str, Any]]) -> None:
        self._send(
            "POST", f"/worker/leases/{lease_id}/progress", json={"events": [_plain(e) for e in events]}
        )

    def result(self, lease_id: str, result_id: str, result: BaseModel | Mapping[str, Any]) -> ResultOutcome:
        body = {"result_id": result_id, "result": _plain(result)}
        return self._call(ResultOutcome, "POST", f"/worker/leases/{lease_id}/result", json=body)

    def release(self, lease_id: str, reason: str, count_attempt: bool = False) -> None:
        body = {"reason": reason, "count_attempt": count_attempt}
        self._send("POST", f"/worker/leases/{lease_id}/release", json=body)


def _track(track: str | None) -> dict[str, str]:
    """The `track` query parameter, when one is named."""
    return {"track": track} if track is not None else {}


def _edits(edits: Sequence[Edit | Mapping[str, str]] | None) -> list[dict[str, str]] | None:
    """Edits as JSON: models or {"old", "new"} mappings (the server checks them)."""
    if edits is None:
        return None
    return [e.model_dump() if isinstance(e, Edit) else dict(e) for e in edits]
