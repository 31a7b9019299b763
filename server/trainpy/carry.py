"""A change carried onto a new best: the part of a rebase that needs no database, computed once.

Re-applying a change onto the new best (server/flows/decisions.py, `_rebase`) reads three train.py,
carries the change over, summarises the result and writes its git commit. A claim does it for a
first run queued on a former best inside its transaction, which holds SQLite's one write lock
(PostgreSQL: the project row) that every submission and result waits for; after each keep the next
claims did it one after another, and that was half the time the lock was held (docs/benchmarks.md,
"API load": why changes are carried ahead after a keep). The result depends on the three commits
alone, so it is cached: right after each keep the server carries the changes queued on the former
best in a thread that holds no lock (decisions.carry_ahead, started by server/main.py), and the
rebases under the lock find them done. A claim that comes before that is done carries its own, as
it did before.

A carry's commit has no ref until a rebase uses it, and `git gc` prunes unreachable objects two
weeks old; so a carry is kept an hour at most, far inside that, and a claim that comes later
carries the change again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cachetools import TTLCache, cached

from server.trainpy.changes import ChangeSummary, summarize
from server.trainpy.limits import Limits, refusal
from server.trainpy.patches import PatchError
from server.trainpy.research_repo import ResearchRepo, blob_sha

CACHED = 64  # carries kept, and made ahead after a keep: more than the first runs queued at once
KEPT_S = 3600.0  # how long a carry is kept (its commit unreachable meanwhile)


@dataclass(frozen=True)
class Carried:
    """The change on the new best (its blob, commit and summary), or why it cannot go there."""

    stale: str | None = None
    blob: str = ""
    commit: str = ""
    change: ChangeSummary | None = None


@cached(TTLCache(maxsize=CACHED, ttl=KEPT_S), lock=threading.Lock(), info=True)
def carried(
    repo: ResearchRepo, base: str, own: str, best: str, message: str, author: str, limits: Limits
) -> Carried:
    """The change from `base` to `own`, carried onto `best` and committed there (no ref points at
    the commit yet: an unused one is an unreachable object, which `git gc` removes in time). The
    train.py it makes is held to `limits` as a submitted one is (server/trainpy/limits.py)."""
    try:
        moved = repo.cherry_pick(base, own, best, message, author)
    except PatchError as exc:
        return Carried(stale=f"its change does not apply to the new best: {exc.detail}")
    if moved.commit is None:
        return Carried(stale="the new best already contains its change")
    refused = refusal(moved.source, limits)
    if refused is not None:  # its commit stays unreachable, as an unused carry's does
        return Carried(stale=f"its change on the new best is refused: the {refused.detail}")
    return Carried(
        blob=blob_sha(moved.source.encode()), commit=moved.commit, change=summarize(moved.onto, moved.source)
    )
