"""A real HTTP server on this machine for tests that need one in place of what cannot be here
(a dataset host, a broken server or proxy): started on a free port of 127.0.0.1 in a thread."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, *_args: object) -> None:
        pass  # a client hanging up as its test ends is not what any test here is about


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """The server's URL while the block runs (https with `tls`, a server-side context); shut down
    after it."""
    server = QuietServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def send(request: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "text/plain") -> None:
    """Answer `request` with `body` whole."""
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)
