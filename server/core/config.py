"""Server settings, read from the environment (and `.env`) with pydantic-settings.

Every setting is documented in docs/operations.md ("Settings"). Names are the upper-case field
names without a prefix (DATABASE_URL, MIN_DELTA, ...), so that they sit next to the harness's
settings (DATA_DIR, PRESET, ...) in one environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from protocol.states import Rule
from server.rules.judge import RuleSettings
from server.trainpy.limits import Limits

# The longest an MCP tool call waits for decisions: under a client's read timeout of 10 s (a common
# one), with room for the answer (server/mcp/waits.py).
MCP_MAX_WAIT_S = 8.0


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

    # Keep or revert (docs/api.md, "Decisions"; the defaults are measured in bench/decisions.py).
    decision_rule: Rule = Field(Rule.NOISE_AWARE, description="noise_aware, or greedy (one run, no noise)")
    alpha: float = Field(0.05, gt=0.0, le=0.5, description="a keep's one-sided significance level")
    min_delta: float = Field(0.0005, ge=0.0, le=1.0, description="the smallest effect worth keeping")
    noise_runs: int = Field(5, ge=2, le=100, description="runs of the baseline (each its own seed)")
    best_repeats: int = Field(4, ge=1, le=100, description="repeats of a kept change: its value's runs")
    max_runs: int = Field(4, ge=2, le=100, description="most runs of one candidate")
    screen_margin: float = Field(0.6, ge=0.0, le=5.0, description="standard errors a first run must gain")
    futility_margin: float = Field(1.0, ge=0.0, le=5.0, description="standard errors a candidate must keep")
    best_rerun_every: int = Field(0, ge=0, le=10_000, description="submissions per extra run of the best")
    # A fleet (docs/api.md, "Decisions"; measured in bench/research_night.py).
    calibrate_every: int = Field(
        4, ge=0, le=10_000, description="a worker's runs of a track per run of its best there (0: none)"
    )
    rerun_slowed_sigma: float = Field(
        0.0, ge=0.0, le=100.0, description="sigmas worse than its reference a run is run again at (0: never)"
    )
    worker_offsets: bool = Field(True, description="correct each run by its worker's offset")
    worker_offsets_half_life_h: float = Field(
        2.0, ge=0.0, le=10_000.0, description="hours over which an offset's runs count half (0: all alike)"
    )
    lease_seconds: float = Field(60.0, gt=0.0)
    max_attempts: int = Field(3, ge=1)
    max_queued_per_agent: int = Field(20, ge=1)
    notes_per_minute: int = Field(10, ge=1, le=10_000, description="notes one agent may post per minute")
    patch_max_bytes: int = Field(200_000, ge=1)
    train_py_max_bytes: int = Field(64_000, ge=1, description="largest accepted train.py: code, not data")
    train_py_max_data_bytes: int = Field(
        16_000, ge=0, description="most bytes of literals and comments in a train.py"
    )
    train_py_max_information_bytes: int = Field(
        24_000, ge=0, description="most bytes of information in a train.py (its size under deflate)"
    )
    max_request_bytes: int = Field(25_000_000, ge=1024)
    max_progress_events: int = Field(512, ge=8)
    claim_max_wait_s: float = Field(30.0, ge=0.0)
    mcp_max_wait_seconds: float = Field(
        MCP_MAX_WAIT_S, gt=0.0, le=600.0, description="the longest an MCP tool call waits for decisions"
    )
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
    fleet_progress_per_s: float = Field(
        50.0, gt=0.0, description="progress requests a second the whole fleet may send (server/fleet.py)"
    )

    @property
    def rule(self) -> RuleSettings:
        return RuleSettings(
            rule=self.decision_rule,
            alpha=self.alpha,
            min_delta=self.min_delta,
            screen_margin=self.screen_margin,
            futility_margin=self.futility_margin,
            max_runs=self.max_runs,
            rerun_slowed=self.rerun_slowed_sigma,
        )

    @property
    def train_py_limits(self) -> Limits:
        return Limits(
            self.train_py_max_bytes, self.train_py_max_data_bytes, self.train_py_max_information_bytes
        )

    @property
    def offsets_half_life_h(self) -> float | None:
        """The workers' offsets' half-life in hours, None with WORKER_OFFSETS off."""
        return self.worker_offsets_half_life_h if self.worker_offsets else None

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'autoresearch.db').absolute()}"

    @property
    def resolved_research_repo(self) -> Path:
        return self.research_repo if self.research_repo is not None else self.data_dir / "research.git"


def allowed_range(name: str) -> str:
    """A setting's allowed values in words, from its declared bounds: `0 < ALPHA <= 0.5`."""
    field = ServerSettings.model_fields[name]
    annotation: Any = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Rule):
        return f"{name.upper()} is one of {', '.join(rule.value for rule in Rule)}"
    low = high = ""
    for bound in field.metadata:
        if isinstance(bound, Gt):
            low = f"{bound.gt} < "
        elif isinstance(bound, Ge):
            low = f"{bound.ge} <= "
        elif isinstance(bound, Lt):
            high = f" < {bound.lt}"
        elif isinstance(bound, Le):
            high = f" <= {bound.le}"
    return f"{low}{name.upper()}{high}" if low or high else f"{name.upper()} is a {annotation.__name__}"


def settings_error(error: ValidationError) -> str:
    """What is wrong with the environment's settings, one line per setting: the name, the value and
    the allowed range (pydantic's own message names neither the variable nor the whole range)."""
    lines = []
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else ""
        value = problem.get("input")
        if name in ServerSettings.model_fields:
            lines.append(f"{name.upper()}={value} is not allowed: {allowed_range(name)} ({problem['msg']})")
        else:
            lines.append(f"{name or 'settings'}: {problem['msg']}")
    return "; ".join(lines)


@lru_cache
def get_settings() -> ServerSettings:
    """The process-wide settings (read once)."""
    return ServerSettings()
