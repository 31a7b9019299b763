"""The server's background work (server/main.py `_in_background`): lease expiry, the WAL's
checkpoints and the carrying of queued changes after keeps all run in this one loop, so a failure
in one round must be logged and the next round must still come."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from server.main import _each_event, _every, _in_background


def test_a_failed_round_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []

    def work() -> None:
        rounds.append(len(rounds) + 1)
        if len(rounds) == 2:
            raise OSError("no space left on device")

    async def scenario() -> None:
        task = asyncio.create_task(_in_background(_every(0.001), work, "checkpointing the WAL"))
        async with asyncio.timeout(10):
            while len(rounds) < 4:
                await asyncio.sleep(0.001)
        task.cancel()

    with caplog.at_level(logging.ERROR, logger="server.main"):
        asyncio.run(scenario())
    assert rounds[:4] == [1, 2, 3, 4]
    failures = [r for r in caplog.records if r.getMessage() == "checkpointing the WAL failed"]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert str(failures[0].exc_info[1]) == "no space left on device"


def test_the_keep_rate_sweep_waits_for_an_event_between_rounds() -> None:
    """`_each_event` wakes the sweep only once something was published since its last round (a
    decision is an event): an idle server does not read the database every second."""
    bus = SimpleNamespace(last_event_id=5)  # the one attribute it reads
    wait = _each_event(bus, 0.001)  # type: ignore[arg-type]

    async def scenario() -> None:
        await asyncio.wait_for(wait(), 1)  # events were published before the first round
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(wait(), 0.1)  # none since
        bus.last_event_id = 6
        await asyncio.wait_for(wait(), 1)

    asyncio.run(scenario())
