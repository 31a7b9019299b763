"""A minimal HTTP/1.1 keep-alive client for load generation, at a fraction of httpx's CPU.

The load generator shares this machine's two cores with the server and PostgreSQL. With httpx it
spent about 5 ms of CPU per claim-and-report cycle, most of what the server itself spends, so a
throughput figure measured the client about as much as the server. This client does only what
the benchmark's simulated workers need: one connection, JSON bodies, answers with a
Content-Length (what the server sends for every JSON answer; anything else is an error here).
It raises httpx's transport errors, so callers handle both clients the same way.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx


@dataclass
class Answer:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class ConnectionClosed(ConnectionError):
    """The server closed the connection without answering."""


class LeanClient:
    """One keep-alive connection to `base_url`; requests on it go one at a time."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, json: Any = None, headers: dict[str, str] | None = None) -> Answer:
        return await self.request("POST", path, json, headers or {})

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return await self.request("GET", path, None, headers or {})

    async def request(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Answer:
        # A dropped connection is an error, never resent: the benchmarks count every one (the
        # server keeps idle connections open far longer than a benchmark leaves one idle).
        try:
            return await self._exchange(method, path, body, headers)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            await self.aclose()
            raise httpx.ReadError(f"{method} {path}: {exc!r}") from exc

    async def _exchange(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Answer:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        payload = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines.append(f"Content-Length: {len(payload)}")
        if body is not None:
            lines.append("Content-Type: application/json")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionClosed
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding":
                raise ValueError(f"unsupported Transfer-Encoding {value.strip()!r}")
        return Answer(status, await reader.readexactly(length) if length else b"")

    async def aclose(self) -> None:
        if self._streams is not None:
            writer = self._streams[1]
            self._streams = None
            writer.close()
