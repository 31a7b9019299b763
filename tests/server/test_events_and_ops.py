"""Server-sent events, health, metrics and the results.tsv round trip."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.engine import make_url

from client import ApiError, Client
from protocol.events import EventType, Queued, ServerEvent
from protocol.schemas import ImportOut
from server.crud import tsv
from server.models import Experiment
from testkit.pg_scratch import new_database


def _read_events(
    url: str,
    until: str,
    found: list[dict],
    ready: threading.Event,
) -> None:
    """The stream as raw lines, to check the wire format itself."""
    with httpx.Client(timeout=5) as http, http.stream("GET", f"{url}/api/v1/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        ready.set()
        event: dict = {}
        for line in response.iter_lines():
            if line.startswith("event: "):
                event["type"] = line[7:]
            elif line.startswith("id: "):
                event["id"] = int(line[4:])
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif not line and "type" in event:
                found.append(event)
                if event["type"] == until:
                    return
                event = {}


def test_events_follow_an_experiment_from_queued_to_kept(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    found: list[dict] = []
    ready = threading.Event()
    reader = threading.Thread(target=_read_events, args=(live.url, "kept", found, ready))
    reader.start()
    assert ready.wait(10)
    deadline = time.monotonic() + 10
    while live.ctx.bus.subscriber_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    experiment = live.client("agent").submit("lr", train_py=baseline_source.replace("0.01", "0.02"))
    claim = worker.claim()
    worker.client.send_progress(claim.lease_id, [{"step": 1, "loss": 4.0, "fraction": 0.1}])
    worker.report(claim, 0.9)
    reader.join(20)
    assert not reader.is_alive()
    mine = [e for e in found if e["data"].get("experiment_id") == experiment.id]
    assert [e["type"] for e in mine] == ["queued", "started", "progress", "finished", "kept"]
    assert mine[2]["data"]["loss"] == 4.0 and mine[4]["data"]["val_bpb"] == 0.9
    assert mine[1]["data"]["worker"] == "gpu0"
    assert [e["id"] for e in found] == sorted(e["id"] for e in found)


def test_event_streams_survive_clients_that_leave_and_can_resume(
    live, worker_factory, baseline_source
) -> None:
    bus = live.ctx.bus
    for _ in range(5):  # clients that disconnect at once must not leak subscribers or break the bus
        with httpx.Client(timeout=10) as http, http.stream("GET", f"{live.url}/api/v1/events") as response:
            next(response.iter_lines())
    deadline = time.monotonic() + 10
    while bus.subscriber_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bus.subscriber_count == 0
    with httpx.Client(timeout=10) as http:
        assert http.get(f"{live.url}/api/v1/events", params={"types": "bogus"}).status_code == 422
    agent = live.client("agent")
    for name in ("poke A", "poke B"):
        agent.submit(name, train_py=baseline_source + f"# {name}\n")

    def resume(after: int) -> ServerEvent:
        with agent.events({EventType.QUEUED}, last_event_id=after) as events:  # the SDK's typed stream
            return next(events)

    # Reconnecting with Last-Event-ID replays the buffered events after that id, filtered by type.
    first = resume(0)
    assert isinstance(first.payload, Queued) and first.payload.description == "poke A"
    second = resume(first.id or 0)
    assert isinstance(second.payload, Queued) and second.payload.description == "poke B"


def test_health_and_metrics(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    agent = live.client("agent")
    agent.submit("a", train_py=baseline_source + "# a\n")
    agent.submit("b", train_py=baseline_source + "# b\n")
    worker.claim()
    health = httpx.get(f"{live.url}/api/v1/healthz").json()
    assert health == {"status": "ok", "database": "ok", "research_repo": "ok"}
    text = httpx.get(f"{live.url}/api/v1/metrics").text
    lines = [line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#")]
    samples = {name: float(value) for name, value in lines}
    assert samples["autoresearch_queue_depth"] == 1 and samples["autoresearch_running"] == 1
    assert samples['autoresearch_experiments_finished_total{status="kept"}'] == 1
    assert samples['autoresearch_experiments{status="queued"}'] == 1
    assert samples['autoresearch_run_duration_seconds_bucket{le="10"}'] == 1  # 5.5 s
    assert samples["autoresearch_run_duration_seconds_count"] == 1
    assert samples["autoresearch_run_duration_seconds_sum"] == 5.5
    assert samples["autoresearch_workers_online"] == 1
    submits = 'autoresearch_http_request_duration_seconds_count{method="POST",route="/api/v1/experiments"}'
    assert samples[submits] == 2
    route = 'method="POST",route="/api/v1/experiments"'
    assert samples[f'autoresearch_http_request_duration_seconds_bucket{{le="+Inf",{route}}}'] == 2


def test_results_tsv_export_in_the_autoresearch_format(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(0.997900, peak_memory_mb=45060.2)
    agent = live.client("agent")
    agent.submit("increase LR to 0.04", train_py=baseline_source.replace("0.01", "0.04"))
    agent.submit("switch to\tGeLU", train_py=baseline_source + "# gelu\n")
    worker.run_next(0.993200, peak_memory_mb=45100.0)
    worker.run_next(None, status="crash", error_class="out_of_memory")
    rows = agent.results_tsv().splitlines()
    # autoresearch's five columns, then each decision's runs, effect, effect_se, best_runs, p_value
    # and reason (the greedy rule has no standard error or p-value; the baseline was not compared).
    assert rows[0] == (
        "commit\tval_bpb\tmemory_gb\tstatus\tdescription\truns\teffect\teffect_se\tbest_runs\tp_value\treason"
    )
    # The GeLU change was queued on the baseline: it ran re-applied onto the new best (experiment 4).
    assert agent.experiment(3).rebased_to == 4
    commits = [agent.experiment(i).commit[:7] for i in (1, 2, 4)]
    reasons = [" ".join(agent.experiment(i).reason.split()) for i in (1, 2, 4)]
    assert reasons[0] == "baseline measured: first run val_bpb 0.9979"
    assert "0.9932 < best 0.9979" in reasons[1]
    assert "out_of_memory" in reasons[2]
    assert rows[1:] == [
        f"{commits[0]}\t0.997900\t44.0\tkeep\tbaseline\t1\t\t\t\t\t{reasons[0]}",
        f"{commits[1]}\t0.993200\t44.0\tkeep\tincrease LR to 0.04\t1\t-0.004700\t\t1\t\t{reasons[1]}",
        f"{commits[2]}\t0.000000\t0.0\tcrash\tswitch to GeLU\t0\t\t\t\t\t{reasons[2]}",
    ]


tsv_rows = st.lists(
    st.builds(
        tsv.TsvRow,
        commit=st.text("0123456789abcdef", min_size=7, max_size=7),
        val_bpb=st.floats(0, 10).map(lambda v: round(v, 6)),
        memory_gb=st.floats(0, 100).map(lambda v: round(v, 1)),
        status=st.sampled_from(tsv.TSV_STATUSES),
        description=st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60).map(
            str.strip
        ),
    ),
    min_size=1,
    max_size=20,
)


@given(rows=tsv_rows)
@settings(max_examples=50)
def test_tsv_lines_parse_back_to_the_same_rows(rows: list[tsv.TsvRow]) -> None:
    """Either header: autoresearch's five columns, or the export's with the decision columns."""
    text = "\n".join([tsv.HEADER, *(row.line() for row in rows)]) + "\n"
    assert [r.line() for r in tsv.parse(text)] == [r.line() for r in rows]
    text = "\n".join([tsv.HEADER_WITH_DECISIONS, *(row.line_with_decision() for row in rows)]) + "\n"
    assert [r.line() for r in tsv.parse(text)] == [r.line() for r in rows]


def test_import_then_export_round_trips_and_is_admin_only(live) -> None:
    log = "\n".join(
        [
            tsv.HEADER,
            "a1b2c3d\t0.997900\t44.0\tkeep\tbaseline",
            "b2c3d4e\t0.993200\t44.2\tkeep\tincrease LR to 0.04",
            "c3d4e5f\t1.005000\t44.0\tdiscard\tswitch to GeLU activation",
            "d4e5f6g\t0.000000\t0.0\tcrash\tdouble model width (OOM)".replace("g\t", "a\t"),
        ]
    )
    with pytest.raises(ApiError) as caught:
        live.client("agent").import_results_tsv(log)
    assert caught.value.status == 403
    admin = live.admin()
    assert admin.import_results_tsv(log) == ImportOut(imported=4, skipped=0)
    assert admin.import_results_tsv(log) == ImportOut(imported=0, skipped=4)
    exported = admin.results_tsv()
    # History keeps autoresearch's columns; it has no decision of this server's to add.
    assert exported.splitlines()[0] == tsv.HEADER_WITH_DECISIONS
    assert exported.splitlines()[1:5] == [line + "\t" * 6 for line in log.splitlines()[1:]]
    assert admin.import_results_tsv(exported) == ImportOut(imported=0, skipped=4)  # our export reads back
    assert admin.best().experiment_id == 1  # history only: never compared with the best
    for bad, words in (
        ("commit\tval_bpb\n", "header"),
        (tsv.HEADER + "\nzzz\t1\t1\tkeep\tx", "line 2: commit"),
        (tsv.HEADER + "\nabcdef0\tnan\t1\tkeep\tx", "line 2: val_bpb"),
        (tsv.HEADER + "\nabcdef0\t1\t1\tmaybe\tx", "line 2: status"),
        (tsv.HEADER + "\nabcdef0\t1\t1", "5 tab-separated"),
    ):
        with pytest.raises(ApiError) as caught:
            admin.import_results_tsv(bad)
        assert caught.value.status == 422 and words in caught.value.detail


@pytest.mark.postgres
def test_a_database_outage_answers_503_problems_and_the_server_recovers(live_factory, postgres_url) -> None:
    """The database going away (a restart, a failover) is the server's trouble, not the client's:
    503 with Retry-After, never 500, and service resumes once the database is back."""
    url = new_database(postgres_url)
    live = live_factory(url)
    agent = live.token("agent")
    headers = {"Authorization": f"Bearer {agent}"}
    source = live.client().best().train_py
    name = make_url(url).database

    def submit(tag: str) -> httpx.Response:
        body = {"description": tag, "train_py": source + f"\n# {tag}\n"}
        return httpx.post(f"{live.url}/api/v1/experiments", json=body, headers=headers, timeout=30)

    assert submit("before").status_code == 201  # the token is cached and the pool is warm
    admin_url = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    patient = Client(live.url, agent, retry_for_s=60)  # an SDK client that rides out the outage
    with psycopg.connect(admin_url) as admin, ThreadPoolExecutor(1) as pool:
        admin.autocommit = True
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        for answer in (httpx.get(f"{live.url}/api/v1/experiments/1", timeout=30), submit("during")):
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["type"].endswith("/database-unavailable")
        retried = pool.submit(patient.submit, "retried", train_py=source + "\n# retried\n")
        time.sleep(1.5)  # it meets 503s meanwhile
        assert not retried.done()
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert retried.result(timeout=60).status == "queued"
    assert httpx.get(f"{live.url}/api/v1/experiments/1", timeout=30).status_code == 200
    assert submit("after").status_code == 201
    with live.ctx.db.read() as session:
        descriptions = list(session.scalars(select(Experiment.description)))
    assert {"before", "after"} <= set(descriptions) and "during" not in descriptions
    assert descriptions.count("retried") == 1
