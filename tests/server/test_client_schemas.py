"""The SDK returns the server's own response models (protocol/schemas.py), so the protocol is typed
on both ends; an answer that is not the documented model is a SchemaError that names the endpoint,
and an MCP tool reports it as `answer-not-understood`."""

from __future__ import annotations

import asyncio

import pytest

from client import ApiError, Client, SchemaError
from client.api import Submitted
from protocol.schemas import (
    BestOut,
    ClaimOut,
    ExperimentOut,
    ExperimentPage,
    HeartbeatOut,
    NoiseListOut,
    RegisterOut,
    ResultOutcome,
    SimilarOut,
)
from protocol.states import Decision, ExperimentStatus, Rule, RunKind, RunState
from tests.kit.cli_process import in_process
from tests.mcp_session import connect_mcp
from tests.server.conftest import DEVICE, HARNESS_ID, Live, SimWorker
from tests.wrong_server import wrong_server


def test_the_sdk_returns_the_models_the_server_answers_with(live: Live, baseline_source: str) -> None:
    agent = live.client("agent")
    best = agent.best()
    assert isinstance(best, BestOut) and best.train_py == baseline_source and best.measured is False

    worker = live.client("worker")
    registered = worker.register(name="gpu0", device=DEVICE, memory_gb=80.0, harness_id=HARNESS_ID)
    assert isinstance(registered, RegisterOut) and registered.harness_id == HARNESS_ID
    claim = worker.claim(registered.worker_id)
    assert isinstance(claim, ClaimOut) and claim.experiment_id == 1 and claim.train_py == baseline_source
    beat = worker.heartbeat(claim.lease_id)
    assert isinstance(beat, HeartbeatOut) and beat.cancel is False
    assert beat.lease_expires_at >= claim.lease_expires_at  # datetimes, not strings
    outcome = SimWorker(worker, registered.worker_id).report(claim, 1.0)
    assert isinstance(outcome, ResultOutcome)
    assert (outcome.decision, outcome.status) == (Decision.KEEP, ExperimentStatus.KEPT)
    assert type(outcome.decision) is Decision and type(outcome.status) is ExperimentStatus

    changed = baseline_source.replace("WIDTH = 64", "WIDTH = 96")
    first = agent.submit("wider", train_py=changed)
    again = agent.submit("wider again", train_py=changed)
    assert isinstance(first, Submitted) and isinstance(again, Submitted)
    assert (first.existing, again.existing, again.id) == (False, True, first.id)
    assert type(first.status) is ExperimentStatus and first.similar == []

    experiment = agent.experiment(1)
    assert isinstance(experiment, ExperimentOut) and experiment.result is not None
    assert (experiment.runs[0].kind, experiment.runs[0].state) == (RunKind.FIRST, RunState.FINISHED)
    assert type(experiment.runs[0].state) is RunState and experiment.result.val_bpb == 1.0
    page = agent.search(status=ExperimentStatus.QUEUED)
    assert isinstance(page, ExperimentPage) and [e.id for e in page.items] == [first.id]
    assert [e.id for e in agent.iter_search(limit=1)] == [first.id, 1]
    noise = agent.noise()
    assert isinstance(noise, NoiseListOut) and noise.rule.decision_rule is Rule.GREEDY
    similar = agent.similar(train_py=changed)
    assert isinstance(similar, SimilarOut) and [s.experiment_id for s in similar.similar] == [first.id]


def test_an_answer_that_is_not_the_model_raises_schema_error_naming_the_endpoint() -> None:
    with wrong_server() as url, Client(url, "token") as client:
        with pytest.raises(SchemaError) as missing:
            client.best()
        assert missing.value.endpoint == f"GET {url}/api/v1/best" and missing.value.model == "BestOut"
        text = str(missing.value)
        assert text.startswith(f"GET {url}/api/v1/best: the answer is not a valid BestOut: ")
        assert (
            "val_bpb: Input should be a valid number, unable to parse string as a number; runs: Field" in text
        )
        assert text.endswith("(and 5 more)")  # the first three problems, and how many more

        with pytest.raises(
            SchemaError,
            match=r"^GET .*/experiments/7: the answer is not a valid ExperimentOut: body: Invalid",
        ):
            client.experiment(7)
        with pytest.raises(
            SchemaError, match=r"^POST .*/api/v1/worker/claim: the answer is not a valid ClaimOut"
        ):
            client.claim("worker-1")
        with pytest.raises(ApiError) as refused:  # an error status stays an ApiError with its problem
            client.experiment(8)
        assert (refused.value.status, refused.value.detail) == (404, "no 8")


def test_an_mcp_tool_reports_an_answer_not_understood() -> None:
    async def ask_best(url: str) -> tuple[str, dict[str, object]]:
        async with connect_mcp(url, "token", "stdio") as client:
            result = await client.call_tool("best", {})
            assert result.is_error
            text = "".join(getattr(block, "text", "") for block in result.content)
            return text, dict(result.structured_content or {})

    with wrong_server() as url:
        text, problem = asyncio.run(ask_best(url))
    assert text.startswith(
        f"answer-not-understood: GET {url}/api/v1/best: the answer is not a valid BestOut: "
    )
    assert problem["kind"] == "answer-not-understood"
    assert (problem["endpoint"], problem["model"]) == (f"GET {url}/api/v1/best", "BestOut")


def test_a_cli_command_says_the_answer_was_not_understood(capsys: pytest.CaptureFixture[str]) -> None:
    with wrong_server() as url:
        outcome = in_process(capsys, "best", server=url)
    assert outcome.code == 1 and outcome.out == ""
    assert outcome.err.startswith(
        f"autoresearch best: the server's answer was not understood (GET {url}/api/v1/best: the answer"
    )
    assert outcome.err.rstrip().endswith(f"is {url} a server of this version?")
