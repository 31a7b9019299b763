"""The worker runs a claimed train.py only if it is exactly what the server hashed (the attempt
counts), and stops with one line naming the endpoint when a claim is not the documented model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from protocol.schemas import ClaimOut
from testkit.processes import Project
from tests.local_http import send, serving
from worker.main import hash_mismatch


def claim_of(train_py: str, hashed: str) -> ClaimOut:
    return ClaimOut(
        lease_id="lease",
        experiment_id=1,
        run=1,
        seed=1,
        attempt=1,
        description="a change",
        train_py=train_py,
        train_py_sha256=hashlib.sha256(hashed.encode()).hexdigest(),
        lease_expires_at=datetime.now(UTC),
    )


def test_the_text_the_server_hashed_passes() -> None:
    source = "LEARNING_RATE = 0.01\n# é and other non-ASCII text hash as UTF-8\n"
    assert hash_mismatch(claim_of(source, source)) is None


def test_a_changed_text_is_refused_naming_both_hashes() -> None:
    sent, hashed = "LEARNING_RATE = 0.02\n", "LEARNING_RATE = 0.01\n"
    reason = hash_mismatch(claim_of(sent, hashed))
    assert reason is not None
    assert hashlib.sha256(sent.encode()).hexdigest() in reason
    assert hashlib.sha256(hashed.encode()).hexdigest() in reason


def wrong_hash(claim: dict[str, Any]) -> dict[str, Any]:
    return {**claim, "train_py_sha256": hashlib.sha256(b"something else").hexdigest()}


def without_train_py(claim: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in claim.items() if key != "train_py"}


@contextmanager
def corrupting_proxy(server: str, corrupt: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[str]:
    """A proxy to `server` that passes every claim it hands out through `corrupt`.

    It stands in for a corrupted transfer or a broken server, which cannot be made to happen
    on purpose here; everything else goes through unchanged.
    """

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kept = ("authorization", "content-type")
            headers = {k: v for k, v in self.headers.items() if k.lower() in kept}
            try:
                answer = httpx.request(
                    self.command, server + self.path, content=body, headers=headers, timeout=120
                )
            except httpx.HTTPError:  # the server went away (the test is ending): as a gateway would
                self.send_error(502)
                return
            content = answer.content
            if self.path.endswith("/worker/claim") and answer.status_code == 200:
                content = json.dumps(corrupt(answer.json())).encode()
            send(self, answer.status_code, content, answer.headers.get("content-type", "application/json"))

        do_GET = do_POST = _forward

        def log_message(self, *_args: object) -> None:
            pass

    with serving(Forward) as url:
        yield url


def test_a_train_py_that_fails_its_hash_is_never_run_and_ends_as_an_infrastructure_failure(
    project: Project,
) -> None:
    with corrupting_proxy(project.url, wrong_hash) as proxy:
        worker = project.worker("gpu0", "--server", proxy)  # the last --server wins
        experiment = project.final(1, timeout=120)
        assert experiment.status == "infra_failed"
        assert "train.py content hash mismatch" in experiment.reason
        assert experiment.reason.endswith("attempt 3 of 3: ended as an infrastructure failure")
        assert worker.log().count("not running it") == 3
        assert project.query("SELECT count(*) FROM results") == [(0,)]
        worker.check_alive()  # a bad claim costs the experiment its attempts, not the worker its life


def test_a_claim_that_is_not_the_documented_model_stops_the_worker_with_one_line(project: Project) -> None:
    with corrupting_proxy(project.url, without_train_py) as proxy:
        worker = project.worker("gpu0", "--server", proxy)
        assert worker.wait(timeout=120) == 1
    log = worker.log()
    assert "the server's answer was not understood" in log
    assert (
        "POST " in log
        and "/api/v1/worker/claim: the answer is not a valid ClaimOut: train_py: Field required" in log
    )
    assert "Traceback" not in log  # one clear line, not a crash
    assert "not running it" not in log and project.query("SELECT count(*) FROM results") == [(0,)]
