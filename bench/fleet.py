"""A fleet of simulated workers at the h100 budget against one real server on PostgreSQL.

    python bench/fleet.py [--workers 100,1000] [--runs 3] [--busy 120] [--idle 30] [--run-s 330]
                          [--tracks 20] [--postgres-url URL]

Each simulated worker does what `autoresearch work` does, on a keep-alive connection of its own
(bench/lean_http.py: one asyncio process simulates the whole fleet cheaply): register, claim
with a 5 s long poll, heartbeat every `heartbeat_seconds` (from its registration), send progress
every `progress_seconds` (from the claim and heartbeat answers; 1 s from servers that do not say)
with the steps made since the last batch (3 steps/s, the h100 baseline's pace; at most
MAX_EVENTS_PER_CALL of them, as the worker sends), report the
result after `--run-s` seconds (the h100 budget, startup and scoring), and claim again.

For each fleet size, on a fresh database and server (`autoresearch serve`, a separate process):

1. idle: the queue is empty and every worker holds a long poll. Reported: how much later than
   the 5 s it asked for each empty answer (204) came (negative: earlier; the server ends each
   long poll in its last tenth, server/fleet.py).
2. busy: the queue always holds work (bulk-inserted), so every worker runs experiments; each
   worker's first run has a random part of `--run-s` left, so the fleet is in steady state
   (claims and results spread evenly) rather than starting together. The first 20 s are not
   measured. Reported: p99 of claim, heartbeat, progress and result.

The reference, measured in the same phase: GET /healthz every 100 ms from one more connection
(the HTTP stack and a `SELECT 1` under the same load). Target: p99 under 200 ms on every worker
endpoint with the server process under one core (its CPU time over the phase, from /proc; the
load generator's and PostgreSQL's are reported apart: they share the machine's cores). With
`--runs N` every fleet size is measured N times and the worst figures are summed up at the end.
With `--tracks N` (N > 1) each fleet size is measured twice in every run, one after the other:
with the whole fleet on one track, then on N tracks (N - 1 created through POST /tracks, each
pinned to a device of its own; worker i serves track i mod N, and the queue is spread over them),
and the worst figures of the N tracks are compared with those of one track (ratios; the target
is at most 1.2x the p99 and the CPU).
Errors (an unexpected status or a transport error) make the exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import resource
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit, beside bench/

import httpx
from api_load import (
    HARNESS_ID,
    PLATFORM,
    ServerProcess,
    SimulatedResults,
    baseline_source,
    describe,
    machine_load,
    percentile,
    postgres_cpu_seconds,
    register,
    result_body,
    running_server,
    seed_queue,
    server_env,
)
from lean_http import LeanClient
from sqlalchemy import select

from protocol.spread import spread
from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.crud.tokens import create_token
from server.crud.tracks import load_track
from server.models import ApiToken, Track
from server.project_init import init_project
from server.trainpy.research_repo import blob_sha
from testkit.pg_scratch import free_port, new_database, scratch_cluster
from worker.lease import MAX_BUFFERED_EVENTS, MAX_EVENTS_PER_CALL
from worker.main import CLAIM_WAIT_S

STEPS_PER_S = 3.0  # the h100 baseline's pace: about 950 steps in 300 s
WARMUP_S = 20.0  # the busy phase's first seconds (the claims that start it) are not measured
TARGET_P99_MS = 200.0
TARGET_RATIO = 1.2  # N tracks against one, the same fleet: p99 and server CPU
ADMIN = "bench-admin"
ENDPOINTS = ("claim", "heartbeat", "progress", "result")


@dataclass
class Record:
    """Latencies (ms) by endpoint, each with when its answer came; errors."""

    latencies: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    progress_seconds: list[float] = field(default_factory=list)

    def add(self, name: str, sent: float, ms: float) -> None:
        self.latencies[name].append((sent + ms / 1000, ms))

    def error(self, what: str) -> None:
        if len(self.errors) < 10:
            print(f"  error: {what}", flush=True)
        self.errors.append(what)

    def window(self, name: str, start: float, end: float) -> list[float]:
        return [ms for done, ms in self.latencies[name] if start <= done < end]


@dataclass
class Simulated:
    """One simulated worker: its connection, id, and what the server told it."""

    http: LeanClient
    worker_id: str
    heartbeat_s: float
    progress_s: float = 1.0
    runs: int = 0
    device: str = PLATFORM  # its track's platform


@dataclass
class FleetRun:
    url: str
    token: str
    run_s: float
    record: Record
    # By track (a worker's device): each track's best follows its own keeps.
    results: defaultdict[str, SimulatedResults] = field(default_factory=lambda: defaultdict(SimulatedResults))
    queue_filled: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def call(self, worker: Simulated, name: str, path: str, body: Any, ok: int) -> Any:
        sent = time.monotonic()
        try:
            answer = await worker.http.post(path, json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            self.record.error(f"{name} {exc}")
            return None
        self.record.add(name, sent, (time.monotonic() - sent) * 1000)
        if answer.status_code != ok:
            self.record.error(f"{name} {answer.status_code} {answer.text[:200]}")
            return None
        return answer.json() if answer.content else {}

    async def worker(self, worker: Simulated) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            body = {"worker_id": worker.worker_id, "wait_s": CLAIM_WAIT_S}
            try:
                answer = await worker.http.post("/api/v1/worker/claim", json=body, headers=self.headers)
            except httpx.HTTPError as exc:
                self.record.error(f"claim {exc}")
                continue
            took = time.monotonic() - sent
            if answer.status_code == 204:
                self.record.add("long poll (late by)", sent, (took - CLAIM_WAIT_S) * 1000)
                continue
            if answer.status_code != 200:
                self.record.error(f"claim {answer.status_code} {answer.text[:200]}")
                continue
            self.record.add("claim", sent, took * 1000)
            await self.run(worker, answer.json())

    async def run(self, worker: Simulated, claimed: dict[str, Any]) -> None:
        """Heartbeats and progress while the run lasts, then the result."""
        worker.progress_s = float(claimed.get("progress_seconds", 1.0))
        self.record.progress_seconds.append(worker.progress_s)
        base = f"/api/v1/worker/leases/{claimed['lease_id']}"
        now = time.monotonic()
        # The first run is already under way (a fleet in steady state); later ones start now.
        left = random.uniform(0, self.run_s) if worker.runs == 0 else self.run_s
        worker.runs += 1
        end = now + left
        next_beat = now + (random.uniform(0, worker.heartbeat_s) if worker.runs == 1 else worker.heartbeat_s)
        last_progress = now
        next_progress = now + random.uniform(0, worker.progress_s)
        while True:
            wake = min(end, next_beat, next_progress)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_progress:
                # What the worker sends: the newest steps it kept, a few of them (worker/lease.py).
                steps = max(1, min(MAX_BUFFERED_EVENTS, round((now - last_progress) * STEPS_PER_S)))
                events = [{"step": i, "loss": 3.5, "fraction": 0.5} for i in range(steps)]
                events = spread(events, MAX_EVENTS_PER_CALL)
                await self.call(worker, "progress", f"{base}/progress", {"events": events}, 204)
                last_progress = now
                next_progress = now + worker.progress_s
            if now >= next_beat:
                beat = await self.call(worker, "heartbeat", f"{base}/heartbeat", {}, 200)
                if beat is not None and "progress_seconds" in beat:
                    worker.progress_s = float(beat["progress_seconds"])
                next_beat = now + worker.heartbeat_s
        results = self.results[worker.device]
        body = result_body(results.value(claimed["experiment_id"]), worker.device)
        outcome = await self.call(worker, "result", f"{base}/result", body, 200)
        if outcome is not None:
            results.answered(outcome)

    async def probe(self) -> None:
        """The reference: GET /healthz every 100 ms on a connection of its own."""
        http = LeanClient(self.url)
        try:
            while not self.stop.is_set():
                sent = time.monotonic()
                answer = await http.get("/api/v1/healthz")
                self.record.add("healthz (reference)", sent, (time.monotonic() - sent) * 1000)
                if answer.status_code != 200:
                    self.record.error(f"healthz {answer.status_code}")
                await asyncio.sleep(0.1)
        finally:
            await http.aclose()


@dataclass
class Usage:
    """CPU seconds of the server, this process and PostgreSQL between two points, and the server's memory."""

    server: float
    own: float
    postgres: float

    @staticmethod
    def now(server: ServerProcess) -> Usage:
        return Usage(server.cpu(), time.process_time(), postgres_cpu_seconds())

    def since(self, before: Usage) -> Usage:
        return Usage(self.server - before.server, self.own - before.own, self.postgres - before.postgres)


