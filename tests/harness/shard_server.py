"""A local HTTP server in place of the dataset host (no internet here): it serves the parquet
shards a test made, with faults switched on per test (failing requests, transfers cut short,
servers that ignore Range, garbage bodies, a token check)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.local_http import send


@dataclass
class Behaviour:
    fail_first: int = 0  # answer 503 to this many requests per file
    cut_first: int = 0  # send only half the body (with the full Content-Length) this many times
    garbage_first: int = 0  # send a non-parquet body this many times
    ignore_range: bool = False
    token: str | None = None  # require "Authorization: Bearer <token>"
    meet: int = 0  # the first `meet` requests wait for each other (shows parallel downloads)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    met: list[bool] = field(default_factory=list)


class ShardServer:
    def __init__(self, files: dict[str, bytes], behaviour: Behaviour) -> None:
        self.files = files
        self.behaviour = behaviour
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(max(behaviour.meet, 1), timeout=10)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/datasets/climbmix/resolve/main"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        b = self.behaviour
        name = request.path.rsplit("/", 1)[-1]
        with self.lock:
            b.requests.append((name, request.headers.get("Range")))
            count = b.counts[name] = b.counts.get(name, 0) + 1
            order = len(b.requests)
        if order <= b.meet:
            try:
                self.barrier.wait()
                b.met.append(True)
            except threading.BrokenBarrierError:
                b.met.append(False)
        if b.token and request.headers.get("Authorization") != f"Bearer {b.token}":
            return send(request, 401, b"unauthorized")
        if name not in self.files:
            return send(request, 404, b"not found")
        if count <= b.fail_first:
            return send(request, 503, b"busy")
        body = self.files[name]
        if count <= b.garbage_first:
            body = b"<html>an error page, not parquet</html>" + bytes(len(body))
        start = 0
        wanted = request.headers.get("Range")
        if wanted and not b.ignore_range:
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            if start >= len(body):
                return send(request, 416, b"")
        request.send_response(206 if start else 200)
        if start:
            request.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        request.send_header("Content-Length", str(len(body) - start))
        request.end_headers()
        if count <= b.cut_first:
            request.wfile.write(body[start : start + (len(body) - start) // 2])
            request.wfile.flush()
            request.close_connection = True
            return None
        request.wfile.write(body[start:])
        return None
