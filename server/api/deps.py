"""Request dependencies: the app context and who is calling (bearer tokens).

They are `async` so that they run on the event loop: FastAPI runs a plain `def` dependency in
the thread pool, and each such hop costs a thread switch and a wait for the GIL, which under load
was most of a cheap request's latency. Only a token missing from the cache goes to a thread.

Agents (and admins) submit and cancel; workers use the worker endpoints only; reads are public
unless PUBLIC_READS is false, in which case any valid token may read.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from protocol.states import AGENT_KINDS, TokenKind
from server.context import AppContext
from server.core.problems import Problem
from server.core.security import hash_token
from server.crud.tokens import Principal, find_principal

# A route's documented error responses (FastAPI's `responses`): status -> OpenAPI response object.
Responses = dict[int | str, dict[str, Any]]

_bearer = HTTPBearer(auto_error=False, description="an agent, worker or admin token")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def get_ctx(request: Request) -> AppContext:
    return request.app.state.ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


def _find(ctx: AppContext, token: str) -> Principal | None:
    with ctx.db.read() as session:
        return find_principal(session, token)


async def principal_of(ctx: AppContext, token: str) -> Principal | None:
    """Who holds `token` (None: unknown or revoked), cached for TOKEN_CACHE_SECONDS."""
    key = hash_token(token)
    principal = ctx.principals.get(key)
    if principal is None:
        principal = await run_in_threadpool(_find, ctx, token)
        if principal is not None:
            ctx.principals[key] = principal
    return principal


async def _lookup(ctx: AppContext, token: str) -> Principal:
    principal = await principal_of(ctx, token)
    if principal is None:
        raise Problem(401, "invalid-token", "the bearer token is unknown or revoked", headers=_CHALLENGE)
    return principal


async def bearer_caller(
    ctx: Ctx, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal | None:
    """The caller of an endpoint that needs a token (declared as bearer security in OpenAPI)."""
    return await _lookup(ctx, credentials.credentials) if credentials is not None else None


async def optional_caller(
    ctx: Ctx, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Principal | None:
    """The caller of a read, which is public unless PUBLIC_READS=false (so not declared in OpenAPI)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return await _lookup(ctx, token.strip())


Caller = Annotated[Principal | None, Depends(bearer_caller)]


def _authenticated(principal: Principal | None) -> Principal:
    if principal is None:
        raise Problem(401, "missing-token", "send `Authorization: Bearer <token>`", headers=_CHALLENGE)
    return principal


async def require_agent(principal: Caller) -> Principal:
    principal = _authenticated(principal)
    if principal.kind not in AGENT_KINDS:
        raise Problem(
            403, "agents-only", f"{principal.kind} tokens cannot call agent endpoints; use an agent token"
        )
    return principal


async def require_worker(principal: Caller) -> Principal:
    principal = _authenticated(principal)
    if principal.kind != TokenKind.WORKER:
        raise Problem(
            403, "workers-only", f"{principal.kind} tokens cannot call worker endpoints; use a worker token"
        )
    return principal


async def require_admin(principal: Caller) -> Principal:
    principal = _authenticated(principal)
    if principal.kind != TokenKind.ADMIN:
        raise Problem(403, "admins-only", "this needs an admin token")
    return principal


async def require_reader(
    ctx: Ctx, principal: Annotated[Principal | None, Depends(optional_caller)]
) -> Principal | None:
    if not ctx.settings.public_reads:
        return _authenticated(principal)
    return principal


Agent = Annotated[Principal, Depends(require_agent)]
WorkerToken = Annotated[Principal, Depends(require_worker)]
Admin = Annotated[Principal, Depends(require_admin)]
Reader = Annotated[Principal | None, Depends(require_reader)]