def memory_mib(pid: int) -> tuple[float, float]:
    """The process's resident memory now and at its peak (VmRSS, VmHWM), in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@dataclass
class Phase:
    """What one phase measured."""

    seconds: float
    p99: dict[str, float]
    usage: Usage
    rss_mib: float
    peak_mib: float
    progress_s: float


def report(
    label: str, record: Record, start: float, end: float, usage: Usage, server: ServerProcess
) -> Phase:
    seconds = end - start
    rss, peak = memory_mib(server.pid)
    print(f"  {label}, {seconds:.0f} s measured; {machine_load()}")
    p99 = {}
    for name in [*ENDPOINTS, "long poll (late by)", "healthz (reference)"]:
        values = record.window(name, start, end)
        if values:
            print(f"    {name:22s} {describe(values)}")
            p99[name] = percentile(values, 0.99)
    print(
        f"    server CPU {usage.server / seconds * 100:.0f}% of one core, memory {rss:.0f} MiB "
        f"(peak {peak:.0f} MiB); load generator {usage.own / seconds * 100:.0f}%, PostgreSQL "
        f"{usage.postgres / seconds * 100:.0f}%"
    )
    told = sorted(record.progress_seconds)
    progress_s = told[len(told) // 2] if told else 1.0
    return Phase(seconds, p99, usage, rss, peak, progress_s)


def set_up(database_url: str, folder: Path) -> tuple[Database, str, str, int]:
    """A project (baseline queued) and a worker token; the baseline commit and an agent id."""
    settings = ServerSettings(
        data_dir=folder, database_url=database_url, harness_id=HARNESS_ID, platform=PLATFORM
    )
    init_project(settings, *baseline_source())
    db = Database(create_db_engine(settings.resolved_database_url))
    with db.write() as session:
        token = create_token(session, "worker", "fleet")
        create_token(session, "agent", "fleet-agent")
    with db.read() as session:
        baseline = load_track(session).baseline_commit
        agent_id = session.scalar(select(ApiToken.id).where(ApiToken.kind == "agent"))
    assert baseline is not None and agent_id is not None
    return db, token, baseline, agent_id


async def create_tracks(db: Database, url: str, count: int) -> tuple[list[str], list[tuple[int, str]]]:
    """`count` tracks in all (the first exists): each one's device, and its id and baseline commit."""
    devices, tracks = [PLATFORM], []
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as http:
        for index in range(1, count):
            device = f"{PLATFORM}-{index}"
            body = {"name": f"track-{index}", "platform": device, "harness_id": HARNESS_ID}
            answer = await http.post("/api/v1/tracks", json=body, timeout=60)
            if answer.status_code != 201:
                raise RuntimeError(f"create track: {answer.status_code} {answer.text[:200]}")
            devices.append(device)
    with db.read() as session:
        tracks = [(t.id, t.baseline_commit or "") for t in session.scalars(select(Track).order_by(Track.id))]
    return devices, tracks


