"""The MCP server over streamable HTTP, mounted in the app at /mcp (server/mcp/tools.py has the tools).

Authentication is the SDK's bearer middleware with our tokens as its verifier: an agent (or admin)
token, as for the REST API; anything else is answered 401 before a tool runs. Each tool call then
uses the REST API of this same server process over loopback, with the caller's token, so that the
API's rules, limits and errors apply unchanged (the address is the socket the request came in on).

Transport choices: stateless (each request stands alone, so any number of agents cost no session
state, and a server restart loses nothing); DNS-rebinding protection off, since it guards
cookie- or network-trusting servers against browsers, and this one trusts only bearer tokens,
which a hostile web page cannot send.
"""

from __future__ import annotations

from contextvars import ContextVar

from fastapi import FastAPI
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.types import ASGIApp, Receive, Scope, Send

from client import Client
from protocol.states import AGENT_KINDS
from server.api.deps import principal_of
from server.context import AppContext
from server.mcp.tools import build_mcp

MOUNT = "/mcp"


class AgentTokens:
    """The SDK's TokenVerifier for our bearer tokens: agents and admins may use the tools."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await principal_of(self.ctx, token)
        if principal is None or principal.kind not in AGENT_KINDS:
            return None
        return AccessToken(token=token, client_id=principal.name, scopes=[principal.kind])


# The address the MCP request at hand came in on (scheme, host, port), set for each request by
# RememberAddress: tools and resources reach the REST API of this same process through it.
_address: ContextVar[tuple[str, str, int] | None] = ContextVar("mcp_request_address", default=None)


class RememberAddress:
    """ASGI wrapper of the MCP app: remembers each request's own address for `loopback`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host, port = scope["server"]
            _address.set((scope["scheme"], f"[{host}]" if ":" in host else host, port))
        await self.app(scope, receive, send)


def loopback() -> Client:
    """A client of this server's REST API with the token the MCP request was authenticated with."""
    address, token = _address.get(), get_access_token()
    assert address is not None and token is not None, "only called while an authenticated request runs"
    scheme, host, port = address
    return Client(f"{scheme}://{host}:{port}", token.token)


def mount_mcp(app: FastAPI, ctx: AppContext) -> StreamableHTTPSessionManager:
    """Serve the MCP tools at /mcp; the caller runs the returned manager for the app's lifetime."""
    mcp = build_mcp(
        loopback,
        max_wait_s=ctx.settings.mcp_max_wait_seconds,
        token_verifier=AgentTokens(ctx),
        # No OAuth here (tokens come from `autoresearch token create`): the SDK's settings need an
        # issuer, which is advertised nowhere without a resource_server_url.
        auth=AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None),
    )
    http_app = mcp.streamable_http_app(
        streamable_http_path="/",
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.mount(MOUNT, RememberAddress(http_app))
    return mcp.session_manager
