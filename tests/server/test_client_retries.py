"""The SDK's `retry_for_s`: a client that rides out a server that is not up yet.

(The database-outage test in test_events_and_ops.py covers 503s and a submission stored once.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from client import Client
from server.main import create_app
from testkit.pg_scratch import free_port
from tests.server.conftest import init_with_small_baseline, make_settings, serve


def test_a_patient_client_waits_for_a_server_that_is_not_up_yet(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(httpx.ConnectError):
        Client(url).best()  # without retry_for_s: the error at once
    settings = make_settings(tmp_path)
    init_with_small_baseline(settings, tmp_path)
    with ThreadPoolExecutor(1) as pool:
        best = pool.submit(Client(url, retry_for_s=60).best)
        time.sleep(1.0)  # refused connections meanwhile
        assert not best.done()
        with serve(create_app(settings), port=port):
            assert best.result(timeout=60).experiment_id == 1


def test_a_patient_client_still_gives_up_in_time(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing will listen here
    with pytest.raises(httpx.ConnectError):
        Client(url, retry_for_s=1.0).best()
