"""Tracks: one server, a mixed fleet and several presets, each track deciding on its own evidence,
and kept changes ported between them (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from client import ApiError, Client
from server.models import Experiment, Run, Worker
from tests.mcp_session import call, connect_mcp, tool_error
from tests.server.conftest import DEVICE, HARNESS_ID, SimWorker

H100, H100_HARNESS = "NVIDIA H100 80GB HBM3", "h100-harness"


def git(live, *args: str) -> str:
    repo = str(live.settings.resolved_research_repo)
    return subprocess.run(
        ["git", "-C", repo, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def gpu_worker(live, name: str = "h100-0", device: str = H100, harness_id: str = H100_HARNESS) -> SimWorker:
    """A SimWorker on an H100 with the h100 preset, reporting results from there."""
    client = Client(live.url, live.token("worker"))
    answer = client.register(name=name, device=device, memory_gb=80.0, harness_id=harness_id, preset="h100")
    worker = SimWorker(client, answer.worker_id)
    real_report = worker.report

    def report(claim, val_bpb=1.0, status="ok", **fields):
        return real_report(claim, val_bpb, status, device=device, harness_id=harness_id, **fields)

    worker.report = report  # type: ignore[method-assign]
    return worker


def with_depth(source: str, depth: int) -> str:
    return source.replace("DEPTH = 4", f"DEPTH = {depth}")


def test_two_tracks_decide_on_their_own_evidence_and_a_port_on_its_own(
    live_factory, database_url: str, worker_factory, baseline_source: str
) -> None:
    live = live_factory(database_url)
    admin, agent = live.admin(), live.client("agent", "alice")
    gpu = admin.create_track("h100", preset="h100", platforms="NVIDIA H100*")
    assert (gpu.platform, gpu.harness_id, gpu.branch, gpu.queued) == (None, None, "tracks/h100/best", 1)
    assert git(live, "rev-parse", "tracks/h100/best") == gpu.best != git(live, "rev-parse", "best")

    cpu_worker, h100_worker = worker_factory(live, "cpu-0"), gpu_worker(live)
    assert {t.name: (t.platform, t.harness_id) for t in admin.tracks().tracks} == {
        "default": (DEVICE, HARNESS_ID),
        "h100": (H100, H100_HARNESS),  # pinned by the first worker it accepted
    }
    # Each worker is given its own track's work only: the two baselines.
    cpu_base, gpu_base = cpu_worker.claim(), h100_worker.claim()
    assert (cpu_base.experiment_id, gpu_base.experiment_id) == (1, gpu.best_experiment_id)
    assert cpu_worker.claim() is None and h100_worker.claim() is None
    assert cpu_worker.report(cpu_base, 1.0).decision == "keep"
    assert h100_worker.report(gpu_base, 0.90).decision == "keep"

    # With two tracks an agent names one; a base names its own.
    with pytest.raises(ApiError) as which:
        agent.submit("depth 5", train_py=with_depth(baseline_source, 5))
    assert which.value.status == 422 and which.value.type.endswith("track-required")
    assert "default, h100" in which.value.detail
    deeper = agent.submit("depth 5", train_py=with_depth(baseline_source, 5), track="default")
    shallower = agent.submit("depth 3", train_py=with_depth(baseline_source, 3), track="h100")
    assert (deeper.track, shallower.track) == ("default", "h100")
    on_base = agent.submit("depth 6", train_py=with_depth(baseline_source, 6), base=admin.best("h100").commit)
    assert on_base.track == "h100"

    # The same value decides differently on each: each compares with its own best.
    assert cpu_worker.run_next(0.95).model_dump() | {"reason": ""} == {
        "experiment_id": deeper.id, "run": 1, "decision": "keep", "status": "kept", "reason": "",
    }  # fmt: skip
    assert h100_worker.run_next(0.95).decision == "revert"  # worse than the h100 best, 0.90
    assert h100_worker.run_next(0.91).decision == "revert"
    assert admin.best("default").experiment_id == deeper.id
    assert admin.best("h100").experiment_id == gpu.best_experiment_id
    assert git(live, "rev-parse", "best") == deeper.commit
    assert git(live, "rev-parse", "tracks/h100/best") == gpu.best
    assert [e.experiment_id for e in admin.leaderboard("default").lineage] == [1, deeper.id]
    assert [e.experiment_id for e in admin.leaderboard("h100").lineage] == [gpu.best_experiment_id]
    assert {e.id for e in admin.search(track="h100").items} == {
        gpu.best_experiment_id,
        shallower.id,
        on_base.id,
    }
    tsv = admin.results_tsv("h100").splitlines()
    assert len(tsv) == 4 and all(line.split("\t")[0] != deeper.commit[:7] for line in tsv)

    # The kept change goes to the other track, onto its best, and is decided there on its own runs.
    ported = agent.port(deeper.id, "h100")
    assert (ported.track, ported.source, ported.ported_from, ported.base) == (
        "h100",
        "port",
        deeper.id,
        gpu.best,
    )
    assert ported.existing is False and ported.status == "queued"
    assert admin.diff(ported.id) == admin.diff(deeper.id)
    assert agent.port(deeper.id, "h100").id == ported.id  # the same train.py there: that one
    assert cpu_worker.claim() is None  # not the cpu worker's
    outcome = h100_worker.run_next(0.93)
    assert (outcome.experiment_id, outcome.decision) == (ported.id, "revert")  # worse than 0.90 there
    port = admin.experiment(ported.id)
    assert port.best_before.commit == gpu.best and port.comparison.effect == pytest.approx(0.03)
    assert port.comparison.runs == 1  # its own run only: the origin's run on the cpu is not evidence here

    # The transfer view: the change tried on both, with its effect on each.
    (item,) = admin.transfer().items
    assert (item.first_experiment_id, item.description, item.agent) == (deeper.id, "depth 5", "alice")
    assert [(t.track, t.experiment_id, t.decision, t.ported_from) for t in item.tracks] == [
        ("default", deeper.id, "keep", None),
        ("h100", ported.id, "revert", deeper.id),
    ]
    assert [round(t.effect, 4) for t in item.tracks] == [-0.05, 0.03]


def test_workers_serve_the_tracks_that_accept_them_and_are_told_why_not(live, worker_factory) -> None:
    admin = live.admin()
    admin.create_track("h100", preset="h100", platforms="NVIDIA H100*, NVIDIA GH200*")
    client = Client(live.url, live.token("worker"))
    for device, harness_id, preset, kind, words in (
        ("NVIDIA A100", "h-2", "h100", "no-track", "does not match"),
        (H100, "h-2", "cpu", "no-track", "runs preset h100; the worker's preset is cpu"),
    ):
        with pytest.raises(ApiError) as refused:
            client.register(name="odd", device=device, memory_gb=40, harness_id=harness_id, preset=preset)
        assert refused.value.status == 409 and refused.value.type.endswith(kind)
        assert words in refused.value.detail and "track default measures on 'cpu'" in refused.value.detail
        assert len(refused.value.problem["tracks"]) == 2
    with live.ctx.db.read() as session:  # recorded, with its reason, for the workers page
        (odd,) = session.scalars(select(Worker).where(Worker.name == "odd"))
        assert "runs preset h100" in (odd.refused or "")
    first = client.register(name="gh", device="NVIDIA GH200 480GB", memory_gb=96, harness_id="h-2")
    assert first.tracks == ["h100"]  # pinned the h100 track to the GH200: the pattern chose it
    with pytest.raises(ApiError) as pinned:
        client.register(name="h", device=H100, memory_gb=80, harness_id="h-2")
    assert (
        pinned.value.type.endswith("no-track") and "measures on 'NVIDIA GH200 480GB'" in pinned.value.detail
    )
    assert worker_factory(live, "cpu-0").client.register(
        name="cpu-0", device=DEVICE, memory_gb=8, harness_id=HARNESS_ID
    ).tracks == ["default"]
    with pytest.raises(ApiError) as bad:
        client.register(name="x", device=H100, memory_gb=1, harness_id="h", preset="H100!")
    assert bad.value.status == 422


def test_archiving_a_track_cancels_its_queue_and_its_workers_are_told(live, baseline_source: str) -> None:
    admin, agent = live.admin(), live.client("agent")
    created = admin.create_track("spare", platforms="NVIDIA*")
    worker = gpu_worker(live, harness_id="h-spare")
    queued = agent.submit("depth 5", train_py=with_depth(baseline_source, 5), track="spare")
    with pytest.raises(ApiError) as not_admin:
        agent.archive_track("spare")
    assert not_admin.value.status == 403
    archived = admin.archive_track("spare")
    assert archived.archived_at is not None and archived.queued == 0
    assert admin.archive_track("spare").archived_at == archived.archived_at  # twice is once
    assert admin.experiment(created.best_experiment_id).status == "cancelled"
    assert "track spare was archived" in (admin.experiment(queued.id).reason or "")
    with pytest.raises(ApiError) as gone:
        worker.claim()
    assert gone.value.status == 409 and "archived" in gone.value.detail
    with pytest.raises(ApiError) as closed:
        agent.submit("depth 6", train_py=with_depth(baseline_source, 6), track="spare")
    assert closed.value.status == 409 and closed.value.type.endswith("track-archived")
    assert admin.best().track == "default"  # one track left: the default again


def test_each_track_measures_its_own_noise_before_anything_is_compared(
    live_factory, worker_factory, baseline_source: str
) -> None:
    live = live_factory(decision_rule="noise_aware", noise_runs=2, best_repeats=1)
    admin, agent = live.admin(), live.client("agent")
    admin.create_track("h100", platforms="NVIDIA H100*")
    cpu, gpu = worker_factory(live, "cpu-0"), gpu_worker(live)
    for track in ("default", "h100"):
        agent.submit("depth 5", train_py=with_depth(baseline_source, 5), track=track)
    for value in (1.0, 1.002):  # the default track's baseline: measured, its noise with it
        cpu.run_next(value)
    assert cpu.claim().description == "depth 5"  # its gate is open
    first = gpu.claim()
    assert first.description == "baseline"
    assert gpu.claim() is None  # the h100 best is not measured yet: nothing else runs there
    gpu.report(first, 0.9)
    second = gpu.claim()
    assert (second.experiment_id, second.run) == (first.experiment_id, 2)
    assert admin.noise("h100").estimates == []
    gpu.report(second, 0.904)
    (noise,) = admin.noise("h100").estimates
    assert (noise.track, noise.platform, noise.harness_id, noise.df) == ("h100", H100, H100_HARNESS, 1)
    assert noise.sigma == pytest.approx(0.004 / 2**0.5)
    (cpu_noise,) = admin.noise("default").estimates
    assert cpu_noise.sigma == pytest.approx(0.002 / 2**0.5) and cpu_noise.current
    assert gpu.claim().description == "depth 5"


def test_bad_track_arguments_are_precise_and_change_nothing(live, baseline_source: str) -> None:
    admin, agent, reader = live.admin(), live.client("agent"), live.client()
    assert agent.best().track == "default" and reader.tracks().tracks[0].name == "default"
    for request, status, kind in (
        (lambda: reader.best("nope"), 404, "unknown-track"),
        (lambda: reader.leaderboard("Bad Name"), 422, "validation-error"),
        (lambda: agent.submit("x", train_py=baseline_source + "#\n", track="nope"), 404, "unknown-track"),
        (lambda: admin.create_track("default"), 409, "track-exists"),
        (lambda: admin.create_track("new", preset="tpu"), 422, "unknown-preset"),
        (lambda: admin.create_track("-bad"), 422, "validation-error"),
        (
            lambda: admin.create_track("big", train_py="x = '" + "a" * 70_000 + "'\n"),
            413,
            "train-py-too-large",
        ),
        (lambda: agent.create_track("mine"), 403, "admins-only"),
        (lambda: agent.port(1, "default"), 409, "not-kept"),
        (lambda: agent.port(10**6, "default"), 404, "unknown-experiment"),
        (lambda: admin.archive_track("nope"), 404, "unknown-track"),
    ):
        with pytest.raises(ApiError) as refused:
            request()
        assert refused.value.status == status and refused.value.type.endswith(kind), refused.value.problem
        assert refused.value.problem["type"].startswith("https://") and refused.value.detail
    assert [t.name for t in admin.tracks().tracks] == ["default"]
    with live.ctx.db.read() as session:
        assert session.scalars(select(Experiment.id)).all() == [1]
        assert session.scalars(select(Run.experiment_id)).all() == [1]
    assert "tracks/" not in git(live, "for-each-ref", "--format=%(refname)")


def test_a_port_that_does_not_apply_and_a_base_of_another_track_are_refused(
    live, worker_factory, baseline_source: str
) -> None:
    admin, agent = live.admin(), live.client("agent")
    other = baseline_source.replace("WIDTH = 64", "WIDTH = 96")
    admin.create_track("wide", train_py=other, platforms="NVIDIA*", program_md="# Wide\n")
    assert agent.program_md("wide") == "# Wide\n" and "Make val_bpb lower" in agent.program_md("default")
    cpu = worker_factory(live, "cpu-0")
    cpu.run_next(1.0)
    narrower = agent.submit("width 32", edits=[{"old": "WIDTH = 64", "new": "WIDTH = 32"}], track="default")
    assert cpu.run_next(0.9).decision == "keep"
    with pytest.raises(ApiError) as stale:
        agent.port(narrower.id, "wide")  # its context, WIDTH = 64, is not in that track's best
    assert stale.value.status == 409 and stale.value.type.endswith("port-does-not-apply")
    with pytest.raises(ApiError) as same:
        agent.port(narrower.id, "default")
    assert same.value.status == 422 and same.value.type.endswith("same-track")
    with pytest.raises(ApiError) as crossed:
        agent.submit("depth 5", train_py=with_depth(other, 5), base=narrower.commit, track="wide")
    assert crossed.value.status == 422 and crossed.value.type.endswith("base-on-another-track")
    assert "port a kept experiment" in crossed.value.detail
    with live.ctx.db.read() as session:
        assert session.scalar(select(Experiment.id).where(Experiment.source == "port")) is None


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """Run `autoresearch ARGS` in this process with extra environment: (exit status, stdout)."""
    from cli.main import main

    def run(env: dict[str, str], *args: str) -> tuple[int, str]:
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            code = main(list(args))
        return code, capsys.readouterr().out

    return run


def test_the_cli_creates_tracks_submits_to_one_ports_and_shows_the_transfer(
    live, worker_factory, baseline_source: str, cli, tmp_path
) -> None:
    agent_env = {"AUTORESEARCH_SERVER": live.url, "AUTORESEARCH_TOKEN": live.token("agent", "bob")}
    admin_env = {**agent_env, "AUTORESEARCH_TOKEN": "admin-secret"}
    code, out = cli(admin_env, "track", "create", "h100", "--preset", "h100", "--platforms", "NVIDIA H100*")
    assert code == 0 and "track h100 created on branch tracks/h100/best" in out
    code, out = cli(agent_env, "track", "list")
    assert [line.split()[0] for line in out.splitlines()] == ["TRACK", "default", "h100"]
    assert "(NVIDIA H100*)" in out
    cpu, gpu = worker_factory(live, "cpu-0"), gpu_worker(live)
    cpu.run_next(1.0)
    gpu.run_next(0.9)
    change = tmp_path / "train.py"
    change.write_text(with_depth(baseline_source, 5))
    with pytest.raises(SystemExit) as unnamed:
        cli(agent_env, "submit", str(change), "-m", "depth 5")
    assert "422 Track required" in str(unnamed.value) and "$AUTORESEARCH_TRACK" in str(unnamed.value)
    code, out = cli(
        {**agent_env, "AUTORESEARCH_TRACK": "default"}, "submit", str(change), "-m", "depth 5", "-q"
    )
    submitted = int(out)
    assert cpu.run_next(0.95).decision == "keep"
    code, out = cli(agent_env, "port", str(submitted), "--to", "h100", "--json")
    ported = json.loads(out)
    assert (ported["track"], ported["ported_from"], ported["source"]) == ("h100", submitted, "port")
    assert gpu.run_next(0.85).decision == "keep"  # better there too
    code, out = cli(agent_env, "transfer")
    assert out.splitlines()[0] == f"depth 5 (first: experiment {submitted}, bob)"
    assert "keep      -0.0500" in out.splitlines()[1] and "keep      -0.0500" in out.splitlines()[2]
    code, out = cli({**agent_env, "AUTORESEARCH_TRACK": "h100"}, "best", "--json")
    assert json.loads(out)["experiment_id"] == ported["id"]
    code, out = cli(agent_env, "status", "--track", "h100", "--json")
    assert json.loads(out)["best"]["track"] == "h100"
    with pytest.raises(SystemExit) as not_admin:
        cli(agent_env, "track", "archive", "h100")
    assert "403" in str(not_admin.value)
    code, out = cli(admin_env, "track", "archive", "h100")
    assert (code, out.strip()) == (0, "track h100 is archived")


def test_mcp_tools_name_the_track_port_and_show_the_transfer(
    live, worker_factory, baseline_source: str
) -> None:
    live.admin().create_track("h100", platforms="NVIDIA H100*", program_md="# H100 rules\n")
    cpu, gpu = worker_factory(live, "cpu-0"), gpu_worker(live)
    cpu.run_next(1.0)
    gpu.run_next(0.9)
    token = live.token("agent", "carol")

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, token, "http") as client:
            out: dict[str, Any] = {"tracks": await call(client, "tracks", {})}
            out["unnamed"] = await tool_error(client, "best", {})
            out["h100"] = await call(client, "best", {"track": "h100"})
            edits = [{"old": "DEPTH = 4", "new": "DEPTH = 5"}]
            submitted = await call(
                client, "submit", {"description": "depth 5", "edits": edits, "track": "default"}
            )
            out["submitted"] = submitted["experiment"]
            cpu.run_next(0.95)
            out["ported"] = (
                await call(client, "port", {"experiment_id": submitted["experiment"]["id"], "track": "h100"})
            )["experiment"]
            out["bad_track"] = await tool_error(client, "leaderboard", {"track": "nope"})
            gpu.run_next(0.95)
            out["transfer"] = await call(client, "transfer", {})
            out["rules"] = (await client.read_resource("autoresearch://tracks/h100/rules")).contents[0].text
            return out

    out = asyncio.run(scenario())
    assert [t["name"] for t in out["tracks"]["tracks"]] == ["default", "h100"]
    assert out["unnamed"][0].startswith("track-required (422)")
    assert out["h100"]["track"] == "h100" and out["h100"]["val_bpb"] == 0.9
    assert out["submitted"]["track"] == "default"
    assert (out["ported"]["track"], out["ported"]["ported_from"]) == ("h100", out["submitted"]["id"])
    assert out["bad_track"][0].startswith("unknown-track (404)")
    (item,) = out["transfer"]["items"]
    assert [(t["track"], t["decision"]) for t in item["tracks"]] == [("default", "keep"), ("h100", "revert")]
    assert out["rules"] == "# H100 rules\n"
