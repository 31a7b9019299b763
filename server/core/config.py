"""Server settings, read from the environment (and `.env`) with pydantic-settings.

Every setting is documented in docs/operations.md ("Settings"). Names are the upper-case field
names without a prefix (DATABASE_URL, MIN_DELTA, ...), so that they sit next to the harness's
settings (DATA_DIR, PRESET, ...) in one environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", env_file=".env", extra="ignore")

    data_dir: Path = Path("data")
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite file in DATA_DIR")
    research_repo: Path | None = Field(None, description="bare git repo; default DATA_DIR/research.git")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)

    admin_token: str = Field("", description="admin bearer token given in the environment")
    public_reads: bool = True
    token_cache_seconds: float = Field(5.0, ge=0.0)

    harness_id: str = Field("", description="pins the project's harness id (else the manifest)")
    platform: str = Field("", description="pins the project's platform (else the first worker)")

    min_delta: float = Field(0.0005, ge=0.0)
    lease_seconds: float = Field(60.0, gt=0.0)
    max_attempts: int = Field(3, ge=1)
    max_queued_per_agent: int = Field(20, ge=1)
    patch_max_bytes: int = Field(200_000, ge=1)
    train_py_max_bytes: int = Field(500_000, ge=1)
    max_request_bytes: int = Field(25_000_000, ge=1024)
    max_progress_events: int = Field(512, ge=8)
    claim_max_wait_s: float = Field(30.0, ge=0.0)
    lease_sweep_seconds: float = Field(5.0, gt=0.0)
    sqlite_busy_timeout_ms: int = Field(30_000, ge=0)
    sse_keepalive_seconds: float = Field(15.0, gt=0.0)
    sse_history: int = Field(1000, ge=0)
    sse_max_subscribers: int = Field(500, ge=1, description="open GET /events streams in all")
    sse_max_per_client: int = Field(10, ge=1, description="open GET /events streams per token or address")
    standings_refresh_seconds: float = Field(2.0, gt=0.0)
    worker_db_threads: int = Field(
        4, ge=1, description="threads for the worker endpoints' database work (more only contend for the GIL)"
    )

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'autoresearch.db').absolute()}"

    @property
    def resolved_research_repo(self) -> Path:
        return self.research_repo if self.research_repo is not None else self.data_dir / "research.git"


@lru_cache
def get_settings() -> ServerSettings:
    """The process-wide settings (read once)."""
    return ServerSettings()
