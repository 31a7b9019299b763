"""API tokens: create, look up, and mirror the ADMIN_TOKEN setting."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from protocol.states import TokenKind
from server.core.security import hash_token, new_token
from server.models import TOKEN_KINDS, ApiToken, utcnow

ENV_ADMIN_NAME = "ADMIN_TOKEN"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's row id, kind and name."""

    id: int
    kind: str
    name: str


class TokenNameTaken(ValueError):
    pass


def create_token(session: Session, kind: str, name: str) -> str:
    """A new token of `kind` named `name`; the plain token is returned once and never stored."""
    if kind not in TOKEN_KINDS:
        raise ValueError(f"unknown token kind {kind!r}; choose one of {', '.join(TOKEN_KINDS)}")
    taken = session.scalars(select(ApiToken).where(ApiToken.kind == kind, ApiToken.name == name)).first()
    if taken is not None:
        raise TokenNameTaken(f"{kind} token {name!r} exists already; choose another --name")
    token = new_token(kind)
    session.add(ApiToken(kind=kind, name=name, token_hash=hash_token(token)))
    session.flush()
    return token


def find_principal(session: Session, token: str) -> Principal | None:
    row = session.scalars(
        select(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).first()
    return Principal(row.id, row.kind, row.name) if row else None


def revoke_token(session: Session, kind: str, name: str) -> bool:
    row = session.scalars(select(ApiToken).where(ApiToken.kind == kind, ApiToken.name == name)).first()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    return True


def sync_env_admin(session: Session, admin_token: str) -> None:
    """Make ADMIN_TOKEN (from the environment) the one valid token of the ADMIN_TOKEN admin row."""
    row = session.scalars(
        select(ApiToken).where(ApiToken.kind == TokenKind.ADMIN, ApiToken.name == ENV_ADMIN_NAME)
    ).first()
    if not admin_token:
        if row is not None and row.revoked_at is None:
            row.revoked_at = utcnow()
        return
    if row is None:
        session.add(ApiToken(kind=TokenKind.ADMIN, name=ENV_ADMIN_NAME, token_hash=hash_token(admin_token)))
        return
    row.token_hash = hash_token(admin_token)
    row.revoked_at = None
