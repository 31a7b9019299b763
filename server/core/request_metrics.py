"""Request durations per route, as measured inside the server, for GET /metrics.

A pure ASGI middleware: the time from the app receiving a request to the last byte of its answer,
counted into Prometheus histogram buckets per method and route template. Everything runs on the
event loop thread, so plain counters need no lock. Long polls (worker claims) and event streams
count their waiting time too, under their own routes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class RouteTimes:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    count: int = 0
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[index] += 1


@dataclass
class RequestTimes:
    routes: dict[tuple[str, str], RouteTimes] = field(default_factory=lambda: defaultdict(RouteTimes))

    def render(self) -> list[str]:
        name = "autoresearch_http_request_duration_seconds"
        lines = [
            f"# HELP {name} Time from receiving a request to the end of its answer.",
            f"# TYPE {name} histogram",
        ]
        for (method, route), times in sorted(self.routes.items()):
            labels = f'method="{method}",route="{route}"'
            lines += [
                f'{name}_bucket{{{labels},le="{bound:g}"}} {n}'
                for bound, n in zip(BUCKETS, times.buckets, strict=True)
            ]
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {times.count}')
            lines.append(f"{name}_sum{{{labels}}} {times.total:.6f}")
            lines.append(f"{name}_count{{{labels}}} {times.count}")
        return lines


class RequestTimer:
    def __init__(self, app: ASGIApp, times: RequestTimes, api_prefix: str) -> None:
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
                self.times.routes[(method, template)].observe(time.perf_counter() - started)

        await self.app(scope, receive, timed_send)
