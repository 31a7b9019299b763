"""Request durations per route, as measured inside the server, for GET /metrics.

A pure ASGI middleware: the time from the app receiving a request to the last byte of its answer,
observed into a Prometheus histogram per method and route template. Long polls (worker claims)
and event streams count their waiting time too, under their own routes.
"""

from __future__ import annotations

import time

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def request_times() -> Histogram:
    """A histogram of its own (not in the process-wide registry): each app registers its own."""
    return Histogram(
        "autoresearch_http_request_duration_seconds",
        "Time from receiving a request to the end of its answer.",
        ["method", "route"],
        buckets=BUCKETS,
        registry=None,
    )


class RequestTimer:
    def __init__(self, app: ASGIApp, times: Histogram, api_prefix: str) -> None:
        self.app = app
        self.times = times
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                template = getattr(scope.get("route"), "path", "unmatched")
                # Routes of included routers know their path without the router's prefix.
                if scope["path"].startswith(self.api_prefix) and not template.startswith(self.api_prefix):
                    template = self.api_prefix + template
                method = scope["method"] if scope["method"] in _METHODS else "OTHER"  # bounded label values
                self.times.labels(method, template).observe(time.perf_counter() - started)

        await self.app(scope, receive, timed_send)
