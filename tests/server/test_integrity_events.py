"""Caught means consequences: a run that ends in an integrity class is an integrity event, its
agent's queued experiments are held (the claim skips them, on SQLite and PostgreSQL) and the
agent is marked in the API until an admin clears the event, which is kept with its evidence."""

from __future__ import annotations

import json

import pytest

from client import ApiError
from protocol.result import INTEGRITY_CLASSES
from server.crud.tokens import ENV_ADMIN_NAME
from tests.kit.cli_process import in_process
from tests.server.conftest import BASELINE, Live, LiveFactory, sim_worker
from tests.server.history_play import NOISE, SOURCE, with_constants


@pytest.mark.parametrize("error_class", sorted(INTEGRITY_CLASSES))
def test_an_integrity_class_holds_the_agent_until_an_admin_clears_it(
    live_any_db: Live, error_class: str
) -> None:
    worker = sim_worker(live_any_db)
    worker.run_next(1.0)  # the baseline
    mallory, alice, admin = (
        live_any_db.client("agent", "mallory"),
        live_any_db.client("agent", "alice"),
        live_any_db.admin(),
    )
    caught = mallory.submit("lookahead", train_py=BASELINE + "# m1\n").id
    held = mallory.submit("lookahead, again", train_py=BASELINE + "# m2\n").id
    other = alice.submit("honest", train_py=BASELINE + "# a1\n").id

    evidence = "the probe rows' predictions changed with text after the cut (row 3, position 41)"
    answer = worker.run_next(None, status="invalid", error_class=error_class, error_message=evidence)
    assert answer.experiment_id == caught and answer.decision == "revert"
    reason = mallory.experiment(caught).reason
    assert f"ended invalid ({error_class}, {evidence})" in reason and "integrity event" in reason
    assert "held" in reason
    (event,) = mallory.integrity_events().items
    assert (event.agent, event.experiment_id, event.run, event.error_class) == (
        "mallory",
        caught,
        1,
        error_class,
    )
    assert event.evidence == evidence and event.cleared_at is None
    assert mallory.integrity_events(open_only=True).items == [event]
    standings = {a.agent: a for a in admin.agents().agents}
    assert standings["mallory"].integrity_events == [event.id] and standings["alice"].integrity_events == []

    # Mallory's next experiment was queued first, but only alice's is handed out; then nothing.
    assert worker.run_next(1.001).experiment_id == other  # not kept: the best stays the base
    assert worker.claim() is None
    assert mallory.experiment(held).status == "queued"

    with pytest.raises(ApiError) as refused:
        mallory.clear_integrity_event(event.id, "it was fine")
    assert refused.value.status == 403
    with pytest.raises(ApiError) as missing:
        admin.clear_integrity_event(event.id + 1000, "no such event")
    assert missing.value.status == 404
    why = "looked at the log: a harness bug, not the agent"
    cleared = admin.clear_integrity_event(event.id, why)
    assert (cleared.cleared_by, cleared.clear_note) == (ENV_ADMIN_NAME, why)
    assert cleared.cleared_at is not None and cleared.evidence == evidence  # kept with its evidence
    with pytest.raises(ApiError) as twice:
        admin.clear_integrity_event(event.id, "again")
    assert twice.value.status == 409 and twice.value.problem["type"].endswith("already-cleared")
    assert mallory.integrity_events(open_only=True).items == []
    assert [e.id for e in mallory.integrity_events().items] == [event.id]
    assert {a.agent: a for a in admin.agents().agents}["mallory"].integrity_events == []
    claim = worker.claim()  # held no more
    assert claim is not None and claim.experiment_id == held


