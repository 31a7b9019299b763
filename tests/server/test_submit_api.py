"""POST /experiments over real HTTP with the SDK: accepted changes, precise refusals, retries (the
changes that hold locks and the SQL a submit sends on SQLite and PostgreSQL)."""

from __future__ import annotations

import random
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from client import ApiError, Client
from protocol.schemas import SubmitIn
from server.crud.experiments import get_view
from server.crud.tokens import find_principal
from server.flows.submit import submit
from server.trainpy.patches import make_patch
from tests.server.conftest import Live, LiveFactory


def _edit(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


def test_a_patch_is_committed_on_its_own_ref_with_the_base_as_parent(
    live_any_db: Live, baseline_source: str
) -> None:
    live = live_any_db
    agent = live.client("agent", "alice")
    new = _edit(baseline_source, "LEARNING_RATE = 0.01", "LEARNING_RATE = 0.02")
    experiment = agent.submit("raise lr", patch=make_patch(baseline_source, new), hypothesis="faster")
    assert experiment.status == "queued" and experiment.agent == "alice" and not experiment.existing
    best = agent.best()
    assert experiment.base == best.commit
    repo = str(live.settings.resolved_research_repo)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", repo, *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    ref = f"refs/experiments/{experiment.id}"
    assert git("rev-parse", ref) == experiment.commit
    assert git("rev-parse", f"{ref}^") == best.commit
    assert git("show", f"{ref}:train.py") + "\n" == new
    assert git("log", "-1", "--format=%an%n%B", ref).startswith("alice\nraise lr\n\nHypothesis: faster")
    assert git("diff", "--name-only", f"{ref}^", ref) == "train.py"
    assert git("rev-parse", "--is-bare-repository") == "true"  # no working tree to leave dirty
    git("fsck", "--strict")
    assert agent.diff(experiment.id) == make_patch(baseline_source, new)


def test_a_whole_train_py_is_accepted_too(live, baseline_source: str) -> None:
    agent = live.client("agent")
    new = _edit(baseline_source, "DEPTH = 4", "DEPTH = 6")
    experiment = agent.submit("deeper", train_py=new)
    assert experiment.status == "queued"
    assert agent.diff(experiment.id) == make_patch(baseline_source, new)


def test_search_replace_edits_are_applied_in_order_to_the_base(live, baseline_source: str) -> None:
    agent = live.client("agent")
    edits = [
        {"old": "DEPTH = 4", "new": "DEPTH = 6"},
        {"old": "DEPTH = 6", "new": "DEPTH = 7"},  # the text the first edit left
        {"old": "LEARNING_RATE = 0.01", "new": "LEARNING_RATE = 0.02"},
    ]
    new = _edit(
        _edit(baseline_source, "DEPTH = 4", "DEPTH = 7"), "LEARNING_RATE = 0.01", "LEARNING_RATE = 0.02"
    )
    experiment = agent.submit("deeper, faster", edits=edits)
    assert experiment.status == "queued" and not experiment.existing
    assert agent.diff(experiment.id) == make_patch(baseline_source, new)
    assert agent.submit("the same, whole", train_py=new).id == experiment.id  # the same train.py
    assert [s.experiment_id for s in agent.similar(edits=edits).similar] == [experiment.id]


def test_the_same_train_py_returns_the_existing_experiment(live_any_db: Live, baseline_source: str) -> None:
    live = live_any_db
    alice, bob = live.client("agent"), live.client("agent")
    new = _edit(baseline_source, "WIDTH = 64", "WIDTH = 96")
    first = alice.submit("wider", patch=make_patch(baseline_source, new))
    again = bob.submit("same idea, other words", train_py=new)
    assert again.existing and again.id == first.id and again.description == "wider"
    assert (
        alice.submit("baseline again", train_py=baseline_source.replace("WIDTH = 64", "WIDTH = 64 ")) != first
    )


def test_idempotency_key_makes_retries_safe(live_any_db: Live, baseline_source: str) -> None:
    live = live_any_db
    agent = live.client("agent")
    patch = make_patch(baseline_source, _edit(baseline_source, "DEPTH = 4", "DEPTH = 5"))
    first = agent.submit("d5", patch=patch, idempotency_key="retry-1")
    second = agent.submit("d5", patch=patch, idempotency_key="retry-1")
    assert second.id == first.id and not second.existing  # replayed as the original 201
    with pytest.raises(ApiError) as caught:
        agent.submit("something else", patch=patch, idempotency_key="retry-1")
    assert caught.value.status == 422 and caught.value.type.endswith("idempotency-key-reused")
    assert len(agent.search(agent="baseline").items) == 1


@pytest.fixture
def refused(live, baseline_source: str) -> Callable[..., ApiError]:
    agent = live.client("agent", "carol")

    def submit(**body: object) -> ApiError:
        with pytest.raises(ApiError) as caught:
            agent.submit(**{"description": "x", **body})  # type: ignore[arg-type]
        return caught.value

    return submit


def test_precise_refusals(live, refused: Callable[..., ApiError], baseline_source: str) -> None:
    good = make_patch(baseline_source, _edit(baseline_source, "DEPTH = 4", "DEPTH = 8"))
    # What a candidate computed offline, carried as data (issue 32): refused under the size limit.
    carried_table = "\nBIGRAMS = [" + ", ".join(str(i * 7919 % 4096) for i in range(4000)) + "]\n"
    # The same spelled as names, which no literal bound sees: refused by the information it holds.
    rng = random.Random(32)
    carried_names = "\n\ndef _t():\n" + "".join(f"    v{i:x}_{rng.randbytes(32).hex()}\n" for i in range(720))
    cases = [
        (dict(patch=good.replace("train.py", "model.py")), 422, "patch-path", "only train.py"),
        (
            dict(patch=good.replace("a/train.py", "a/../../etc/train.py")),
            422,
            "patch-path",
            "outside the repo",
        ),
        (
            dict(patch="diff --git a/train.py b/train.py\nold mode 100644\nnew mode 100755\n"),
            422,
            "patch-forbidden",
            "mode",
        ),
        (dict(patch=good.replace("DEPTH = 4", "DEPTH = 3")), 422, "patch-does-not-apply", "hunk 1"),
        (dict(patch="--- a/train.py\n+++ b/train.py\n"), 422, "empty-change", "no hunks"),
        (dict(train_py=baseline_source), 422, "empty-change", "exactly as it is"),
        (dict(patch=good, train_py=baseline_source), 422, "patch-or-train-py", "exactly one"),
        (
            dict(patch=good, edits=[{"old": "DEPTH = 4", "new": "DEPTH = 8"}]),
            422,
            "patch-or-train-py",
            "`edits`",
        ),
        (
            dict(edits=[{"old": "DEPTH = 5", "new": "DEPTH = 8"}]),
            422,
            "edit-not-found",
            "edit 1: `old` does not occur",
        ),
        (
            dict(edits=[{"old": "DEPTH = 4", "new": "DEPTH = 8"}, {"old": " = ", "new": "="}]),
            422,
            "edit-ambiguous",
            "edit 2: `old` occurs",
        ),
        (dict(edits=[{"old": "DEPTH = 4", "new": "DEPTH = 4"}]), 422, "empty-change", "exactly as it is"),
        (dict(edits=[]), 422, "validation-error", "edits"),
        (dict(edits=[{"old": "", "new": "x"}]), 422, "validation-error", "old"),
        (dict(edits=[{"old": "DEPTH = 4", "new": "x" * 300_000}]), 413, "patch-too-large", "edits"),
        (dict(), 422, "patch-or-train-py", "exactly one"),
        (
            dict(patch=good, base="0123456789abcdef0123456789abcdef01234567"),
            404,
            "unknown-base",
            "no experiment has commit",
        ),
        (  # the way out, for a REST client and an MCP one alike
            dict(patch=good, base="0123456789abcdef0123456789abcdef01234567"),
            404,
            "unknown-base",
            "(REST: GET /experiments, GET /best; MCP: search, best)",
        ),
        (dict(patch=good, base="not-hex"), 422, "validation-error", "base"),
        (dict(patch=good, description=""), 422, "validation-error", "description"),
        (dict(patch=good + "#" * 300_000), 413, "patch-too-large", "limit"),
        (dict(train_py="x = 1\n" * 100_000), 413, "train-py-too-large", "limit"),
        (dict(train_py="x = '\0'\n"), 422, "validation-error", "NUL"),
        (dict(train_py=baseline_source + carried_table), 422, "train-py-carries-data", "lines"),
        (
            dict(train_py=baseline_source + carried_names),
            422,
            "train-py-carries-data",
            f"TRAIN_PY_MAX_INFORMATION_BYTES). The statement on lines {baseline_source.count(chr(10)) + 3}-",
        ),
    ]
    for body, status, kind, words in cases:
        error = refused(**body)
        assert (error.status, error.type.rsplit("/", 1)[-1]) == (status, kind), (body.keys(), error)
        assert words in error.detail, error.detail
    assert live.client().search().items[0].id == 1  # nothing was queued


def test_base_may_be_any_experiment_commit_or_its_prefix(live, baseline_source: str) -> None:
    agent = live.client("agent")
    first = agent.submit("w", train_py=_edit(baseline_source, "WIDTH = 64", "WIDTH = 80"))
    on_top = agent.submit(
        "w+d",
        patch=make_patch(
            _edit(baseline_source, "WIDTH = 64", "WIDTH = 80"),
            _edit(baseline_source, "WIDTH = 64", "WIDTH = 80").replace("DEPTH = 4", "DEPTH = 5"),
        ),
        base=first.commit[:10],
    )
    assert on_top.base == first.commit
    children = agent.children(first.commit)
    assert [c.id for c in children.children] == [on_top.id] and children.experiment_id == first.id


def test_per_agent_queue_limit_answers_429(
    live_factory: LiveFactory, database_url: str, baseline_source: str
) -> None:
    live = live_factory(database_url, max_queued_per_agent=2)
    agent, other = live.client("agent"), live.client("agent")
    for depth in (5, 6):
        agent.submit(f"d{depth}", train_py=baseline_source.replace("DEPTH = 4", f"DEPTH = {depth}"))
    with pytest.raises(ApiError) as caught:
        agent.submit("d7", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 7"))
    assert caught.value.status == 429 and "limit 2" in caught.value.detail
    other.submit("d7", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 7"))  # others are not limited


def test_tokens_decide_who_may_do_what(live, baseline_source: str) -> None:
    change = dict(description="x", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 9"))
    anonymous, worker = Client(live.url), live.client("worker")
    for client, status in ((anonymous, 401), (Client(live.url, "ara_wrong"), 401), (worker, 403)):
        with pytest.raises(ApiError) as caught:
            client.submit(**change)  # type: ignore[arg-type]
        assert caught.value.status == status
    agent = live.client("agent")
    with pytest.raises(ApiError) as caught:
        agent.register(name="sneaky", device="cpu", memory_gb=1, harness_id="x")
    assert caught.value.status == 403 and "worker" in caught.value.detail
    assert anonymous.search().items  # reads are public by default
    assert live.admin().submit(**change).agent == "ADMIN_TOKEN"  # type: ignore[arg-type]


def test_reads_can_require_a_token(live_factory) -> None:
    live = live_factory(public_reads=False)
    with pytest.raises(ApiError) as caught:
        Client(live.url).best()
    assert caught.value.status == 401
    assert live.client("worker").best().val_bpb is None


@contextmanager
def sql_of_this_thread(live: Live) -> Iterator[list[str]]:
    """The SQL statements this thread sends in the block (the server's own tasks are left out),
    without SQLite's BEGIN (PostgreSQL's driver sends its own, which is not counted either)."""
    sent: list[str] = []
    thread = threading.get_ident()

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if threading.get_ident() == thread and not statement.startswith("BEGIN"):
            sent.append(statement)

    event.listen(live.ctx.db.engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(live.ctx.db.engine, "before_cursor_execute", count)


def test_a_submit_and_a_poll_send_few_sql_statements(live_any_db: Live, baseline_source: str) -> None:
    """Each statement is a round trip to PostgreSQL, and a submit holds the project lock over most
    of its own: under load they, not the CPU, made its latency (bench/request_profile.py
    --statements lists them). A submit (greedy rule): 2 checks, 6 in the transaction (the lock, the
    checks, 4 inserts), 2 for its view and 2 for its similar experiments; a poll: 2."""
    ctx, token = live_any_db.ctx, live_any_db.token("agent")
    with ctx.db.read() as session:
        principal = find_principal(session, token)
    assert principal is not None
    # DEPTH down, then up: the second resembles nothing (its similar experiments cost two more).
    sources = [baseline_source.replace("DEPTH = 4", f"DEPTH = {depth}") for depth in (3, 6)]
    patches = [make_patch(baseline_source, source) for source in sources]
    submit(ctx, principal, SubmitIn(description="warm", patch=patches[0]), None)
    with sql_of_this_thread(live_any_db) as sent:
        outcome = submit(ctx, principal, SubmitIn(description="counted", patch=patches[1]), None)
    assert outcome.created and outcome.view is not None and outcome.view.queue_position == 2
    assert len(sent) <= 12, "\n".join(sent)
    with sql_of_this_thread(live_any_db) as sent, ctx.db.read() as session:
        assert get_view(session, outcome.experiment_id) == outcome.view
    assert len(sent) <= 2, "\n".join(sent)
