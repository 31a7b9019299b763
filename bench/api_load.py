"""API load against the real server (a separate `autoresearch serve` process), on SQLite and PostgreSQL.

    python bench/api_load.py [--db sqlite,postgresql] [--duration 60] [--agents 50] [--workers 8]
                             [--experiments 100000] [--postgres-url URL] [--phases mixed,...] [--runs 3]

Phases, for each database:

1. mixed: `--agents` agents each submit a patch every 10 s and poll their latest experiment every
   second, while `--workers` simulated workers claim (long poll), heartbeat, send progress, "run"
   for 0.5 s and report a result (about one in ten better than the best: see
   `SimulatedResults`). Targets: p99 submit < 150 ms, p99 poll < 50 ms, no errors.
2. submit rate: 16 agents submit back to back for 15 s: the highest sustained submit rate.
3. claim-and-report: 5000 queued experiments (bulk-inserted), `--workers` workers claim and
   report as fast as they can for 15 s. Target: >= 100 cycles/s on PostgreSQL. The reference,
   measured in the same run with the same concurrency, is GET /healthz (the HTTP stack plus one
   `SELECT 1`): the ratio says how many health checks one cycle costs.
4. reads at scale: finished experiments (with results, leases, agents; none kept) bulk-inserted
   by testkit/seeded_history.py up to `--experiments`, then GET /leaderboard and GET /experiments
   (first page, filtered, deep cursor). Target: under 100 ms.

Each phase runs `--runs` times (3) on the same server, and the worst figure of the runs is
reported next to each run's: a figure in docs/benchmarks.md should hold when someone else runs it.

The load generator is one asyncio process (bench/lean_http.py in the mixed and claim-and-report
phases, httpx elsewhere); it shares the machine's cores with the server (and PostgreSQL), so the
figures are upper bounds on what the server alone costs.
Errors (any unexpected status, and any transport error: a dropped connection, a request without
an answer, never retried) make the exit status 1; missed speed targets are reported, not fatal
(the machine may be busy).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit, beside bench/

import httpx
from lean_http import Answer, LeanClient
from sqlalchemy import func, insert, select

from harness.runner.limits import cpu_seconds
from protocol.states import Decision
from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.core.request_metrics import BUCKETS
from server.crud.runs import new_seed
from server.crud.tokens import create_token
from server.crud.tracks import counts, last_experiment_id, load_track
from server.models import FIRST_TRACK_ID, ApiToken, Experiment, Run
from server.project_init import DEFAULT_PROGRAM_MD, DEFAULT_TRAIN_PY, init_project
from server.trainpy.patches import make_patch
from server.trainpy.research_repo import blob_sha
from testkit.pg_scratch import free_port, new_database, scratch_cluster
from testkit.seeded_history import HARNESS_ID, PLATFORM, seed_experiments

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    dropped: int = 0  # transport errors: connections dropped, requests without an answer

    def timed(self, name: str, seconds: float) -> None:
        self.latencies[name].append(seconds * 1000)

    def error(self, what: str) -> None:
        if len(self.errors) < 20:
            print(f"  error: {what}", flush=True)
        self.errors.append(what)

    def transport(self, what: str, exc: httpx.HTTPError) -> None:
        """A request that got no answer (an error of the bench, never retried)."""
        self.dropped += isinstance(exc, httpx.TransportError)
        self.error(f"{what} {type(exc).__name__}: {exc}")

    async def request(self, name: str, sent: Awaitable[Answer], ok: int) -> Answer | None:
        """The answer to a request timed as `name`, or None (counted) when it has none or not `ok`."""
        started = time.perf_counter()
        try:
            answer = await sent
        except httpx.HTTPError as exc:
            self.transport(name, exc)
            return None
        self.timed(name, time.perf_counter() - started)
        if answer.status_code != ok:
            self.error(f"{name} {answer.status_code} {answer.text[:200]}")
            return None
        return answer


def server_times(url: str) -> dict[tuple[str, str], list[float]]:
    """Cumulative bucket counts of the server's own request timing (GET /metrics), per route."""
    text = httpx.get(f"{url}/api/v1/metrics", timeout=30).text
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for line in text.splitlines():
        if line.startswith("autoresearch_http_request_duration_seconds_bucket{"):
            labels, value = line[line.index("{") + 1 :].rsplit("} ", 1)
            parts = dict(part.split("=", 1) for part in labels.split('",'))
            found[(parts["method"].strip('"'), parts["route"].strip('"'))].append(float(value))
    return found


