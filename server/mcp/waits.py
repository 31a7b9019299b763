"""How an MCP tool waits for decisions without outliving its client (`submit`, `experiment`, `wait`).

A client gives up on a call after its own read timeout (10 s is common), whatever progress
notifications arrive meanwhile. So no call waits longer than the server's cap, MAX_WAIT_S by
default (`MCP_MAX_WAIT_SECONDS` for /mcp, `autoresearch mcp --max-wait` for stdio), each tool's
description states it, and an answer that comes before the decision says how to go on (`next_step`):
a longer wait is a loop of calls. A wait ends early once an experiment that was pending when the
call came is decided (or all are), so passing an already decided experiment again does not end
the next wait at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable

import anyio.from_thread
from mcp.server.mcpserver import Context

from client import Client
from protocol.schemas import ExperimentOut
from protocol.states import FINAL_STATUSES, ExperimentStatus
from server.core.config import MCP_MAX_WAIT_S

MAX_WAIT_S = MCP_MAX_WAIT_S  # the default cap
POLL_S = 2.0  # how often a waiting call looks again (and tells the progress)

# Sends an MCP progress notification (share of the budget used, what is happening) from a tool's
# thread; a no-op when the client asked for none.
Notify = Callable[[float, str], None]


def notifier(ctx: Context) -> Notify:
    def notify(fraction: float, message: str) -> None:
        anyio.from_thread.run(functools.partial(ctx.report_progress, fraction, 1.0, message))

    return notify


def tell_progress(client: Client, experiment: ExperimentOut, notify: Notify) -> None:
    """The experiment's status, and its latest run's newest progress sample when it trains."""
    where = f"experiment {experiment.id}: {experiment.status}"
    if experiment.status != ExperimentStatus.RUNNING:
        notify(0.0, where)
        return
    samples = client.progress(experiment.id)
    if not samples.events:
        notify(0.0, f"{where}, starting")
        return
    last = samples.events[-1]
    loss = f", loss {last.loss:.4f}" if last.loss is not None else ""
    notify(last.fraction, f"{where}, run {samples.run} {last.phase} step {last.step}{loss}")


def pending(experiments: Iterable[ExperimentOut]) -> dict[int, ExperimentStatus]:
    """Each experiment not decided yet: its status."""
    return {e.id: e.status for e in experiments if e.status not in FINAL_STATUSES}


def follow(
    client: Client,
    experiment_ids: Iterable[int],
    wait_s: float,
    notify: Notify,
    seen: list[ExperimentOut] | None = None,
) -> list[ExperimentOut]:
    """The experiments (each once, in the order given) once one that was pending at the start is
    decided, or none is pending, or after `wait_s`; telling the first pending one's progress
    meanwhile. `seen`: the experiments as the caller just read them."""
    ids = list(dict.fromkeys(experiment_ids))
    deadline = time.monotonic() + wait_s
    seen = seen or [client.experiment(number) for number in ids]
    waiting_for = set(pending(seen))
    while waiting_for and time.monotonic() < deadline:
        tell_progress(client, next(e for e in seen if e.id in waiting_for), notify)
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        seen = [client.experiment(number) for number in ids]
        if not waiting_for <= set(pending(seen)):
            break
    return seen


def next_step(still_pending: Iterable[int], max_wait_s: float) -> str:
    """How to go on while some are not decided ("" when all are)."""
    ids = sorted(still_pending)
    if not ids:
        return ""
    return (
        f"not decided yet: call `wait` with experiment_ids {ids} to wait more "
        f"(each call waits at most {max_wait_s:g} s)"
    )