def test_a_kept_best_caught_on_a_repeat_is_revoked_and_the_best_goes_back(
    live_factory: LiveFactory, database_url: str
) -> None:
    """A cheat that passed its own probes and was kept is caught on one of the best's repeats: it
    is reverted, the best is the one it was kept on again (changes queued on it are carried back
    onto that best when claimed), and its agent is held like any other."""
    live = live_factory(database_url, SOURCE, **NOISE)
    worker, mallory = sim_worker(live), live.client("agent", "mallory")
    for value in (1.0, 1.002, 0.998):  # the baseline and its noise
        worker.run_next(value)
    before = mallory.best()
    kept = mallory.submit("reads ahead at 0.1 %", train_py=with_constants(LEARNING_RATE=0.03)).id
    for value in (0.990, 0.991):
        assert worker.run_next(value).experiment_id == kept
    assert mallory.experiment(kept).status == "kept" and mallory.best().experiment_id == kept
    built_on_it = mallory.submit("and a decay", train_py=with_constants(LEARNING_RATE=0.03, DECAY=0.8)).id

    answer = worker.run_next(None, status="invalid", error_class="non_causal", error_message="probe row 3")
    assert (answer.experiment_id, answer.status, answer.decision) == (kept, "reverted", "revert")
    assert "kept, then revoked: run 3 ended invalid (non_causal)" in answer.reason
    assert f"the best is experiment {before.experiment_id} again" in answer.reason
    assert "integrity event" in answer.reason
    best = mallory.best()
    assert (best.commit, best.experiment_id) == (before.commit, before.experiment_id)
    assert mallory.experiment(kept).status == "reverted"
    (event,) = mallory.integrity_events().items
    assert (event.experiment_id, event.run, event.error_class) == (kept, 3, "non_causal")
    # No repeat of the revoked best is left, and mallory's change built on it is held.
    assert worker.claim() is None
    assert mallory.experiment(built_on_it).status == "queued"
    # Cleared, it runs on the restored best: its own change (the decay) without the revoked one.
    live.admin().clear_integrity_event(event.id, "the agent's next change is its own")
    claim = worker.claim()
    assert claim is not None and claim.experiment_id != built_on_it
    assert mallory.experiment(built_on_it).status == "rebased"
    assert "DECAY = 0.8" in claim.train_py and "LEARNING_RATE = 0.03" not in claim.train_py


def test_an_ordinary_failure_is_not_an_integrity_event(live: Live) -> None:
    worker = sim_worker(live)
    worker.run_next(1.0)
    agent = live.client("agent", "alice")
    agent.submit("nan logits", train_py=BASELINE + "# n\n")
    agent.submit("next", train_py=BASELINE + "# next\n")
    worker.run_next(None, status="invalid", error_class="invalid_output", error_message="NaN logits")
    assert agent.integrity_events().items == []
    assert worker.claim() is not None  # alice's next experiment runs


def test_bad_integrity_requests_are_refused(live: Live) -> None:
    admin = live.admin()
    for params in ({"limit": "0"}, {"open": "maybe"}):
        response = admin.http.get("/integrity-events", params=params)
        assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    for body in ({}, {"note": ""}, {"note": "x", "extra": 1}):
        response = admin.http.post("/integrity-events/1/clear", json=body)
        assert response.status_code == 422, body


def test_the_cli_lists_the_events_and_an_admin_clears_one(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = sim_worker(live)
    worker.run_next(1.0)
    live.client("agent", "mallory").submit("lookahead", train_py=BASELINE + "# m\n")
    worker.run_next(None, status="invalid", error_class="non_causal", error_message="row 3 looked ahead")
    agent_token = live.token("agent", "reader")
    listed = in_process(capsys, "integrity", "--open", server=live.url, token=agent_token)
    assert listed.code == 0 and "mallory  experiment 2 run 1  non_causal  OPEN (agent held)" in listed.out
    assert "row 3 looked ahead" in listed.out
    no_why = in_process(capsys, "integrity", "--clear", "1", server=live.url, token="admin-secret")
    assert no_why.code == 1 and "--clear ID needs -m WHY" in no_why.err
    refused = in_process(capsys, "integrity", "--clear", "1", "-m", "ok", server=live.url, token=agent_token)
    assert refused.code != 0 and "403" in refused.err
    clear = ("integrity", "--clear", "1", "-m", "a harness bug", "--json")
    cleared = in_process(capsys, *clear, server=live.url, token="admin-secret")
    assert cleared.code == 0 and json.loads(cleared.out)["clear_note"] == "a harness bug"
    after = in_process(capsys, "integrity", "--open", server=live.url)
    assert after.out.strip() == "no integrity events open"
