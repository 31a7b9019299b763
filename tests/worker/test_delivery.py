"""A result the server took (a success status) is acknowledged even when its answer is not the
documented model: the worker does not send it again for ever."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from client import Client
from tests.wrong_server import wrong_server
from worker.delivery import ResultSender
from worker.spool import Spool, new_entry


def test_a_result_whose_answer_is_not_understood_leaves_the_spool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path / "spool")
    entry = new_entry("lease-1", 1, {"status": "ok", "val_bpb": 1.0, "device": "cpu"})
    spool.put(entry)
    log = logging.getLogger("test-delivery")
    with wrong_server() as url, Client(url, "token") as client, caplog.at_level(logging.WARNING):
        sender = ResultSender(spool, client, log).start()
        give_up = threading.Event()  # were it sent again and again, drain would give up
        timer = threading.Timer(20.0, give_up.set)
        timer.start()
        try:
            assert sender.drain(give_up)
        finally:
            timer.cancel()
            sender.close()
    assert spool.pending() == [] and not list(spool.rejected_dir.iterdir())
    (record,) = [r for r in caplog.records if r.name == "test-delivery"]
    assert f"result {entry.result_id} recorded, but the answer was not understood" in record.getMessage()
    assert (
        "/api/v1/worker/leases/lease-1/result: the answer is not a valid ResultOutcome" in record.getMessage()
    )
