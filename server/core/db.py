"""Database engine and sessions for SQLite (default) and PostgreSQL.

SQLite runs in WAL mode with a busy timeout. The server copies the WAL into the database file
in a thread of its own (`checkpoint_in_background`, `Database.checkpoint`), not in the commit
that fills it, SQLite's default: that commit holds the write lock while it writes the pages and
waits for the disk, for a long time on a busy disk (docs/benchmarks.md), while every other
writer queues for the lock. Its write transactions start with
`BEGIN IMMEDIATE`, so that a transaction which reads and then writes takes the write lock up
front instead of failing with SQLITE_BUSY when another writer committed in between; reads use
plain deferred transactions and never wait for writers (WAL). PostgreSQL uses row locks where
write transactions need them (see `server/crud/`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

_BEGIN_OPTION = "sqlite_begin"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _normalise_url(url: str) -> str:
    """postgresql:// means psycopg 3 here (the only PostgreSQL driver installed)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def create_db_engine(
    url: str, busy_timeout_ms: int = 30_000, checkpoint_in_background: bool = False
) -> Engine:
    """`checkpoint_in_background`: SQLite commits never checkpoint; the caller calls
    `Database.checkpoint` regularly (the server does, every WAL_CHECKPOINT_SECONDS)."""
    url = _normalise_url(url)
    if not is_sqlite(url):
        return create_engine(url, pool_size=20, max_overflow=20, pool_pre_ping=True)
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        pool_size=20,
        max_overflow=20,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver, so that "begin" below decides.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if checkpoint_in_background:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


@dataclass
class Database:
    """The engine plus two session factories: `read()` and `write()` transactions."""

    engine: Engine

    def __post_init__(self) -> None:
        self.sqlite = self.engine.dialect.name == "sqlite"
        writer = self.engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}) if self.sqlite else self.engine
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._write_lock: AbstractContextManager[object] = threading.Lock() if self.sqlite else nullcontext()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that commits when the block ends normally and rolls back otherwise.

        On SQLite, writers of this process queue on a lock first: SQLite's own busy handler
        sleeps in growing steps while it waits, which under many concurrent writers makes the
        slowest waits seconds long. Other processes (the CLI) still meet the busy timeout.
        """
        with self._write_lock, self._write() as session, session.begin():
            yield session

    def ping(self) -> None:
        """Raises unless the database answers a query."""
        with self.read() as session:
            session.execute(text("SELECT 1"))

    def checkpoint(self) -> None:
        """Copy what it can of SQLite's WAL into the database file, waiting for no reader or
        writer (a passive checkpoint: writers go on appending to the WAL meanwhile)."""
        connection = self.engine.raw_connection()
        try:
            connection.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            connection.close()

    def dispose(self) -> None:
        self.engine.dispose()
