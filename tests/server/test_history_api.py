"""Near misses and keep rates through a live server on SQLite and PostgreSQL (GET /near-misses,
GET /keep-rates, the SDK): real submissions judged by the noise-aware rule from the results a
simulated worker reports; the change_kinds store filled by the server's background task after
each decision, and filled in again by the server's start after a downgrade to the schema before
it (migration 0008)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import ApiError, Client
from protocol.schemas import KeepRatesOut
from server.core.migrate import downgrade
from server.main import create_app
from tests.server.conftest import (
    Live,
    init_with_small_baseline,
    make_settings,
    serve,
    sim_worker,
)
from tests.server.history_play import NOISE, SOURCE, play_history, summarised, with_constants


@pytest.fixture
def played(live_factory, database_url: str) -> tuple[Client, dict[str, int]]:  # type: ignore[no-untyped-def]
    """A server on SQLite, then PostgreSQL, with the history played: a reader client, the ids."""
    live = live_factory(database_url, SOURCE, **NOISE)
    return Client(live.url), play_history(live)


def test_near_misses_are_the_reverted_gains_strongest_evidence_first(
    played: tuple[Client, dict[str, int]],
) -> None:
    reader, ids = played
    found = reader.near_misses()
    assert found.noise_sigma > 0
    assert found.best == reader.best().commit
    items = found.items
    assert [n.experiment_id for n in items] == [ids["lr up, near"], ids["decay up, near"]]
    # The rule on the stored judgements: every reverted, measured experiment with effect < 0.
    for experiment in reader.iter_search(status="reverted"):
        comparison = experiment.comparison
        near = comparison is not None and experiment.valid_runs > 0 and comparison.effect < 0
        assert near == (experiment.id in {n.experiment_id for n in items}), experiment
    # The change that measured worse is within two standard errors of its reference, and still
    # not one: its evidence points the other way.
    worse = reader.experiment(ids["lr down, worse"]).comparison
    assert worse.effect > 0 and worse.effect - 2 * worse.se < 0
    first, second = items
    view = reader.experiment(first.experiment_id)
    assert (first.effect, first.se, first.runs, first.reference_runs) == (
        pytest.approx(view.comparison.effect),
        pytest.approx(view.comparison.se),
        2,
        3,
    )
    assert first.z == pytest.approx(first.effect / first.se) and first.z < second.z < 0
    assert first.pooled_se is False
    assert (first.agent, first.description, first.reason) == ("alice", "lr up, near", view.reason)
    assert first.changes.model_dump() == {
        "parsed": True,
        "constants": [{"name": "LEARNING_RATE", "old": 0.01, "new": 0.02, "direction": "up"}],
        "regions": ["module"],
    }
    # Both were measured on the baseline; the best is now the kept change, which set the learning
    # rate too: the learning rate's diff no longer applies there, the decay's does.
    assert first.reference == second.reference == reader.experiment(1).commit
    assert not first.reference_is_best and not second.reference_is_best
    assert (first.applies_to_best, second.applies_to_best) == (False, True)
    assert [n.experiment_id for n in reader.near_misses(limit=1).items] == [ids["lr up, near"]]


def _kinds(rates: KeepRatesOut) -> list[tuple]:
    return [(k.part, k.name, k.direction, k.tried, k.measured, k.kept, k.alone) for k in rates.kinds]


def test_keep_rates_count_each_decided_change_under_each_of_its_kinds(
    played: tuple[Client, dict[str, int]],
) -> None:
    reader, ids = played
    rates = reader.keep_rates()
    assert (rates.platform, rates.harness_id) == ("cpu", "test-harness")
    overall = rates.overall
    assert (overall.tried, overall.measured, overall.kept, overall.unparsed) == (5, 4, 1, 0)
    assert overall.rate == pytest.approx(0.2) and overall.best.experiment_id == ids["depth and lr up"]
    assert _kinds(rates) == [
        ("region", "module", None, 4, 4, 1, 4),
        ("constant", "LEARNING_RATE", "up", 2, 2, 1, 1),  # alone once: the kept change set DEPTH too
        ("constant", "DECAY", "up", 1, 1, 0, 1),
        ("constant", "DEPTH", "up", 1, 1, 1, 0),
        ("constant", "LEARNING_RATE", "down", 1, 1, 0, 1),
        ("region", "train", None, 1, 0, 0, 1),  # tried, crashed: not measured
    ]
    lr_up = rates.kinds[1]
    kept = reader.experiment(ids["depth and lr up"]).comparison
    assert lr_up.rate == 0.5
    assert lr_up.best.model_dump() == {
        "experiment_id": ids["depth and lr up"],
        "effect": pytest.approx(kept.effect),
        "se": pytest.approx(kept.se),
    }
    assert rates.kinds[5].best is None and rates.kinds[5].rate == 0.0
    assert [k.name for k in reader.keep_rates(part="region").kinds] == ["module", "train"]
    by_name = reader.keep_rates(name="LEARNING_RATE").kinds
    assert [(k.name, k.direction) for k in by_name] == [
        ("LEARNING_RATE", "up"),
        ("LEARNING_RATE", "down"),
    ]
    assert [k.tried for k in reader.keep_rates(min_tried=2).kinds] == [4, 2]
    limited = reader.keep_rates(limit=1)
    assert limited.kinds_total == 6 and len(limited.kinds) == 1


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/near-misses", {"limit": "one"}),
        ("/near-misses", {"limit": "0"}),
        ("/near-misses", {"limit": "101"}),
        ("/keep-rates", {"part": "function"}),
        ("/keep-rates", {"min_tried": "0"}),
        ("/keep-rates", {"limit": "1001"}),
        ("/keep-rates", {"name": ""}),
        ("/keep-rates", {"name": "x" * 201}),
    ],
)
def test_bad_query_parameters_are_422_problems(live: Live, path: str, params: dict[str, str]) -> None:
    with Client(live.url) as reader, pytest.raises(ApiError) as caught:
        reader._send("GET", path, params=params)
    assert caught.value.status == 422, caught.value.problem
    assert caught.value.problem["type"].endswith("validation-error")
    assert caught.value.problem["errors"]


def test_a_server_start_fills_in_the_changes_of_experiments_decided_before_change_kinds(
    tmp_path: Path, database_url: str
) -> None:
    """Decided under revision 0008, downgraded to 0007 (the table and the column go), started
    again: the start migrates and summarises every decided experiment, and the answers are the
    same."""
    settings = make_settings(tmp_path, database_url, **NOISE)
    init_with_small_baseline(settings, tmp_path, SOURCE)
    app = create_app(settings)
    with serve(app) as url:
        play_history(Live(url, app, settings))
        with Client(url) as reader:
            before = (reader.keep_rates(), reader.near_misses())
    downgrade(settings.resolved_database_url, "0007")
    again = create_app(settings)
    try:
        with serve(again) as url, Client(url) as reader:
            assert (reader.keep_rates(), reader.near_misses()) == before
            assert reader.keep_rates().overall.tried == 5
    finally:
        again.state.ctx.db.dispose()


def test_what_is_cached_follows_every_new_decision(live_factory) -> None:  # type: ignore[no-untyped-def]
    """Keep rates and near misses are kept between requests until the decided experiments change."""
    live = live_factory(None, SOURCE, **NOISE)
    worker, agent, reader = sim_worker(live), live.client("agent"), Client(live.url)
    for value in (1.0, 1.002, 0.998):
        worker.run_next(value)
    assert reader.keep_rates().overall.tried == 0 and reader.near_misses().items == []
    for n, value in enumerate((0.9995, 0.9997), 1):  # two gains short of significance
        near = agent.submit(f"decay {n}", train_py=with_constants(DECAY=0.5 + n / 10)).id
        assert worker.run_next(value).decision == "revert"
        summarised(live)
        assert reader.keep_rates().overall.tried == n
        assert reader.keep_rates(part="constant").kinds[0].tried == n
        assert near in [item.experiment_id for item in reader.near_misses().items]
