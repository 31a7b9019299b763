"""The worker runs a claimed train.py only if it is exactly what the server hashed; the attempt counts."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from tests.worker.processes import Project
from worker.main import hash_mismatch


def claim_of(train_py: str, hashed: str) -> dict[str, str]:
    return {"train_py": train_py, "train_py_sha256": hashlib.sha256(hashed.encode()).hexdigest()}


def test_the_text_the_server_hashed_passes() -> None:
    source = "LEARNING_RATE = 0.01\n# é and other non-ASCII text hash as UTF-8\n"
    assert hash_mismatch(claim_of(source, source)) is None


def test_a_changed_text_is_refused_naming_both_hashes() -> None:
    sent, hashed = "LEARNING_RATE = 0.02\n", "LEARNING_RATE = 0.01\n"
    reason = hash_mismatch(claim_of(sent, hashed))
    assert reason is not None
    assert hashlib.sha256(sent.encode()).hexdigest() in reason
    assert hashlib.sha256(hashed.encode()).hexdigest() in reason


@contextmanager
def corrupting_proxy(server: str) -> Iterator[str]:
    """A proxy to `server` that changes the train.py hash in every claim it passes on.

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
                claim = answer.json()
                claim["train_py_sha256"] = hashlib.sha256(b"something else").hexdigest()
                content = json.dumps(claim).encode()
            self.send_response(answer.status_code)
            self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = _forward

        def log_message(self, *_args: object) -> None:
            pass

    class Proxy(ThreadingHTTPServer):
        def handle_error(self, *_args: object) -> None:
            pass  # a worker hanging up on the proxy as the test ends is not what is tested

    proxy = Proxy(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_train_py_that_fails_its_hash_is_never_run_and_ends_as_an_infrastructure_failure(
    project: Project,
) -> None:
    with corrupting_proxy(project.url) as proxy:
        worker = project.worker("gpu0", "--server", proxy)  # the last --server wins
        experiment = project.final(1, timeout=120)
        assert experiment["status"] == "infra_failed"
        assert "train.py content hash mismatch" in experiment["reason"]
        assert experiment["reason"].endswith("attempt 3 of 3: ended as an infrastructure failure")
        assert worker.log().count("not running it") == 3
        assert project.query("SELECT count(*) FROM results") == [(0,)]
        worker.check_alive()  # a bad claim costs the experiment its attempts, not the worker its life
