"""An MCP session through the official SDK's own client, over either transport the server offers:
`autoresearch mcp` started as a subprocess (stdio, as a coding agent starts it) or /mcp/ on the
server (streamable HTTP, with the agent's bearer token); and a tool's answer or error from it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from cli.connection import SERVER_ENV, TOKEN_ENV
from testkit.processes import REPO_ROOT, Project

TRANSPORTS = ["stdio", "http"]


@asynccontextmanager
async def mcp_client(
    project: Project, transport: str, token: str | None = None, read_timeout_s: float = 600
) -> AsyncIterator[Client]:
    async with connect_mcp(project.url, token or project.agent_token, transport, read_timeout_s) as client:
        yield client


@asynccontextmanager
async def connect_mcp(
    url: str, token: str, transport: str, read_timeout_s: float = 600, max_wait_s: float | None = None
) -> AsyncIterator[Client]:
    """The SDK's client of the server at `url`: `autoresearch mcp` over stdio (`--max-wait`
    `max_wait_s` when given), or /mcp/ over HTTP (the server's own cap), giving up on any answer
    after `read_timeout_s`."""
    if transport == "stdio":
        cap = [] if max_wait_s is None else ["--max-wait", str(max_wait_s)]
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "cli.main", "mcp", *cap],
            env={SERVER_ENV: url, TOKEN_ENV: token},
            cwd=REPO_ROOT,
        )
        async with Client(params, read_timeout_seconds=read_timeout_s) as client:
            yield client
        return
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=read_timeout_s)
    )
    mcp_http = streamable_http_client(f"{url}/mcp/", http_client=http)
    async with http, Client(mcp_http, read_timeout_seconds=read_timeout_s) as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's structured answer (fails with the tool's error text when it reports one)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def tool_error(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A tool's error: its text and its structured content (the API's problem, when there was one)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return "".join(getattr(block, "text", "") for block in result.content), result.structured_content or {}


def run(
    project: Project,
    transport: str,
    scenario: Callable[[Client], Awaitable[Any]],
    read_timeout_s: float = 600,
) -> Any:
    async def main() -> Any:
        async with mcp_client(project, transport, read_timeout_s=read_timeout_s) as client:
            return await scenario(client)

    return asyncio.run(main())
