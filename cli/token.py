"""`autoresearch token create|revoke`: agent, worker and admin bearer tokens."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from cli import views
from protocol.states import TokenKind
from server.core.config import ServerSettings

if TYPE_CHECKING:
    from server.core.db import Database

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("token", help="create or revoke API tokens")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token and print it (shown only this once)")
    create.add_argument(
        "--kind",
        required=True,
        choices=list(TokenKind),
        help="agent: submit and cancel; worker: run experiments; admin: everything",
    )
    create.add_argument("--name", required=True, help="agent/worker name: letters, digits, _ . @ -")
    create.add_argument("--json", action="store_true", help="print kind, name and token as JSON")
    create.set_defaults(func=create_token)
    revoke = actions.add_parser("revoke", help="revoke a token by kind and name")
    revoke.add_argument("--kind", required=True, choices=list(TokenKind), help="its kind")
    revoke.add_argument("--name", required=True, help="the name it was created with")
    revoke.add_argument("--json", action="store_true", help="print kind and name as JSON")
    revoke.set_defaults(func=revoke_token)


def _database() -> Database:
    from server.core.db import Database, create_db_engine
    from server.core.migrate import upgrade

    settings = ServerSettings()
    upgrade(settings.resolved_database_url)
    return Database(create_db_engine(settings.resolved_database_url, settings.sqlite_busy_timeout_ms))


def create_token(args: argparse.Namespace) -> int:
    from server.crud import tokens

    if not _NAME.match(args.name):
        print(
            f"autoresearch token: --name {args.name!r}: use 1-100 letters, digits, _ . @ -", file=sys.stderr
        )
        return 2
    db = _database()
    try:
        with db.write() as session:
            token = tokens.create_token(session, args.kind, args.name)
    except tokens.TokenNameTaken as exc:
        print(f"autoresearch token: {exc}", file=sys.stderr)
        return 2
    finally:
        db.dispose()
    print(views.as_json({"kind": args.kind, "name": args.name, "token": token}) if args.json else token)
    return 0


def revoke_token(args: argparse.Namespace) -> int:
    from server.crud import tokens

    db = _database()
    try:
        with db.write() as session:
            revoked = tokens.revoke_token(session, args.kind, args.name)
    finally:
        db.dispose()
    if not revoked:
        print(f"autoresearch token: no active {args.kind} token named {args.name!r}", file=sys.stderr)
        return 2
    revoked_one = {"kind": args.kind, "name": args.name, "revoked": True}
    print(views.as_json(revoked_one) if args.json else f"revoked the {args.kind} token {args.name!r}")
    return 0