async def register_fleet(fleet: FleetRun, size: int, devices: list[str]) -> list[Simulated]:
    """`size` workers, worker i on devices[i mod len(devices)] (so of the track of that platform)."""

    async def one(index: int) -> Simulated:
        http = LeanClient(fleet.url)
        device = devices[index % len(devices)]
        answer = await http.post(
            "/api/v1/worker/register",
            json={"name": f"gpu{index}", "device": device, "memory_gb": 80.0, "harness_id": HARNESS_ID},
            headers=fleet.headers,
        )
        if answer.status_code != 200:
            raise RuntimeError(f"register: {answer.status_code} {answer.text[:200]}")
        heartbeat_s = float(answer.json()["heartbeat_seconds"])
        return Simulated(http, answer.json()["worker_id"], heartbeat_s, device=device)

    workers: list[Simulated] = []
    for first in range(0, size, 50):  # registrations lock the project row: a few at a time
        workers += await asyncio.gather(*(one(i) for i in range(first, min(size, first + 50))))
    return workers


async def measure_baseline(fleet: FleetRun, worker: Simulated, device: str = PLATFORM) -> None:
    """Claim and report the baseline's runs of the track of `device` at once: until the noise
    estimate rests on them (NOISE_RUNS runs under the default, noise-aware rule) nothing else is
    handed out there. The values differ a little, as real runs of one commit do, so the estimate is
    not zero."""
    token_worker = await register(worker.http, fleet.token, f"baseline-runner-{device}", device)
    for number in itertools.count():
        answer = await worker.http.post(
            "/api/v1/worker/claim", json={"worker_id": token_worker, "wait_s": 1}, headers=fleet.headers
        )
        if answer.status_code == 204:
            return
        claimed = answer.json()
        await worker.http.post(
            f"/api/v1/worker/leases/{claimed['lease_id']}/result",
            json=result_body(1.0 + 0.002 * (number % 3 - 1), device),
            headers=fleet.headers,
        )


