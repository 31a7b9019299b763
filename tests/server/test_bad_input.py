"""Bad input and abuse get a 4xx problem+json and change nothing, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from client import ApiError, Client
from tests.server.api_document import openapi
from tests.server.conftest import DEVICE, HARNESS_ID, Live

PROBLEM = "application/problem+json"


def _refused(response: httpx.Response, status: int = 422) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    return response.json()


@pytest.mark.parametrize("since", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_a_since_out_of_range_in_utc_is_a_422(live_any_db: Live, since: str) -> None:
    problem = _refused(httpx.get(f"{live_any_db.url}/api/v1/experiments", params={"since": since}))
    assert problem["type"].endswith("/since-out-of-range")
    # The bounds that do fit still work.
    answer = httpx.get(f"{live_any_db.url}/api/v1/experiments", params={"since": "0001-01-01T00:00:00Z"})
    assert answer.status_code == 200 and [e["id"] for e in answer.json()["items"]] == [1]


def test_nul_is_refused_in_queries_paths_and_bodies(live_any_db: Live) -> None:
    live = live_any_db
    worker_token, agent_token = live.token("worker"), live.token("agent")
    worker = Client(live.url, worker_token)
    worker_id = worker.register(name="gpu0", device=DEVICE, memory_gb=1.0, harness_id=HARNESS_ID).worker_id
    api = f"{live.url}/api/v1"
    as_worker = {"Authorization": f"Bearer {worker_token}"}
    as_agent = {"Authorization": f"Bearer {agent_token}"}
    refused = [
        httpx.get(f"{api}/experiments", params={"agent": "\0"}),
        httpx.get(f"{api}/experiments?agent=a%00b"),
        httpx.get(f"{api}/commits/%00/children"),
        httpx.get(f"{live.url}/experiments/%00"),  # a page
        httpx.get(f"{live.url}/static/%00.css"),
        httpx.post(f"{api}/worker/leases/%00/heartbeat", headers=as_worker),
        httpx.post(f"{api}/worker/claim", json={"worker_id": "\0"}, headers=as_worker),
        httpx.post(f"{api}/worker/claim", json={"worker_id": worker_id[:35] + "\0"}, headers=as_worker),
        httpx.post(
            f"{api}/worker/register",
            json={"name": "gpu1", "device": "cpu\0", "memory_gb": 1, "harness_id": HARNESS_ID},
            headers=as_worker,
        ),
        httpx.post(
            f"{api}/experiments", json={"description": "x\0", "train_py": "x = 1\n"}, headers=as_agent
        ),
        httpx.post(
            f"{api}/experiments", json={"description": "x", "train_py": "x = '\0'\n"}, headers=as_agent
        ),
    ]
    for response in refused:
        problem = _refused(response)
        assert "NUL" in problem["detail"], problem
    # Nothing changed, and the server still answers.
    assert [e.id for e in Client(live.url).search().items] == [1]
    assert worker.claim(worker_id).experiment_id == 1


def test_a_log_may_carry_nul_which_is_stored_replaced(live_any_db: Live, worker_factory) -> None:
    worker = worker_factory(live_any_db)
    worker.run_next(1.0, log_tail="before\0after", error_message=None)
    assert "before\ufffdafter" in Client(live_any_db.url).log(1)


def test_result_id_must_be_a_uuid(live, worker_factory) -> None:
    worker = worker_factory(live)
    claim = worker.claim()
    result = {"status": "ok", "val_bpb": 1.0, "device": DEVICE, "harness_id": HARNESS_ID}
    for bad in ["-" * 36, "0" * 32, "not-a-uuid", str(uuid.uuid4()) + "0"]:
        with pytest.raises(ApiError) as caught:
            worker.client.result(claim.lease_id, bad, result)
        assert caught.value.status == 422
    assert live.client().experiment(1).status == "running"
    assert worker.client.result(claim.lease_id, str(uuid.uuid4()).upper(), result).decision == "keep"


def test_a_worker_name_belongs_to_the_token_that_registered_it(live_any_db: Live, worker_factory) -> None:
    live = live_any_db
    first = worker_factory(live, "gpu0")
    again = worker_factory(live, "gpu0", first.client.http.headers["Authorization"].split()[1])
    assert again.worker_id == first.worker_id  # the same token registers again: the same worker
    with pytest.raises(ApiError) as caught:
        worker_factory(live, "gpu0")
    assert caught.value.status == 409 and caught.value.problem["type"].endswith("/worker-name-taken")
    assert worker_factory(live, "gpu1").worker_id != first.worker_id


def test_without_public_reads_only_health_and_the_api_description_are_open(live_factory) -> None:
    live = live_factory(public_reads=False)
    open_paths = ["/api/v1/healthz", "/api/v1/openapi.json", "/docs"]
    for path in open_paths:
        assert httpx.get(live.url + path).status_code == 200, path
    closed = ["/api/v1/metrics", "/api/v1/best", "/api/v1/experiments", "/api/v1/results.tsv", "/"]
    for path in closed:
        _refused(httpx.get(live.url + path), 401)
        reader = {"Authorization": f"Bearer {live.token('worker')}"}
        assert httpx.get(live.url + path, headers=reader).status_code == 200, path
    _refused(httpx.get(f"{live.url}/api/v1/events"), 401)


@contextmanager
def _streams(live: Live, count: int, headers: dict[str, str] | None = None) -> Iterator[list[int]]:
    """Open `count` event streams at once; yield their statuses (kept open until the block ends)."""
    with ExitStack() as stack:
        statuses = []
        for _ in range(count):
            client = stack.enter_context(httpx.Client(base_url=live.url, headers=headers, timeout=10))
            response = stack.enter_context(client.stream("GET", "/api/v1/events"))
            statuses.append(response.status_code)
            if response.status_code == 503:
                assert response.headers["content-type"] == PROBLEM
                assert int(response.headers["retry-after"]) > 0
                response.read()
                assert response.json()["type"].endswith("/too-many-streams")
        yield statuses


def test_event_streams_are_capped_per_client_and_in_all(live_factory) -> None:
    live = live_factory(sse_max_subscribers=5, sse_max_per_client=2)
    with _streams(live, 3) as anonymous:
        assert anonymous == [200, 200, 503]  # one address without a token: 2 at most
        token = {"Authorization": f"Bearer {live.token('agent')}"}
        with _streams(live, 3, token) as agent:
            assert agent == [200, 200, 503]  # a token is a client of its own
            other = {"Authorization": f"Bearer {live.token('agent')}"}
            with _streams(live, 2, other) as third:
                assert third == [200, 503]  # 5 open in all
    # Closed streams free their places.
    with _streams(live, 2) as again:
        assert again == [200, 200]


# Request strings that may hold NUL: the harness's record of a run, whose NUL characters are
# replaced (protocol.schemas.storable_log), not refused.
RECORDED_TEXT = {"error_message", "log_tail"}


def _strings(name: str, schema: object, definitions: dict, pattern: str | None = None) -> list[tuple]:
    """(name, pattern) of each string schema in `schema` that holds free text (no format or enum
    of its own; a pattern beside `anyOf` applies to its branches), references followed."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        return _strings(name, definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions, pattern)
    pattern = schema.get("pattern", pattern)
    found = []
    if schema.get("type") == "string" and not {"format", "enum", "const"} & set(schema):
        found.append((name, pattern))
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        found += _strings(name, branch, definitions, pattern)
    for key, value in schema.get("properties", {}).items():
        found += _strings(key, value, definitions)
    found += _strings(name, schema.get("items"), definitions)
    return found


def test_the_schema_states_that_no_string_a_request_sends_may_hold_nul() -> None:
    """The constraint the server enforces, stated where a client generated from the document reads
    it (issue 51: schemathesis sent a NUL inside a keep-rates name, schema-valid, and was refused)."""
    document = openapi()
    definitions = document["components"]["schemas"]
    found = []
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] in ("query", "path"):
                    found += _strings(parameter["name"], parameter["schema"], definitions)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                found += _strings("body", media["schema"], definitions)
    checked = [(name, pattern) for name, pattern in found if name not in RECORDED_TEXT]
    assert len(checked) >= 20
    allowed = [name for name, pattern in checked if pattern is None or re.fullmatch(pattern, "a\0b")]
    assert allowed == []
