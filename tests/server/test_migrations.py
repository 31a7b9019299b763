"""Alembic is the only way the schema is made: upgrade, downgrade and upgrade again, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from server.core.db import create_db_engine
from server.core.migrate import current_revision, downgrade, upgrade
from server.models import Base

TABLES = {
    "project",
    "api_tokens",
    "workers",
    "experiments",
    "leases",
    "results",
    "progress_events",
    "idempotency_keys",
    "imported_results",
    "runs",
    "noise_estimates",
}


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    upgrade(database_url)
    assert current_revision(database_url) == "0004"
    assert _tables(database_url) == TABLES
    downgrade(database_url, "base")
    assert current_revision(database_url) is None
    assert _tables(database_url) == set()
    upgrade(database_url)
    assert _tables(database_url) == TABLES


def test_migrations_match_the_models(database_url: str) -> None:
    """The ORM models and the migrated schema agree (autogenerate finds nothing to do)."""
    upgrade(database_url)
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
