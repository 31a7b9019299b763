"""SQLite's WAL is checkpointed by the server in the background, never by a commit
(server/core/db.py): a commit that checkpoints holds the write lock while it waits for the disk.
On a real SQLite file: the WAL grows past SQLite's 1000-page checkpoint when commits do not
checkpoint, and `Database.checkpoint` copies all of it into the database file."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from server.core.db import Database, create_db_engine

PAGE = 4096


def _write_pages(db: Database, pages: int) -> None:
    with db.write() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS filler (data BLOB)"))
    for _ in range(pages // 10):  # ten pages a commit
        with db.write() as session:
            session.execute(text("INSERT INTO filler VALUES (randomblob(:n))"), {"n": 10 * PAGE})


def _wal_pages(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size // PAGE


def test_commits_leave_the_checkpoints_to_the_server(tmp_path: Path) -> None:
    default, background = tmp_path / "default.db", tmp_path / "background.db"
    by_commits = Database(create_db_engine(f"sqlite:///{default}"))
    by_server = Database(create_db_engine(f"sqlite:///{background}", checkpoint_in_background=True))
    try:
        _write_pages(by_commits, 2500)
        _write_pages(by_server, 2500)
        assert _wal_pages(default) < 1200  # checkpointed by a commit at 1000 pages, then reused
        assert _wal_pages(background) > 2500  # no commit checkpointed
        assert background.stat().st_size < 100 * PAGE  # the rows are all in the WAL
        by_server.checkpoint()
        assert background.stat().st_size > 2500 * PAGE  # and now in the database file
    finally:
        by_commits.dispose()
        by_server.dispose()
