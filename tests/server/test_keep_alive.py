"""Keep-alive: a connection left idle past uvicorn's default limit (5 s) stays usable.

With the server and httpx both at 5 s, a client could send a request on a connection in the
instant the server closed it, and lose it (`ReadError`, `RemoteProtocolError` in
bench/api_load.py). The server now keeps idle connections 65 s and the SDK drops its own after
20 s (server/serving.py, client/api.py). Both tests wait past the old limit on a real server, and
fail with uvicorn's default keep-alive.
"""

from __future__ import annotations

import socket
import time

from client import Client
from client.api import CONNECTION_LIMITS
from server.serving import KEEP_ALIVE_S
from tests.server.conftest import Live

OLD_LIMIT_S = 5.0  # uvicorn's and httpx's default
IDLE_S = OLD_LIMIT_S + 1.5
REQUEST = b"GET /api/v1/healthz HTTP/1.1\r\nHost: test\r\n\r\n"


def answer_on(connection: socket.socket) -> bytes:
    """One request and the head of its answer, on an open connection ('' if the server closed it)."""
    connection.sendall(REQUEST)
    try:
        return connection.recv(65536)
    except ConnectionResetError:
        return b""


def test_the_client_drops_an_idle_connection_before_the_server_does() -> None:
    assert CONNECTION_LIMITS.keepalive_expiry is not None
    assert OLD_LIMIT_S < CONNECTION_LIMITS.keepalive_expiry < KEEP_ALIVE_S


def test_an_idle_connection_is_still_open_past_the_old_limit(live: Live) -> None:
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        assert answer_on(connection).startswith(b"HTTP/1.1 200")
        time.sleep(IDLE_S)
        assert answer_on(connection).startswith(b"HTTP/1.1 200"), "the server closed the idle connection"


def test_the_sdk_reuses_its_idle_connection(live: Live) -> None:
    def request(client: Client) -> tuple[int, tuple[str, int]]:
        """The answer's status and the local address of the connection it came on."""
        response = client.http.get("/healthz")  # a transport error here fails the test
        return response.status_code, response.extensions["network_stream"].get_extra_info("client_addr")

    with live.client() as client:
        first = request(client)
        time.sleep(IDLE_S)
        second = request(client)
    assert first[0] == second[0] == 200
    assert first[1] == second[1], "a new connection: the idle one was dropped"
