"""One word per outcome and one queue position (issue 51): an experiment measured and not kept is
`reverted` in the API, the CLI and the pages, and `discard` only in results.tsv, through its one
mapping (autoresearch's words); a queued experiment's place is the runs ahead of it, the same
number in the API, the CLI and its page; `similar -e` on an experiment nothing resembles says so."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from protocol.states import ExperimentStatus
from server.crud.tsv import CRASH, TSV_STATUS
from tests.kit.cli_process import in_process
from tests.server.conftest import Live


def test_an_outcome_has_one_word_everywhere_but_results_tsv(
    live: Live, worker_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)  # the baseline, kept
    agent = live.client("agent")
    source = agent.best().train_py
    reverted = agent.submit("wider", train_py=source.replace("WIDTH = 64", "WIDTH = 96")).id
    worker.run_next(1.1)
    crashed = agent.submit("deeper", train_py=source.replace("DEPTH = 4", "DEPTH = 6")).id
    worker.run_next(None, status="crash", error_class="train_error", error_message="boom")
    first = agent.submit("lr", train_py=source.replace("LEARNING_RATE = 0.01", "LEARNING_RATE = 0.02")).id
    second = agent.submit("warmup", train_py=source.replace("WARMUP_STEPS = 10", "WARMUP_STEPS = 20")).id

    api = {i: agent.experiment(i) for i in (1, reverted, crashed, first, second)}
    assert [api[i].status for i in (reverted, crashed)] == [ExperimentStatus.REVERTED] * 2
    shown = in_process(capsys, "status", str(reverted), str(first), str(second), server=live.url)
    assert shown.code == 0, shown.err
    assert f"experiment {reverted} reverted: val_bpb 1.100000" in shown.out
    # One queue position: the runs ahead of it, as the API's queue_position counts them.
    assert (api[first].queue_position, api[second].queue_position) == (0, 1)
    assert f"experiment {first} queued (0 ahead of it)" in shown.out
    assert f"experiment {second} queued (1 ahead of it)" in shown.out
    page = httpx.get(f"{live.url}/experiments/{second}").text
    assert "Queued, 1 ahead of it." in page

    leaderboard = httpx.get(f"{live.url}/").text
    # Measured and not kept is "reverted" there too (the crash is counted as crashed).
    assert '<dt>reverted</dt><dd data-count="reverted">1</dd>' in leaderboard, leaderboard
    assert "discard" not in leaderboard.lower()
    # results.tsv keeps autoresearch's words, through TSV_STATUS alone.
    rows = [line.split("\t") for line in agent.results_tsv().splitlines()[1:]]
    statuses = {row[0]: row[3] for row in rows}
    for number in (1, reverted, crashed):
        expected = TSV_STATUS[api[number].status] if api[number].val_bpb is not None else CRASH
        assert statuses[api[number].commit[:7]] == expected
    assert [statuses[api[i].commit[:7]] for i in (1, reverted, crashed)] == ["keep", "discard", "crash"]

    alone = in_process(capsys, "similar", "-e", str(crashed), server=live.url)
    assert alone.out == f"no other experiment made the change of experiment {crashed} or a similar one\n"
