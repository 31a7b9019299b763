"""Alembic environment: migrations run against the URL that server.core.migrate passes in."""

from __future__ import annotations

from alembic import context

from server.core.db import create_db_engine
from server.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = create_db_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTERs need batch mode
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run `autoresearch db upgrade`")
run_migrations_online()
