"""Alembic is the only way the schema is made: upgrade, downgrade and upgrade again, on both databases."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, Table, inspect, text

from server.core.db import create_db_engine
from server.core.migrate import current_revision, downgrade, upgrade
from server.models import (
    Base,
)

TABLES = {
    "tracks",
    "api_tokens",
    "workers",
    "experiments",
    "leases",
    "results",
    "progress_events",
    "idempotency_keys",
    "imported_results",
    "runs",
    "noise_estimates",
    "notes",
    "change_kinds",
    "experiment_changes",
    "experiment_constants",
    "experiment_code_lines",
    "integrity_events",
}
BEFORE_TRACKS = TABLES - {"tracks"} | {"project"}  # 0013 and before: one project row


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def hashed_seed(experiment_id: int, number: int) -> int:
    """A run's seed as migration 0004 computed it, from its numbers (0012 draws queued ones again)."""
    digest = hashlib.sha256(f"autoresearch run {experiment_id}:{number}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 33


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    upgrade(database_url)
    assert current_revision(database_url) == "0015"
    assert _tables(database_url) == TABLES
    downgrade(database_url, "0014")  # the first track becomes the project again
    assert _tables(database_url) == BEFORE_TRACKS
    downgrade(database_url, "0009")  # integrity events go
    assert _tables(database_url) == BEFORE_TRACKS - {"integrity_events"}
    similar = {"experiment_changes", "experiment_constants", "experiment_code_lines", "integrity_events"}
    downgrade(database_url, "0008")  # what changes touched (for similar experiments) goes
    assert _tables(database_url) == BEFORE_TRACKS - similar
    downgrade(database_url, "0004")  # notes and change kinds go too, everything else stays
    assert _tables(database_url) == BEFORE_TRACKS - similar - {"notes", "change_kinds"}
    downgrade(database_url, "base")
    assert current_revision(database_url) is None
    assert _tables(database_url) == set()
    upgrade(database_url)
    assert _tables(database_url) == TABLES


def test_migrations_match_the_models(database_url: str) -> None:
    """The ORM models and the migrated schema agree (autogenerate finds nothing to do)."""
    upgrade(database_url)
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_existing_projects_are_carried_over_to_runs(database_url: str) -> None:
    """A project made before runs existed (revision 0003): each experiment's single run becomes its
    run 1, results and leases follow it, its valid result is its one valid run, and the noise
    estimate starts from the repeats there are (one train.py run twice)."""
    upgrade(database_url, "0003")
    engine = create_db_engine(database_url)
    now = datetime.now(UTC)
    try:
        with engine.begin() as connection:
            tables = {
                name: Table(name, MetaData(), autoload_with=connection)
                for name in (
                    "project",
                    "experiments",
                    "api_tokens",
                    "workers",
                    "leases",
                    "results",
                    "progress_events",
                )
            }
            connection.execute(
                tables["project"].update().values(
                    harness_id="h", platform="gpu", baseline_commit="a" * 40, best_commit="b" * 40,
                    best_experiment_id=2, best_val_bpb=0.99,
                )
            )  # fmt: skip
            connection.execute(
                tables["api_tokens"]
                .insert()
                .values(id=1, kind="worker", name="w", token_hash="x" * 64, created_at=now)
            )
            connection.execute(
                tables["workers"]
                .insert()
                .values(
                    id="w1",
                    token_id=1,
                    name="w",
                    device="gpu",
                    memory_gb=80.0,
                    harness_id="h",
                    registered_at=now,
                    last_seen_at=now,
                )
            )
            rows = [
                # id, commit, blob, status, decision, val_bpb, best before
                (1, "a", "x", "kept", "keep", 1.0, None),
                (2, "b", "y", "kept", "keep", 0.99, 1.0),
                (3, "c", "z", "cancelled", None, 0.995, None),  # cancelled while running, measured
                (4, "d", "z", "reverted", "revert", 0.993, 0.99),  # the same train.py, run again
                (5, "e", "v", "reverted", "revert", None, 0.99),  # crashed
                (6, "f", "u", "queued", None, None, None),
                (7, "g", "t", "running", None, None, None),
            ]
            for id_, commit, blob, status, decision, val_bpb, before in rows:
                connection.execute(
                    tables["experiments"].insert().values(
                        id=id_, source="agent", description=f"e{id_}",
                        base_commit=None if id_ == 1 else "a" * 40, commit_sha=commit * 40,
                        train_py_blob=blob * 40, status=status, attempts=1 if id_ != 6 else 0,
                        cancel_requested=False, created_at=now, queued_at=now, decision=decision,
                        best_before_val_bpb=before, val_bpb=val_bpb, platform="gpu",
                        finished_at=now if status not in ("queued", "running") else None,
                    )
                )  # fmt: skip
                if status == "queued":
                    continue
                connection.execute(
                    tables["leases"].insert().values(
                        id=f"l{id_}", experiment_id=id_, worker_id="w1", attempt=1,
                        state="active" if status == "running" else "finished",
                        claimed_at=now, expires_at=now, ended_at=None,
                    )
                )  # fmt: skip
                connection.execute(
                    tables["progress_events"]
                    .insert()
                    .values(
                        experiment_id=id_,
                        attempt=1,
                        step=1,
                        loss=3.0,
                        fraction=0.5,
                        phase="train",
                        elapsed_s=1.0,
                    )
                )
                if status == "running":
                    continue
                connection.execute(
                    tables["results"].insert().values(
                        id=f"r{id_}", experiment_id=id_, lease_id=f"l{id_}", worker_id="w1", received_at=now,
                        status="ok" if val_bpb is not None else "crash", val_bpb=val_bpb, device="gpu",
                        harness_id="h", sandbox=True, log_tail="", extra={},
                    )
                )  # fmt: skip
        upgrade(database_url, "0006")  # 0007 pools measuring runs only: its own test, below
        with engine.connect() as connection:
            runs = {row.experiment_id: row for row in connection.execute(text("SELECT * FROM runs"))}
            assert {e: (r.number, r.status, r.kind) for e, r in runs.items()} == {
                1: (1, "finished", "first"),
                2: (1, "finished", "first"),
                3: (1, "finished", "first"),
                4: (1, "finished", "first"),
                5: (1, "finished", "first"),
                6: (1, "queued", "first"),
                7: (1, "running", "first"),
            }
            assert runs[6].seed == hashed_seed(6, 1) and runs[7].seed == hashed_seed(7, 1)
            assert runs[1].seed is None
            for table in ("results", "leases", "progress_events"):
                linked = connection.execute(text(f"SELECT experiment_id, run_id FROM {table}")).all()
                assert linked and all(runs[e].id == r for e, r in linked)
            experiments = {
                row.id: row
                for row in connection.execute(text("SELECT id, valid_runs, val_bpb, effect FROM experiments"))
            }
            assert [experiments[i].valid_runs for i in range(1, 8)] == [1, 1, 1, 1, 0, 0, 0]
            assert experiments[4].effect == pytest.approx(0.003) and experiments[1].effect is None
            noise = connection.execute(
                text("SELECT platform, harness_id, sum_sq, df, runs, experiments FROM noise_estimates")
            ).one()
            assert (noise.platform, noise.harness_id, noise.df, noise.runs, noise.experiments) == (
                "gpu",
                "h",
                1,
                2,
                1,
            )
            assert noise.sum_sq == pytest.approx(2 * 0.001**2)  # 0.995 and 0.993 about their mean
            best = connection.execute(
                text("SELECT best_experiment_id, best_since_experiment_id FROM project")
            ).one()
            assert tuple(best) == (2, 7)
        upgrade(database_url, "0012")  # a queued run's seed is drawn again, a running one's kept
        with engine.connect() as connection:
            later = text("SELECT experiment_id, seed FROM runs WHERE experiment_id > 5")
            seeds = dict(connection.execute(later).all())
            assert seeds[6] != hashed_seed(6, 1) and 0 <= seeds[6] < 2**31 and seeds[7] == hashed_seed(7, 1)
        downgrade(database_url, "0003")  # back, keeping each experiment's run 1
        with engine.connect() as connection:
            assert connection.execute(text("SELECT best_val_bpb FROM project")).scalar() == pytest.approx(
                0.99
            )
            assert connection.execute(text("SELECT attempts FROM experiments WHERE id = 7")).scalar() == 1
            assert connection.execute(text("SELECT count(*) FROM results")).scalar() == 5
    finally:
        engine.dispose()


def test_the_noise_is_computed_again_from_measuring_runs(database_url: str) -> None:
    """0007: the estimate pools the baseline's runs and the repeats of kept changes, not the
    candidates' own (screened) runs; downgrade pools every experiment's valid runs again."""
    upgrade(database_url, "0006")
    engine = create_db_engine(database_url)
    now = datetime.now(UTC)
    # experiment -> base, then (run kind, val_bpb) per run; None: a crash
    experiments = {
        1: (None, [("first", 1.0), ("repeat", 1.002), ("repeat", 0.998)]),  # the baseline
        2: ("a", [("first", 0.990), ("confirmation", 0.992), ("repeat", 0.995), ("repeat", 0.997)]),
        3: ("b", [("first", 0.991), ("confirmation", 0.999), ("confirmation", None)]),  # screened
    }
    try:
        with engine.begin() as connection:
            needed = ("project", "api_tokens", "workers", "experiments", "runs", "leases", "results")
            t = {name: Table(name, MetaData(), autoload_with=connection) for name in needed}
            connection.execute(t["project"].update().values(harness_id="h", platform="gpu"))
            connection.execute(
                t["api_tokens"]
                .insert()
                .values(id=1, kind="worker", name="w", token_hash="x" * 64, created_at=now)
            )
            connection.execute(
                t["workers"].insert().values(
                    id="w1", token_id=1, name="w", device="gpu", memory_gb=80.0, harness_id="h",
                    registered_at=now, last_seen_at=now,
                )
            )  # fmt: skip
            for id_, (base, runs) in experiments.items():
                connection.execute(
                    t["experiments"].insert().values(
                        id=id_, source="agent", description=f"e{id_}", commit_sha=str(id_) * 40,
                        base_commit=base and base * 40, status="kept", cancel_requested=False,
                        created_at=now, queued_at=now, valid_runs=0, val_bpb_m2=0.0,
                    )
                )  # fmt: skip
                for number, (kind, value) in enumerate(runs, 1):
                    run_id = id_ * 10 + number
                    connection.execute(
                        t["runs"].insert().values(
                            id=run_id, experiment_id=id_, number=number, kind=kind, status="finished",
                            attempts=1, queued_at=now,
                        )
                    )  # fmt: skip
                    connection.execute(
                        t["leases"].insert().values(
                            id=f"l{run_id}", experiment_id=id_, run_id=run_id, worker_id="w1", attempt=1,
                            state="finished", claimed_at=now, expires_at=now,
                        )
                    )  # fmt: skip
                    connection.execute(
                        t["results"].insert().values(
                            id=f"r{run_id}", experiment_id=id_, run_id=run_id, lease_id=f"l{run_id}",
                            worker_id="w1", received_at=now, status="ok" if value else "crash",
                            val_bpb=value, device="gpu", harness_id="h", sandbox=True, log_tail="", extra={},
                        )
                    )  # fmt: skip

        def estimate() -> tuple[int, int, int, float]:
            with engine.connect() as connection:
                row = connection.execute(
                    text("SELECT df, runs, experiments, sum_sq FROM noise_estimates")
                ).one()
            return row.df, row.runs, row.experiments, row.sum_sq

        def m2(*values: float) -> float:
            return sum((v - sum(values) / len(values)) ** 2 for v in values)

        upgrade(database_url)
        df, runs, count, sum_sq = estimate()
        assert (df, runs, count) == (3, 5, 2)  # the baseline's 3 runs, the kept change's 2 repeats
        assert sum_sq == pytest.approx(m2(1.0, 1.002, 0.998) + m2(0.995, 0.997))
        downgrade(database_url, "0006")
        df, runs, count, sum_sq = estimate()
        assert (df, runs, count) == (2 + 3 + 1, 3 + 4 + 2, 3)  # every valid run, as before 0007
        assert sum_sq == pytest.approx(
            m2(1.0, 1.002, 0.998) + m2(0.990, 0.992, 0.995, 0.997) + m2(0.991, 0.999)
        )
    finally:
        engine.dispose()


@pytest.mark.parametrize(("before", "revision"), [("0010", "0011"), ("0012", "0013")])
def test_summaries_of_changes_are_forgotten_to_be_made_again_with_knobs(
    database_url: str, before: str, revision: str
) -> None:
    """Revisions 0011 (knobs) and 0013 (tuple knobs): what each change set is derived data,
    summarised again at the next start; nothing else goes."""
    upgrade(database_url, before)
    engine = create_db_engine(database_url)
    derived = ("experiment_code_lines", "experiment_constants", "experiment_changes", "change_kinds")
    try:
        now = datetime.now(UTC)
        with engine.begin() as connection:  # the tables as they are at `before`, not as the models say
            t = {
                name: Table(name, MetaData(), autoload_with=connection) for name in ("experiments", *derived)
            }
            connection.execute(
                t["experiments"].insert().values(
                    id=1, source="agent", description="wider", base_commit="a" * 40, commit_sha="b" * 40,
                    status="reverted", decision="revert", changes_parsed=True, cancel_requested=False,
                    created_at=now, queued_at=now, valid_runs=0, val_bpb_m2=0.0,
                )
            )  # fmt: skip
            connection.execute(
                t["experiment_changes"].insert().values(
                    experiment_id=1, parsed=True, lines_sha="c" * 64, shape_sha=None, code_lines=0,
                    summary={}, touched="",
                )
            )  # fmt: skip
            connection.execute(
                t["experiment_constants"].insert().values(experiment_id=1, name="WIDTH", value=2.0)
            )
            connection.execute(t["experiment_code_lines"].insert().values(experiment_id=1, line_sha="d" * 64))
            connection.execute(
                t["change_kinds"]
                .insert()
                .values(experiment_id=1, part="constant", name="WIDTH", direction="up", old=1.0, new=2.0)
            )
        upgrade(database_url, revision)
        with engine.connect() as connection:
            counts = {
                table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar() for table in derived
            }
            experiment = connection.execute(text("SELECT description, changes_parsed FROM experiments")).one()
    finally:
        engine.dispose()
    assert counts == dict.fromkeys(derived, 0)
    assert tuple(experiment) == ("wider", None)


def test_the_project_becomes_the_first_track_with_its_whole_history(database_url: str) -> None:
    """0015: a single-project database (0014) keeps every experiment, run, result, note, noise
    estimate, imported row and its best, now the first track's; downgrade gives the project back,
    and refuses while another track has experiments."""
    upgrade(database_url, "0014")
    engine = create_db_engine(database_url)
    now = datetime.now(UTC)
    names = ("project", "api_tokens", "workers", "experiments", "runs", "leases", "results", "notes")
    try:
        with engine.begin() as connection:
            t = {name: Table(name, MetaData(), autoload_with=connection) for name in names}
            t |= {
                n: Table(n, MetaData(), autoload_with=connection)
                for n in ("noise_estimates", "imported_results")
            }
            connection.execute(
                t["project"].update().values(
                    harness_id="h", platform="gpu", baseline_commit="1" * 40, best_commit="2" * 40,
                    best_experiment_id=2, best_since_experiment_id=3,
                )
            )  # fmt: skip
            connection.execute(
                t["api_tokens"].insert(),
                [
                    {"id": 1, "kind": "worker", "name": "w", "token_hash": "x" * 64, "created_at": now},
                    {"id": 2, "kind": "agent", "name": "alice", "token_hash": "y" * 64, "created_at": now},
                ],
            )
            connection.execute(
                t["workers"].insert().values(
                    id="w1", token_id=1, name="w", device="gpu", memory_gb=80.0, harness_id="h",
                    registered_at=now, last_seen_at=now,
                )
            )  # fmt: skip
            for id_, base, status in ((1, None, "kept"), (2, "1", "kept"), (3, "2", "queued")):
                connection.execute(
                    t["experiments"].insert().values(
                        id=id_, agent_id=None if base is None else 2, source="agent", description=f"e{id_}",
                        base_commit=base and base * 40, commit_sha=str(id_) * 40, status=status,
                        cancel_requested=False, created_at=now, queued_at=now, valid_runs=1, val_bpb_m2=0.0,
                        val_bpb=None if status == "queued" else 1.0 - id_ / 100,
                    )
                )  # fmt: skip
                finished = status != "queued"
                connection.execute(
                    t["runs"].insert().values(
                        id=id_, experiment_id=id_, number=1, kind="first", attempts=int(finished),
                        status="finished" if finished else "queued", queued_at=now, seed=id_,
                    )
                )  # fmt: skip
                if finished:
                    connection.execute(
                        t["leases"].insert().values(
                            id=f"l{id_}", experiment_id=id_, run_id=id_, worker_id="w1", attempt=1,
                            state="finished", claimed_at=now, expires_at=now,
                        )
                    )  # fmt: skip
                    connection.execute(
                        t["results"].insert().values(
                            id=f"r{id_}", experiment_id=id_, run_id=id_, lease_id=f"l{id_}", worker_id="w1",
                            received_at=now, status="ok", val_bpb=1.0 - id_ / 100, device="gpu",
                            harness_id="h", sandbox=True, log_tail="", extra={},
                        )
                    )  # fmt: skip
            connection.execute(
                t["notes"].insert().values(author_id=2, text="depth helps", experiment_id=2, created_at=now)
            )
            connection.execute(
                t["noise_estimates"]
                .insert()
                .values(
                    platform="gpu", harness_id="h", sum_sq=2e-6, df=2, runs=3, experiments=1, updated_at=now
                )
            )
            connection.execute(
                t["imported_results"].insert().values(
                    commit="abcdef0", val_bpb=0.99, memory_gb=40.0, status="keep", description="old",
                    imported_at=now,
                )
            )  # fmt: skip

        upgrade(database_url)
        with engine.connect() as connection:
            track = connection.execute(text("SELECT * FROM tracks")).mappings().one()
            pins = ("id", "name", "harness_id", "platform", "preset", "platforms")
            assert [track[k] for k in pins] == [1, "default", "h", "gpu", None, None]
            assert (track["baseline_commit"], track["best_commit"]) == ("1" * 40, "2" * 40)
            assert (track["best_experiment_id"], track["best_since_experiment_id"], track["archived_at"]) == (
                2,
                3,
                None,
            )
            for table, count in (
                ("experiments", 3),
                ("runs", 3),
                ("imported_results", 1),
                ("noise_estimates", 1),
            ):
                rows = connection.execute(text(f"SELECT track_id FROM {table}")).scalars().all()
                assert rows == [1] * count, table
            assert connection.execute(text("SELECT count(*) FROM results")).scalar() == 2
            assert connection.execute(text("SELECT count(*) FROM leases")).scalar() == 2
            assert connection.execute(text("SELECT text FROM notes")).scalars().all() == ["depth helps"]
            noise = connection.execute(
                text("SELECT platform, harness_id, sum_sq, df FROM noise_estimates")
            ).one()
            assert tuple(noise) == ("gpu", "h", pytest.approx(2e-6), 2)
            statuses = connection.execute(
                text("SELECT id, status, val_bpb FROM experiments ORDER BY id")
            ).all()
            assert [tuple(row) for row in statuses] == [
                (1, "kept", 0.99),
                (2, "kept", 0.98),
                (3, "queued", None),
            ]
            refused = connection.execute(text("SELECT refused, preset FROM workers")).one()
            assert tuple(refused) == (None, None)

        with engine.begin() as connection:  # a second track with an experiment: a downgrade would lose it
            connection.execute(
                text("INSERT INTO tracks (id, name, created_at, updated_at) VALUES (2, 'h100', :now, :now)"),
                {"now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO experiments (id, track_id, source, description, commit_sha, status, "
                    "cancel_requested, created_at, queued_at, valid_runs, val_bpb_m2) VALUES "
                    "(4, 2, 'baseline', 'baseline', :c, 'queued', false, :now, :now, 0, 0)"
                ),
                {"c": "4" * 40, "now": now},
            )
        with pytest.raises(RuntimeError, match="1 experiments belong to tracks other than the first"):
            downgrade(database_url, "0014")
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM experiments WHERE track_id = 2"))
            connection.execute(text("DELETE FROM tracks WHERE id = 2"))
        downgrade(database_url, "0014")
        with engine.connect() as connection:
            project = connection.execute(
                text(
                    "SELECT harness_id, platform, best_commit, best_experiment_id, best_since_experiment_id "
                    "FROM project"
                )
            ).one()
            assert tuple(project) == ("h", "gpu", "2" * 40, 2, 3)
            assert connection.execute(text("SELECT count(*) FROM experiments")).scalar() == 3
            assert connection.execute(text("SELECT df FROM noise_estimates")).scalar() == 2
    finally:
        engine.dispose()