async def fleet_phases(
    server: ServerProcess, db: Database, token: str, baseline: str, agent_id: int, args: argparse.Namespace
) -> tuple[Phase, Phase, Record]:
    size = args.size
    record = Record()
    fleet = FleetRun(server.url, token, args.run_s, record)
    devices, tracks = await create_tracks(db, server.url, args.tracks_now)
    workers = await register_fleet(fleet, size, devices)
    for device in devices:
        await measure_baseline(fleet, workers[0], device)
    tasks = [asyncio.create_task(fleet.worker(worker)) for worker in workers]
    tasks.append(asyncio.create_task(fleet.probe()))
    try:
        # Idle: every worker in its long poll on an empty queue.
        await asyncio.sleep(CLAIM_WAIT_S + 1)
        start, before = time.monotonic(), Usage.now(server)
        await asyncio.sleep(args.idle)
        end = time.monotonic()
        label = f"{size} long polls, {args.tracks_now} track{'s' if args.tracks_now > 1 else ''}"
        idle = report(f"idle: {label}", record, start, end, Usage.now(server).since(before), server)
        # Busy: enough queued work for every worker, for the whole phase.
        runs = size * (2 + int((WARMUP_S + args.busy) / args.run_s))
        blob = blob_sha(baseline_source()[0].read_bytes())
        await asyncio.to_thread(seed_queue, db, runs, baseline, blob, agent_id, tracks)
        await asyncio.sleep(WARMUP_S)
        start, before = time.monotonic(), Usage.now(server)
        await asyncio.sleep(args.busy)
        end = time.monotonic()
        busy = report(
            f"busy: {size} workers on {args.tracks_now} track(s) running {args.run_s:.0f} s experiments",
            record,
            start,
            end,
            Usage.now(server).since(before),
            server,
        )
    finally:
        fleet.stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for worker in workers:
            await worker.http.aclose()
    return idle, busy, record


def targets(size: int, idle: Phase, busy: Phase) -> list[str]:
    lines = []
    for phase, names in ((busy, ENDPOINTS), (idle, ("long poll (late by)",))):
        for name in names:
            value = phase.p99.get(name, float("nan"))
            met = value < TARGET_P99_MS
            lines.append(f"  {'met ' if met else 'MISS'}  {size} workers: p99 {name} {value:.1f} ms (< 200)")
    for label, phase in (("busy", busy), ("idle", idle)):
        cpu = phase.usage.server / phase.seconds
        lines.append(
            f"  {'met ' if cpu < 1 else 'MISS'}  {size} workers, {label}: server CPU {cpu:.2f} cores (< 1)"
        )
    return lines


def run_size(database_url: str, folder: Path, args: argparse.Namespace) -> tuple[Phase, Phase, bool]:
    db, token, baseline, agent_id = set_up(database_url, folder)
    with running_server(server_env(folder, database_url, ADMIN_TOKEN=ADMIN), free_port()) as server:
        idle, busy, record = asyncio.run(fleet_phases(server, db, token, baseline, agent_id, args))
    db.dispose()
    print(f"  progress interval the workers were told: {busy.progress_s:g} s (median)")
    for line in targets(args.size, idle, busy):
        print(line)
    return idle, busy, not record.errors


@contextmanager
def postgres_server(url: str | None) -> Iterator[str]:
    with ExitStack() as stack:
        yield url or stack.enter_context(scratch_cluster())


def raise_open_files() -> None:
    """Each simulated worker holds a connection: the server and this process need the file descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"open files: {soft} -> {hard} (the server inherits it)")


@dataclass(frozen=True)
class Worst:
    """The worst of a fleet size's runs on one number of tracks."""

    busy_p99: dict[str, float]
    late: float  # idle long poll answered late by, p99
    cpu_busy: float  # server cores
    cpu_idle: float
    peak_mib: float
    health: float  # reference GET /healthz p99, busy

    @staticmethod
    def of(phases: list[tuple[Phase, Phase]]) -> Worst:
        return Worst(
            busy_p99={name: max(b.p99.get(name, 0.0) for _i, b in phases) for name in ENDPOINTS},
            late=max(i.p99.get("long poll (late by)", 0.0) for i, _b in phases),
            cpu_busy=max(b.usage.server / b.seconds for _i, b in phases),
            cpu_idle=max(i.usage.server / i.seconds for i, _b in phases),
            peak_mib=max(b.peak_mib for _i, b in phases),
            health=max(b.p99.get("healthz (reference)", 0.0) for _i, b in phases),
        )

    def line(self) -> str:
        return (
            "p99 "
            + ", ".join(f"{name} {value:.0f} ms" for name, value in self.busy_p99.items())
            + f", long poll late by {self.late:.0f} ms; server CPU busy {self.cpu_busy:.2f} / idle "
            f"{self.cpu_idle:.2f} cores, peak memory {self.peak_mib:.0f} MiB; reference healthz p99 "
            f"{self.health:.0f} ms"
        )


