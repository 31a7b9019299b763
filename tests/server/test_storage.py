"""How the server stores things: SQLite's mode and busy timeout, and tokens only as hashes."""

from __future__ import annotations

import hashlib

from sqlalchemy import text


def test_sqlite_runs_in_wal_mode_with_the_configured_busy_timeout(live_factory) -> None:
    live = live_factory(sqlite_busy_timeout_ms=12_345)
    with live.ctx.db.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 12_345
    assert (live.settings.data_dir / "autoresearch.db-wal").exists()


def test_tokens_are_stored_only_as_their_sha256(live) -> None:
    token = live.token("agent", "alice")
    assert live.client().http.get("/agents", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    with live.ctx.db.engine.connect() as connection:
        rows = [tuple(map(str, row)) for row in connection.execute(text("SELECT * FROM api_tokens"))]
        stored = set(connection.execute(text("SELECT token_hash FROM api_tokens")).scalars())
    assert not any(token in value for row in rows for value in row)
    assert hashlib.sha256(token.encode()).hexdigest() in stored
