"""A real HTTP server that answers what no autoresearch server would (a wrong type, HTML, a list
for an object): what the SDK must refuse with a clear error rather than pass on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from tests.local_http import send, serving

# GET /best as an older server might answer it, and what a proxy in the way might send.
WRONG_ANSWERS = {
    "/api/v1/best": (200, "application/json", b'{"commit": "abc", "val_bpb": "low"}'),
    "/api/v1/experiments/7": (200, "text/html", b"<html>Bad gateway, try later</html>"),
    "/api/v1/worker/claim": (200, "application/json", b"[]"),
    "/api/v1/worker/leases/lease-1/result": (200, "application/json", b'{"experiment_id": 1}'),
    "/api/v1/experiments/8": (404, "application/problem+json", b'{"title": "Not Found", "detail": "no 8"}'),
}


@contextmanager
def wrong_server() -> Iterator[str]:
    """A real HTTP server that answers with WRONG_ANSWERS; its URL."""

    class Answer(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, content_type, body = WRONG_ANSWERS.get(self.path, (404, "text/plain", b"no"))
            send(self, status, body, content_type)

        do_GET = do_POST = _answer

        def log_message(self, *_args: object) -> None:
            pass

    with serving(Answer) as url:
        yield url