def server_quantile(before: dict, after: dict, key: tuple[str, str], q: float) -> str:
    """The bucket bound under which a fraction q of the requests between two scrapes finished."""
    counts = [b - a for a, b in zip(before.get(key, [0.0] * 13), after.get(key, [0.0] * 13), strict=True)]
    total = counts[-1]
    if not total:
        return "n/a"
    bounds = [*(f"<= {b * 1000:g} ms" for b in BUCKETS), "> 10 s"]
    return next(bound for bound, count in zip(bounds, counts, strict=True) if count >= q * total)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def describe(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"n={len(values):5d}  p50 {statistics.median(values):6.1f} ms  "
        f"p90 {percentile(values, 0.9):6.1f} ms  p99 {percentile(values, 0.99):6.1f} ms  "
        f"max {max(values):6.1f} ms"
    )


def postgres_cpu_seconds() -> float:
    """CPU time of the machine's live PostgreSQL processes (the server's pooled backends live on)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "postgres":
                total += cpu_seconds(int(proc.name))
        except OSError:  # the process ended while we looked
            continue
    return total


@dataclass
class ServerProcess:
    url: str
    pid: int

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


def server_env(folder: Path, database_url: str, **extra: str) -> dict[str, str]:
    """The settings of a benchmark's server: the bench's harness and platform, no queue limit."""
    return {
        "DATA_DIR": str(folder),
        "DATABASE_URL": database_url,
        "HARNESS_ID": HARNESS_ID,
        "PLATFORM": PLATFORM,
        "MAX_QUEUED_PER_AGENT": "1000000",
        "ADMIN_TOKEN": "",
        **extra,
    }


@contextmanager
def running_server(settings_env: dict[str, str], port: int) -> Iterator[ServerProcess]:
    env = {**os.environ, **settings_env, "PORT": str(port)}
    log = open(Path(settings_env["DATA_DIR"]) / "server.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--log-level", "warning"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {log.name}")
            time.sleep(0.2)
        yield ServerProcess(url, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def baseline_source() -> tuple[Path, Path]:
    return DEFAULT_TRAIN_PY, DEFAULT_PROGRAM_MD


def unique_change(source: str, tag: str) -> str:
    """A change near the end of train.py, so that every patch applies to the baseline."""
    return source + f"\n# experiment {tag}\n"


# Phase 1: agents and workers together -----------------------------------------------------------


async def best_now(http: LeanClient, headers: dict[str, str], stats: Stats) -> tuple[str, str] | None:
    """The best's commit and train.py, where an agent starts its next idea (None: not answered)."""
    answer = await stats.request("best", http.get("/api/v1/best", headers=headers), 200)
    if answer is None:
        return None
    best = answer.json()
    return best["commit"], best["train_py"]


async def agent_loop(http: LeanClient, token: str, stop: float, stats: Stats) -> None:
    """Submit a change every 10 s and poll the latest every second, as an agent following
    program.md does: each idea starts from the best as it is when the previous one was submitted,
    so a change lands on a former best only when a keep came in between (and is carried onto
    the new best when a worker claims it)."""
    headers = {"Authorization": f"Bearer {token}"}
    latest: int | None = None
    # Agents are independent: each polls on its own phase. (Started in step, all 50 would poll in
    # the same millisecond every second, a burst no real swarm makes.)
    await asyncio.sleep(random.uniform(0, 1))
    start = await best_now(http, headers, stats)
    next_submit = time.monotonic() + random.uniform(0, 10)
    while time.monotonic() < stop and start is not None:
        base, source = start
        now = time.monotonic()
        if now >= next_submit:
            patch = make_patch(source, unique_change(source, uuid.uuid4().hex))
            body = {"description": "bench change", "patch": patch, "base": base}
            sent = http.post("/api/v1/experiments", json=body, headers=headers)
            if (answer := await stats.request("submit", sent, 201)) is not None:
                latest = answer.json()["id"]
            next_submit += 10
            start = await best_now(http, headers, stats)
        if latest is not None:
            await stats.request("poll", http.get(f"/api/v1/experiments/{latest}"), 200)
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - now)))


