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
            sqlite = connection.dialect.name == "sqlite"
            if sqlite:
                # Batch mode rebuilds a table (copy, drop, rename): with foreign keys enforced, dropping
                # a table that other rows point at fails. Off for the migration (outside any
                # transaction, where SQLite honours it), and the keys are checked after it.
                connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=sqlite,  # SQLite ALTERs need batch mode
            )
            with context.begin_transaction():
                context.run_migrations()
            if sqlite:
                driver = connection.connection.driver_connection
                broken = driver.execute("PRAGMA foreign_key_check").fetchall()  # type: ignore[union-attr]
                driver.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
                if broken:
                    raise RuntimeError(
                        f"the migration left rows whose foreign keys point nowhere: {broken[:5]}"
                    )
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run `autoresearch db upgrade`")
run_migrations_online()
