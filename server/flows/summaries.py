"""Background summaries of what changes changed, for keep rates, near misses and similarity.

Each change is summarised once, when it is queued (server/crud/similar.py, `store_change`);
experiments queued before summaries were stored get theirs when the server starts (`backfill`).
A decided experiment's summary becomes rows of kinds (server/crud/change_kinds.py) shortly after
its decision (`summarise_pending`), outside the result's transaction: on SQLite every other
writer would wait on it.
"""

from __future__ import annotations

import logging

from protocol.events import Summarised
from server.context import AppContext
from server.crud import change_kinds, similar
from server.trainpy.changes import summarize

log = logging.getLogger(__name__)

BATCH = 200  # experiments summarised per write transaction
SWEEP_SECONDS = 1.0  # how soon after its decision an experiment's change is summarised


def summarise_pending(ctx: AppContext, batch: int = BATCH) -> int:
    """Store the kinds of what every decided experiment not yet counted changed; how many.

    A batch at a time: the stored summaries are read, then written as kinds in one short
    transaction that announces each experiment with a `summarised` event.
    """
    done = 0
    while True:
        with ctx.db.read() as session:
            summaries = change_kinds.pending(session, batch)
        if not summaries:
            return done
        with ctx.transaction() as tx:
            change_kinds.store_kinds(tx.session, summaries)
            for id_ in summaries:
                tx.emit(Summarised(experiment_id=id_))
        done += len(summaries)


def backfill(ctx: AppContext, batch: int = BATCH) -> int:
    """Summarize the changes of experiments queued before their summaries were stored (once,
    after migration 0009); how many. Reads each experiment's and its base's train.py from git."""
    done = 0
    sources: dict[str, str] = {}  # many experiments share a base

    def source(commit: str) -> str:
        if commit not in sources:
            sources[commit] = ctx.repo.train_py(commit).decode("utf-8", "replace")
        return sources[commit]

    while True:
        with ctx.db.read() as session:
            missing = similar.unsummarised(session, batch)
        if not missing:
            return done
        with ctx.transaction() as tx:
            for row in missing:
                summary = summarize(source(row.base_commit), source(row.commit_sha))
                similar.store_change(tx.session, row.id, summary)
        done += len(missing)
        log.info("summarized the changes of %d earlier experiments", done)