def ratios(many: Worst, one: Worst) -> list[tuple[str, float, float, float]]:
    """N tracks against one track, the same fleet: each p99 and the server CPU, as (what, N tracks'
    value, one track's value, their ratio)."""
    pairs = [(f"p99 {name}", many.busy_p99[name], one.busy_p99[name]) for name in ENDPOINTS]
    pairs += [
        ("p99 idle long poll late by", many.late, one.late),
        ("server CPU busy", many.cpu_busy, one.cpu_busy),
        ("server CPU idle", many.cpu_idle, one.cpu_idle),
    ]
    return [(name, value, ref, _ratio(value, ref)) for name, value, ref in pairs]


def _ratio(value: float, reference: float) -> float:
    """value / reference; a reference at or below 0 (long polls that all ended early) is matched
    by a value at or below it (1.0), else infinitely passed."""
    if reference > 0:
        return value / reference
    return 1.0 if value <= reference else float("inf")


def ratio_lines(found: list[tuple[str, float, float, float]]) -> list[str]:
    return [
        f"  {'met ' if ratio <= TARGET_RATIO else 'MISS'}  {name}: {value:.2f} / {ref:.2f} = {ratio:.2f}x "
        f"(<= {TARGET_RATIO}x)"
        for name, value, ref, ratio in found
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="measure each fleet size this many times")
    parser.add_argument("--busy", type=float, default=120.0, help="seconds measured with every worker busy")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds measured with every worker idle")
    parser.add_argument("--run-s", type=float, default=330.0, help="one experiment: h100 budget and scoring")
    parser.add_argument(
        "--tracks", type=int, default=1, help="also measure each size on this many tracks (against one)"
    )
    parser.add_argument("--postgres-url", default=os.environ.get("TEST_POSTGRES_URL"))
    args = parser.parse_args()
    # A stop (SIGTERM) unwinds like Ctrl-C, so the server and PostgreSQL started below are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise_open_files()
    sizes = [int(size) for size in args.workers.split(",")]
    counts = [1] if args.tracks <= 1 else [1, args.tracks]
    worst: dict[tuple[int, int], list[tuple[Phase, Phase]]] = defaultdict(list)
    ok = True
    with postgres_server(args.postgres_url) as postgres, tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        for run in range(args.runs):
            for size in sizes:
                for tracks in counts:
                    print(
                        f"\n=== run {run + 1}: {size} workers, {tracks} track(s) ({machine_load()}) ===",
                        flush=True,
                    )
                    folder = Path(tmp) / f"run{run}-{size}-{tracks}"
                    folder.mkdir()
                    args.size, args.tracks_now = size, tracks
                    idle, busy, clean = run_size(new_database(postgres), folder, args)
                    worst[(size, tracks)].append((idle, busy))
                    ok = ok and clean
    print(f"\n=== worst of {args.runs} run(s) ===")
    for (size, tracks), phases in worst.items():
        print(f"{size:5d} workers, {tracks:2d} track(s): {Worst.of(phases).line()}")
    if len(counts) > 1:
        print(
            f"\n=== {args.tracks} tracks against one track, the same fleet (worst of {args.runs} run(s)) ==="
        )
        for size in sizes:
            print(f"{size} workers:")
            for line in ratio_lines(ratios(Worst.of(worst[(size, args.tracks)]), Worst.of(worst[(size, 1)]))):
                print(line)
            # Each run's pair, measured one after the other: the ratios without the machine's drift
            # between runs (the worst of each side may come from different runs).
            for run, (many, one) in enumerate(zip(worst[(size, args.tracks)], worst[(size, 1)], strict=True)):
                paired = ratios(Worst.of([many]), Worst.of([one]))
                print(
                    f"  run {run + 1}: " + ", ".join(f"{name} {ratio:.2f}x" for name, _v, _r, ratio in paired)
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