async def register(
    http: httpx.AsyncClient | LeanClient, token: str, name: str, device: str = PLATFORM
) -> str:
    body = {"name": name, "device": device, "memory_gb": 80.0, "harness_id": HARNESS_ID}
    response = await http.post(
        "/api/v1/worker/register", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    if response.status_code != 200:
        raise RuntimeError(f"register: {response.status_code} {response.text[:200]}")
    return response.json()["worker_id"]


def result_body(val_bpb: float, device: str = PLATFORM) -> dict:
    return {
        "result_id": str(uuid.uuid4()),
        "result": {
            "status": "ok",
            "val_bpb": val_bpb,
            "device": device,
            "harness_id": HARNESS_ID,
            "training_seconds": 300.0,
            "total_seconds": 330.0,
            "peak_memory_mb": 40000.0,
            "tokens": 500_000_000,
            "steps": 950,
            "num_params": 50_000_000,
            "mfu_percent": 40.0,
            "log_tail": "step 950 loss 3.10\n" * 20,
        },
    }


@dataclass
class SimulatedResults:
    """The val_bpb the simulated runs report: about one experiment in ten beats the best by more
    than MIN_DELTA, all along, as in a swarm that keeps finding small gains. Most ideas fail, as in
    a real swarm.

    The keeps set the load: each one moves the best, and every change queued on the former best
    is carried onto the new one when a worker claims it (a git commit under the project lock, a
    write several times the cost of a revert). So an experiment's value is drawn once, from its
    id, around the best as it is when the experiment first reports (its later runs report the
    same: a confirmation confirms), and the best follows the keeps the server answers. Drawn
    around the fixed baseline instead, the best stopped moving after the first run's keeps: the
    first run of a set met about 100 carries and the next two none, so a set's worst was its first.
    """

    best: float = 1.0  # the baseline's value (experiment 1) until something is kept
    drawn: dict[int, float] = field(default_factory=dict)

    def value(self, experiment_id: int) -> float:
        if experiment_id not in self.drawn:
            spread = 0.0 if experiment_id == 1 else random.Random(experiment_id).uniform(-0.0105, 0.0895)
            self.drawn[experiment_id] = self.best + spread
        return self.drawn[experiment_id]

    def answered(self, outcome: dict) -> None:
        """The server's answer to a result: a keep moves the best."""
        if outcome.get("decision") == Decision.KEEP:
            self.best = self.drawn[outcome["experiment_id"]]


async def worker_loop(
    http: LeanClient,
    token: str,
    name: str,
    stop: float,
    stats: Stats,
    run_s: float,
    long_poll: float,
    results: SimulatedResults | None,
) -> int:
    """Claim, run for `run_s` and report until `stop`: the values of `results`, or 2.0 for every run
    (worse than any best: nothing is kept) when it is None. The cycles reported."""
    headers = {"Authorization": f"Bearer {token}"}
    worker_id = await register(http, token, name)
    cycles = 0
    while time.monotonic() < stop:
        started = time.perf_counter()
        try:
            response = await http.post(
                "/api/v1/worker/claim", json={"worker_id": worker_id, "wait_s": long_poll}, headers=headers
            )
        except httpx.HTTPError as exc:
            stats.transport("claim", exc)
            continue
        if response.status_code == 204:
            continue
        if response.status_code != 200:
            stats.error(f"claim {response.status_code} {response.text[:200]}")
            continue
        stats.timed("claim", time.perf_counter() - started)
        claimed = response.json()
        base = f"/api/v1/worker/leases/{claimed['lease_id']}"
        try:
            if run_s:
                beat = await http.post(f"{base}/heartbeat", json={}, headers=headers)
                progress = await http.post(
                    f"{base}/progress",
                    json={"events": [{"step": 1, "loss": 4.2, "fraction": 0.5}]},
                    headers=headers,
                )
                if beat.status_code != 200 or progress.status_code != 204:
                    stats.error(f"heartbeat {beat.status_code} / progress {progress.status_code}")
                await asyncio.sleep(run_s)
            started = time.perf_counter()
            val_bpb = 2.0 if results is None else results.value(claimed["experiment_id"])
            answer = await http.post(f"{base}/result", json=result_body(val_bpb), headers=headers)
            stats.timed("result", time.perf_counter() - started)
            if answer.status_code != 200:
                stats.error(f"result {answer.status_code} {answer.text[:200]}")
            else:
                cycles += 1
                if results is not None:
                    results.answered(answer.json())
        except httpx.HTTPError as exc:
            stats.transport("run", exc)
    return cycles


async def mixed_phase(
    url: str, tokens: dict, agents: int, workers: int, duration: float, results: SimulatedResults
) -> Stats:
    """Each agent and worker on a keep-alive connection of its own (bench/lean_http.py: with httpx
    the load generator took 24-30 % of a core of the two the server runs on, and its own event loop
    added about 5 ms to the median poll it measured; with lean_http 4-5 %)."""
    stats = Stats()
    stop = time.monotonic() + duration
    clients = [LeanClient(url) for _ in range(agents + workers)]
    try:
        tasks: list[Awaitable[object]] = [
            agent_loop(clients[i], tokens["agents"][i], stop, stats) for i in range(agents)
        ]
        tasks += [
            worker_loop(clients[agents + i], tokens["worker"], f"gpu{i}", stop, stats, 0.5, 2.0, results)
            for i in range(workers)
        ]
        await asyncio.gather(*tasks)
    finally:
        for client in clients:
            await client.aclose()
    return stats


# Phase 2: the highest sustained submit rate -------------------------------------------------------


async def submit_rate_phase(
    url: str, tokens: dict, base: str, source: str, duration: float
) -> tuple[float, Stats]:
    stats = Stats()
    done = 0

    async def submitter(token: str, stop: float) -> None:
        nonlocal done
        headers = {"Authorization": f"Bearer {token}"}
        while time.monotonic() < stop:
            patch = make_patch(source, unique_change(source, uuid.uuid4().hex))
            started = time.perf_counter()
            response = await http.post(
                "/api/v1/experiments",
                json={"description": "rate", "patch": patch, "base": base},
                headers=headers,
            )
            stats.timed("submit", time.perf_counter() - started)
            if response.status_code == 201:
                done += 1
            else:
                stats.error(f"submit {response.status_code} {response.text[:200]}")

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        began = time.monotonic()
        await asyncio.gather(*(submitter(tokens["agents"][i], began + duration) for i in range(16)))
        elapsed = time.monotonic() - began
    return done / elapsed, stats


# Phase 3: claim-and-report cycles ------------------------------------------------------------------


def seed_queue(
    db: Database,
    count: int,
    baseline: str,
    blob: str,
    agent_id: int,
    tracks: Sequence[tuple[int, str]] = (),
) -> None:
    """`count` queued experiments, each with its first run queued; with `tracks` (id, baseline
    commit), spread over them in turn, each on its track's baseline (else the first track's)."""
    now = datetime.now(UTC)
    tracks = tracks or [(FIRST_TRACK_ID, baseline)]
    with db.write() as session:
        first = last_experiment_id(session) + 1
        rows = [
            {
                "id": first + i,
                "track_id": tracks[i % len(tracks)][0],
                "agent_id": agent_id,
                "source": "agent",
                "description": f"queued {i}",
                "base_commit": tracks[i % len(tracks)][1],
                "commit_sha": tracks[i % len(tracks)][1],
                "train_py_blob": blob,
                "status": "queued",
                "cancel_requested": False,
                "created_at": now,
                "queued_at": now + timedelta(microseconds=i),
            }
            for i in range(count)
        ]
        session.execute(insert(Experiment), rows)
        session.execute(
            insert(Run),
            [
                {
                    "experiment_id": first + i,
                    "track_id": row["track_id"],
                    "number": 1,
                    "seed": new_seed(),
                    "kind": "first",
                    "status": "queued",
                    "attempts": 0,
                    "queued_at": row["queued_at"],
                }
                for i, row in enumerate(rows)
            ],
        )


@dataclass
class Cycles:
    per_s: float
    cpu_per_cycle_s: float
    load_cpu_per_cycle_s: float  # the load generator (this process)
    postgres_cpu_per_cycle_s: float
    health_per_s: float
    cpu_per_health_s: float
    stats: Stats


async def cycles_phase(server: ServerProcess, token: str, workers: int, duration: float) -> Cycles:
    """Each simulated worker on its own keep-alive connection, with the lean client (bench/lean_http.py)."""
    stats = Stats()
    clients = [LeanClient(server.url) for _ in range(workers)]
    try:
        stop = time.monotonic() + duration
        began, cpu = time.monotonic(), server.cpu()
        own, postgres = time.process_time(), postgres_cpu_seconds()
        counts = await asyncio.gather(
            *(
                worker_loop(http, token, f"fast{i}", stop, stats, 0.0, 0.0, None)
                for i, http in enumerate(clients)
            )
        )
        cycles = max(sum(counts), 1)
        cycles_per_s = sum(counts) / (time.monotonic() - began)
        cpu_per_cycle = (server.cpu() - cpu) / cycles
        load_per_cycle = (time.process_time() - own) / cycles
        postgres_per_cycle = (postgres_cpu_seconds() - postgres) / cycles
        # Reference: the HTTP stack and one SELECT 1, with the same concurrency.
        health = 0

        async def probe(http: LeanClient, stop_at: float) -> None:
            nonlocal health
            while time.monotonic() < stop_at:
                if (await http.get("/api/v1/healthz")).status_code == 200:
                    health += 1

        began, cpu = time.monotonic(), server.cpu()
        await asyncio.gather(*(probe(http, began + 5.0) for http in clients))
        health_per_s = health / (time.monotonic() - began)
        cpu_per_health = (server.cpu() - cpu) / max(health, 1)
    finally:
        for http in clients:
            await http.aclose()
    return Cycles(
        cycles_per_s, cpu_per_cycle, load_per_cycle, postgres_per_cycle, health_per_s, cpu_per_health, stats
    )


# Phase 4: reads with many experiments stored ----------------------------------------------------------


async def reads_phase(url: str, repeats: int) -> Stats:
    stats = Stats()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        first = (await http.get("/api/v1/experiments", params={"limit": 50})).json()
        deep_cursor = first["items"][-1]["id"] // 2
        queries: dict[str, tuple[str, dict[str, str | int]]] = {
            "leaderboard": ("/api/v1/leaderboard", {}),
            "agents": ("/api/v1/agents", {}),
            "experiments (first page)": ("/api/v1/experiments", {"limit": 50}),
            "experiments?status=reverted": ("/api/v1/experiments", {"status": "reverted", "limit": 50}),
            "experiments?agent=bench-agent-7": (
                "/api/v1/experiments",
                {"agent": "bench-agent-7", "limit": 50},
            ),
            "experiments (deep cursor)": ("/api/v1/experiments", {"limit": 50, "cursor": str(deep_cursor)}),
            "results.tsv (all rows)": ("/api/v1/results.tsv", {}),
        }
        for name, (path, params) in queries.items():
            for _ in range(repeats if "tsv" not in name else 3):
                started = time.perf_counter()
                response = await http.get(path, params=params)
                stats.timed(name, time.perf_counter() - started)
                if response.status_code != 200:
                    stats.error(f"{name} {response.status_code}")
    return stats


# Orchestration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One figure of a run, against its target (None: a figure without one)."""

    label: str
    value: float
    target: float | None
    lower_is_better: bool = True

    def line(self) -> str:
        figure = f"{self.label}: {round(self.value, 1):g}"
        if self.target is None:
            return f"        {figure}"
        met = self.value < self.target if self.lower_is_better else self.value >= self.target
        sign = "<" if self.lower_is_better else ">="
        return f"  {'met ' if met else 'MISS'}  {figure} (target {sign} {self.target:g})"

    def worse(self, other: Target) -> Target:
        """The worse of two runs' figures."""
        higher = other.value > self.value
        return other if higher == self.lower_is_better else self


@dataclass
class Outcome:
    """One run of a phase: its errors (transport errors among them) and its figures."""

    errors: list[str]
    targets: list[Target] = field(default_factory=list)
    dropped: int = 0


def machine_load() -> str:
    """The load average: how busy the (shared) machine was, next to every figure."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def machine_ticks() -> tuple[int, int]:
    """The machine's CPU time so far, stolen by the hypervisor and in all (/proc/stat, in ticks)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7], sum(fields[:8])  # user nice system idle iowait irq softirq steal


def stolen(before: tuple[int, int], after: tuple[int, int]) -> str:
    """The share of the machine's CPU time the hypervisor gave to others in between: on a shared
    host the same code can cost the server more CPU on some hours than on others."""
    steal, total = after[0] - before[0], after[1] - before[1]
    return f"stolen by the host: {100 * steal / max(total, 1):.1f}% of the CPU time"


@dataclass
class Bench:
    """One database's server and what the phases share."""

    kind: str
    args: argparse.Namespace
    db: Database
    server: ServerProcess
    tokens: dict
    baseline: str
    train_py: Path
    agents: list[str]  # their names
    agent_ids: list[int]
    results: SimulatedResults = field(default_factory=SimulatedResults)  # the mixed runs, one after another

    @property
    def source(self) -> str:
        return self.train_py.read_text()


async def health_cost(server: ServerProcess, count: int = 500) -> float:
    """Server CPU seconds per GET /healthz, sent one at a time on one connection: how fast this
    machine runs the server right now: the same code costs it more CPU on some hours than on
    others (docs/benchmarks.md)."""
    http = LeanClient(server.url)
    try:
        cpu = server.cpu()
        for _ in range(count):
            await http.get("/api/v1/healthz")
        return (server.cpu() - cpu) / count
    finally:
        await http.aclose()


def decided_since(db: Database, when: datetime) -> str:
    """How many experiments the server decided since `when`, by decision: keeps set the load (each
    change queued on the former best is carried onto the new one), so runs are compared by them."""
    with db.read() as session:
        counts = dict(
            session.execute(
                select(Experiment.decision, func.count())
                .where(Experiment.finished_at >= when, Experiment.decision.is_not(None))
                .group_by(Experiment.decision)
            ).all()
        )
    return ", ".join(f"{decision} {counts.get(decision, 0)}" for decision in Decision)


def mixed_report(bench: Bench) -> Outcome:
    args, server, url = bench.args, bench.server, bench.server.url
    health = asyncio.run(health_cost(server))
    print(
        f"mixed load: {args.agents} agents (submit every 10 s, poll every 1 s), {args.workers} workers "
        f"(claim with a 2 s long poll, heartbeat, progress, 0.5 s run, result), {args.duration:.0f} s",
        flush=True,
    )
    cpu, own, inside, started = server.cpu(), time.process_time(), server_times(url), datetime.now(UTC)
    ticks = machine_ticks()
    mixed = asyncio.run(
        mixed_phase(url, bench.tokens, args.agents, args.workers, args.duration, bench.results)
    )
    cpu, own, inside_after = server.cpu() - cpu, time.process_time() - own, server_times(url)
    submit_key, poll_key = ("POST", "/api/v1/experiments"), ("GET", "/api/v1/experiments/{experiment_id}")
    print(
        "  measured inside the server: submit p50 "
        f"{server_quantile(inside, inside_after, submit_key, 0.5)}, p99 "
        f"{server_quantile(inside, inside_after, submit_key, 0.99)}; poll p50 "
        f"{server_quantile(inside, inside_after, poll_key, 0.5)}, p99 "
        f"{server_quantile(inside, inside_after, poll_key, 0.99)}"
    )
    for name in ("submit", "poll", "best", "claim", "result"):
        label = "claim*" if name == "claim" else name
        print(f"  {label:8s} {describe(mixed.latencies[name])}")
    print("  (*claim includes the long-poll wait for work)")
    print(f"  decided: {decided_since(bench.db, started)} (rebase: re-applied onto a new best)")
    print(
        f"  server CPU: {cpu / args.duration * 100:.0f}% of one core, load generator "
        f"{own / args.duration * 100:.0f}%; errors: {len(mixed.errors)}; {machine_load()}\n"
        f"  this machine now: GET /healthz alone costs {health * 1000:.2f} ms of server CPU "
        f"(the mixed load: {cpu / health / args.duration:.0f} health checks' worth a second); "
        f"{stolen(ticks, machine_ticks())}"
    )
    targets = [
        Target("p99 submit ms", percentile(mixed.latencies["submit"], 0.99), 150),
        Target("p99 poll ms", percentile(mixed.latencies["poll"], 0.99), 50),
        Target("dropped connections", mixed.dropped, 1),
    ]
    return Outcome(mixed.errors, targets, mixed.dropped)


def rate_report(bench: Bench) -> Outcome:
    cpu = bench.server.cpu()
    rate, stats = asyncio.run(
        submit_rate_phase(bench.server.url, bench.tokens, bench.baseline, bench.source, 15.0)
    )
    cpu = bench.server.cpu() - cpu
    submits = len(stats.latencies["submit"])
    print(
        f"submit rate (16 agents back to back, 15 s): {rate:.1f} submits/s, "
        f"{cpu / max(submits, 1) * 1000:.1f} ms server CPU per submit"
    )
    print(f"  submit   {describe(stats.latencies['submit'])}")
    return Outcome(stats.errors, [Target("submits/s", rate, None, lower_is_better=False)], stats.dropped)


def cycles_report(bench: Bench) -> Outcome:
    seed_queue(bench.db, 5000, bench.baseline, blob_sha(bench.train_py.read_bytes()), bench.agent_ids[0])
    result = asyncio.run(cycles_phase(bench.server, bench.tokens["worker"], bench.args.workers, 15.0))
    print(
        f"claim-and-report: {result.per_s:.1f} cycles/s with {bench.args.workers} workers, "
        f"{result.cpu_per_cycle_s * 1000:.1f} ms server CPU per cycle"
    )
    postgres = (
        f", PostgreSQL {result.postgres_cpu_per_cycle_s * 1000:.1f} ms" if bench.kind == "postgresql" else ""
    )
    print(
        f"  CPU per cycle elsewhere: load generator {result.load_cpu_per_cycle_s * 1000:.1f} ms{postgres} "
        f"(the machine has {os.cpu_count()} cores)"
    )
    print(
        f"  reference GET /healthz: {result.health_per_s:.1f}/s, {result.cpu_per_health_s * 1000:.2f} ms "
        f"server CPU each (one cycle costs {result.cpu_per_cycle_s / result.cpu_per_health_s:.1f} "
        "health checks)"
    )
    print(f"  {machine_load()}")
    print(f"  claim    {describe(result.stats.latencies['claim'])}")
    print(f"  result   {describe(result.stats.latencies['result'])}")
    target = 100 if bench.kind == "postgresql" else None  # a target on PostgreSQL only
    cycles = Target("claim-and-report cycles/s", result.per_s, target, lower_is_better=False)
    return Outcome(result.stats.errors, [cycles], result.stats.dropped)


def reads_report(bench: Bench) -> Outcome:
    started = time.monotonic()
    with bench.db.read() as session:
        added = max(0, bench.args.experiments - sum(counts(session)[0].values()))
    if added:  # finished experiments, none kept: the best and its lineage stay as the mixed phase left them
        seed_experiments(bench.db, added, in_flight=0, agents=bench.agents, kept=0.0)
    print(
        f"reads with {bench.args.experiments} experiments stored ({added} bulk-inserted in "
        f"{time.monotonic() - started:.1f} s):",
        flush=True,
    )
    reads = asyncio.run(reads_phase(bench.server.url, 20))
    for name, values in reads.latencies.items():
        print(f"  {name:34s} {describe(values)}")
    first_page = percentile(reads.latencies["experiments (first page)"], 0.99)
    targets = [
        Target("p99 GET /leaderboard ms", percentile(reads.latencies["leaderboard"], 0.99), 100),
        Target("p99 GET /experiments ms", first_page, 100),
    ]
    return Outcome(reads.errors, targets, reads.dropped)


def run_phase(bench: Bench, phase: str) -> list[str]:
    """The phase `--runs` times; its figures in each run and the worst of them. Returns the errors."""
    runs = bench.args.runs
    outcomes = []
    for number in range(1, runs + 1):
        print(f"--- {phase}, run {number} of {runs} ---", flush=True)
        outcomes.append(PHASES[phase](bench))
        for target in outcomes[-1].targets:
            print(target.line())
    worst: dict[str, Target] = {}
    for target in (target for outcome in outcomes for target in outcome.targets):
        worst[target.label] = worst[target.label].worse(target) if target.label in worst else target
    print(f"{phase}, worst of {runs} runs ({machine_load()}):")
    for target in worst.values():
        print(target.line())
    errors = [error for outcome in outcomes for error in outcome.errors]
    if errors:
        dropped = sum(outcome.dropped for outcome in outcomes)
        print(f"  FAILED: {len(errors)} errors, {dropped} of them transport errors (dropped connections)")
    return errors


PHASES = {"mixed": mixed_report, "rate": rate_report, "cycles": cycles_report, "reads": reads_report}


def run_database(kind: str, database_url: str, args: argparse.Namespace, folder: Path) -> bool:
    print(f"\n=== {kind} ({machine_load()}) ===", flush=True)
    settings = ServerSettings(
        data_dir=folder, database_url=database_url, harness_id=HARNESS_ID, platform=PLATFORM
    )
    train_py, program_md = baseline_source()
    init_project(settings, train_py, program_md)
    db = Database(create_db_engine(settings.resolved_database_url))
    agents = [f"bench-agent-{i}" for i in range(max(args.agents, 16))]
    with db.write() as session:
        tokens = {
            "agents": [create_token(session, "agent", name) for name in agents],
            "worker": create_token(session, "worker", "bench-workers"),
        }
    with db.read() as session:
        baseline = load_track(session).baseline_commit
        agent_ids = list(session.scalars(select(ApiToken.id).where(ApiToken.kind == "agent")))
    assert baseline is not None
    env = server_env(folder, database_url, LEASE_SECONDS="120", PUBLIC_READS="true")
    errors: list[str] = []
    with running_server(env, free_port()) as server:
        bench = Bench(kind, args, db, server, tokens, baseline, train_py, agents, agent_ids)
        for phase in args.phases:
            errors += run_phase(bench, phase)
    db.dispose()
    return not errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--experiments", type=int, default=100_000)
    parser.add_argument("--postgres-url", default=os.environ.get("TEST_POSTGRES_URL"))
    parser.add_argument("--phases", default=",".join(PHASES), help=f"a subset of {','.join(PHASES)}")
    parser.add_argument("--runs", type=int, default=3, help="runs of each phase; the worst is reported")
    args = parser.parse_args()
    args.phases = args.phases.split(",")
    if unknown := sorted(set(args.phases) - set(PHASES)):
        parser.error(f"--phases: unknown {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    ok = True
    root = Path(tempfile.mkdtemp(prefix="api-load-"))
    try:
        with ExitStack() as stack:
            for kind in args.db.split(","):
                folder = root / kind
                folder.mkdir()
                if kind == "sqlite":
                    url = f"sqlite:///{folder / 'bench.db'}"
                elif kind == "postgresql":
                    server = args.postgres_url or stack.enter_context(scratch_cluster())
                    url = new_database(server)
                else:
                    parser.error(f"--db: unknown database {kind!r} (sqlite, postgresql)")
                ok = run_database(kind, url, args, folder) and ok
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
