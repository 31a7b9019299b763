"""`autoresearch db upgrade|downgrade|current`: Alembic migrations, the only way the schema changes."""

from __future__ import annotations

import argparse

from cli import views
from server.core.config import ServerSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "db",
        help="migrate the database (DATABASE_URL, default a SQLite file in DATA_DIR)",
        description="Apply or roll back schema migrations. `serve` upgrades automatically at start.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("upgrade", help="migrate to the newest schema (or --revision)")
    up.add_argument("--revision", default="head", help="target revision (default head, the newest)")
    up.set_defaults(func=upgrade)
    down = actions.add_parser("downgrade", help="roll back one migration (or to --revision, e.g. base)")
    down.add_argument("--revision", default="-1", help="target revision (default -1, the previous one)")
    down.set_defaults(func=downgrade)
    current = actions.add_parser("current", help="print the revision the database is at")
    current.set_defaults(func=show_current)
    for action in (up, down, current):
        action.add_argument(
            "--json", action="store_true", help='print {"revision": ...} (null: base, empty) as JSON'
        )


def upgrade(args: argparse.Namespace) -> int:
    from server.core import migrate

    url = ServerSettings().resolved_database_url
    migrate.upgrade(url, args.revision)
    return _show(args, "database at revision ", migrate.current_revision(url))


def downgrade(args: argparse.Namespace) -> int:
    from server.core import migrate

    url = ServerSettings().resolved_database_url
    migrate.downgrade(url, args.revision)
    return _show(args, "database at revision ", migrate.current_revision(url))


def show_current(args: argparse.Namespace) -> int:
    from server.core import migrate

    return _show(args, "", migrate.current_revision(ServerSettings().resolved_database_url))


def _show(args: argparse.Namespace, words: str, revision: str | None) -> int:
    print(views.as_json({"revision": revision}) if args.json else words + (revision or "base (empty)"))
    return 0
