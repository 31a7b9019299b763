"""The one uvicorn configuration: `autoresearch serve`, the tests and the benchmarks all use it.

Keep-alive: uvicorn closes a connection that stayed idle for `timeout_keep_alive` (5 s by
default), and httpx keeps an idle connection in its pool for `keepalive_expiry` (also 5 s by
default). With equal limits a client can send a request on a connection in the instant the
server closes it: the request is lost and the client sees a `ReadError` or a
`RemoteProtocolError` (two in a 30 s run of bench/api_load.py). The server therefore keeps idle
connections far longer than its clients do (the SDK: `client.api.KEEP_ALIVE_EXPIRY_S`), so that
a client always drops an idle connection first. 65 s is also longer than the 60 s idle timeout
of the common load balancers (AWS ALB, nginx), which then close first too.

Stopping: uvicorn waits for every open answer to end, and an event stream never does, so a server
with a browser or an agent following `GET /events` took 30 s and more to stop. `Server` ends the
app's event streams as it stops (their clients reconnect with Last-Event-ID once one is back), and
any other request still open GRACEFUL_SHUTDOWN_S later (a long-poll claim) is cancelled.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

KEEP_ALIVE_S = 65
GRACEFUL_SHUTDOWN_S = 3


def uvicorn_config(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8000,
    fd: int | None = None,
    log_level: str = "info",
    keep_alive_s: int = KEEP_ALIVE_S,
) -> uvicorn.Config:
    """One process (git writes are serialised and events broadcast in-process: docs/operations.md).
    `keep_alive_s` is for bench/keep_alive.py, which compares uvicorn's default with ours."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        fd=fd,
        log_level=log_level,
        workers=1,
        timeout_keep_alive=keep_alive_s,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


class Server(uvicorn.Server):
    """uvicorn's server for the app `create_app` made: its stop ends the app's event streams."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, FastAPI):
            app.state.ctx.bus.close()
        await super().shutdown(sockets)


@contextmanager
def served_in_thread(app: FastAPI, port: int = 0, keep_alive_s: int = KEEP_ALIVE_S) -> Iterator[str]:
    """Run `app` on 127.0.0.1:`port` (0: a free one) in a thread (tests, benchmarks); yield its URL."""
    server = Server(uvicorn_config(app, port=port, log_level="warning", keep_alive_s=keep_alive_s))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
