"""The Jinja2 environment of the pages: template folder, formatting filters, static file URLs."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from fastapi.templating import Jinja2Templates

from server.rules.judge import fmt_p

SERVER_DIR = Path(__file__).resolve().parents[1]
TEMPLATES_DIR = SERVER_DIR / "templates"
STATIC_DIR = SERVER_DIR / "static"


def bpb(value: float | None) -> str:
    """val_bpb as autoresearch prints it (6 decimals), or a dash when there is none."""
    return "—" if value is None else f"{value:.6f}"


def signed(value: float | None, decimals: int = 6) -> str:
    return "—" if value is None else f"{value:+.{decimals}f}"


def pvalue(value: float | None) -> str:
    """A p-value as decisions state it: 3 decimals, or < 0.001."""
    return "—" if value is None else fmt_p(value).removeprefix("= ")


def utc(moment: datetime | None) -> str:
    return "—" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).isoformat()


def ago(moment: datetime | None) -> str:
    """How long ago, in the largest whole unit (the page refreshes while people watch)."""
    if moment is None:
        return "never"
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def thousands(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


@cache
def static_url(name: str) -> str:
    """/static/<name>?v=<content hash>: browsers may cache it for good, a new version gets a new URL."""
    digest = hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]
    return f"/static/{name}?v={digest}"


def build_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=TEMPLATES_DIR)
    env = templates.env
    env.trim_blocks = True
    env.lstrip_blocks = True
    env.filters.update(
        bpb=bpb,
        signed=signed,
        pvalue=pvalue,
        utc=utc,
        iso=iso,
        ago=ago,
        duration=duration,
        thousands=thousands,
    )
    env.globals["static_url"] = static_url
    return templates


templates = build_templates()
