"""The feeder (trusted, runner side) and its client (sandbox side) over a real socket pair: the
same batches as the in-process loader, the first request timed, hostile requests refused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths, read_manifest
from harness.loader import packed_batches
from harness.runner.feeder import MAX_LOADERS, MAX_REQUEST_BYTES, MAX_SHARED_BYTES, SLOTS, Feeder, FeedJob
from harness.runner.sandboxed.feed_client import FeedClient

CPU = torch.device("cpu")

SEED = 1337  # the run's seed, which start() is given


@pytest.fixture
def job(test_data: tuple[HarnessSettings, PreparedPaths]) -> FeedJob:
    settings, paths = test_data
    bos = int(read_manifest(settings)["bos_id"])
    return FeedJob(paths.train_dir, settings.seq_len, bos, settings.train_tokens_max)


@pytest.fixture
def feeder_and_socket(job: FeedJob) -> Iterator[tuple[Feeder, socket.socket]]:
    """A started feeder and the sandbox's end of its socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    feeder = Feeder(job, ours)
    feeder.start(SEED)
    try:
        yield feeder, theirs
    finally:
        feeder.close()
        theirs.close()


def ask(sock: socket.socket, message: bytes) -> tuple[dict, list[int]]:
    sock.send(message)
    data, fds, _, _ = socket.recv_fds(sock, 4096, 1)
    return json.loads(data), fds


def test_batches_through_the_feeder_are_those_of_the_in_process_loader(
    job: FeedJob, feeder_and_socket: tuple[Feeder, socket.socket]
) -> None:
    feeder, sock = feeder_and_socket
    client = FeedClient(sock.detach(), on_first_request=lambda: None)
    fed_small, fed_large = client.batches(3, CPU), client.batches(5, CPU)
    local_small = packed_batches(job.train_dir, 3, job.seq_len, job.bos_id, CPU, SEED, job.max_tokens)
    local_large = packed_batches(job.train_dir, 5, job.seq_len, job.bos_id, CPU, SEED, job.max_tokens)
    for _ in range(3 * SLOTS):  # interleaved loaders, past the slots packed ahead
        for fed, local in ((fed_small, local_small), (fed_large, local_large)):
            (inputs, targets), (expected_inputs, expected_targets) = next(fed), next(local)
            assert inputs.dtype == torch.int64 and inputs.shape == expected_inputs.shape
            assert torch.equal(inputs, expected_inputs) and torch.equal(targets, expected_targets)
    assert feeder.failure is None


def test_rows_served_count_what_the_sandbox_was_handed_not_what_was_packed_ahead(
    feeder_and_socket: tuple[Feeder, socket.socket],
) -> None:
    """The run's trusted count of training rows: the score phase's bound follows from it, never
    from the count the sandbox reports."""
    feeder, sock = feeder_and_socket
    opened, fds = ask(sock, b'{"op": "open", "batch_size": 3}')
    for fd in fds:
        os.close(fd)
    time.sleep(0.2)  # the feeder packs its SLOTS batches ahead meanwhile
    assert feeder.rows_served == 0
    for _ in range(SLOTS + 2):  # past the packed slots
        assert ask(sock, json.dumps({"op": "next", "loader": opened["loader"]}).encode())[0]["ok"]
    ask(sock, b'{"op": "next", "loader": 99}')  # refused: serves nothing
    assert feeder.rows_served == 3 * (SLOTS + 2)


def test_startup_ends_at_the_first_request_not_at_creating_a_loader(
    feeder_and_socket: tuple[Feeder, socket.socket],
) -> None:
    feeder, sock = feeder_and_socket
    noted: list[float] = []
    client = FeedClient(sock.detach(), on_first_request=lambda: noted.append(time.monotonic()))
    batches = client.batches(2, CPU)
    time.sleep(0.3)
    assert feeder.first_request_at is None and noted == []  # a loader alone asks for nothing
    before = time.monotonic()
    next(batches)
    assert feeder.first_request_at is not None and before <= feeder.first_request_at <= time.monotonic()
    assert len(noted) == 1 and noted[0] <= feeder.first_request_at
    next(batches)
    assert len(noted) == 1


def test_messages_train_py_writes_to_the_socket_do_not_shift_the_loaders_answers(
    job: FeedJob, feeder_and_socket: tuple[Feeder, socket.socket]
) -> None:
    """A candidate can write to any fd (tests/runner/candidates/hostile/fake_val_bpb.py forges on
    all of them): the answers to its own messages, refusals or not, are not taken for ours."""
    _, sock = feeder_and_socket
    client = FeedClient(os.dup(sock.fileno()), on_first_request=lambda: None)
    batches = client.batches(3, CPU)
    local = packed_batches(job.train_dir, 3, job.seq_len, job.bos_id, CPU, SEED, job.max_tokens)
    first = next(batches)
    for forged in (
        b'{"ev": "done"}\n{"ev": "stats"}\n',
        b'{"op": "open", "batch_size": 2}',
        b'{"op": "next", "loader": 5}',
    ):
        sock.send(forged)  # from the same process, as train.py would
    time.sleep(0.2)  # the feeder has answered them all before our next request
    fed = [first, *(next(batches) for _ in range(5))]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(fed, (next(local) for _ in range(6)), strict=True))
    with pytest.raises(RuntimeError, match="batch_size must be a positive integer"):
        next(client.batches(-1, CPU))  # a refusal of our own request still reaches us


def test_hostile_requests_get_precise_refusals_and_change_nothing(
    feeder_and_socket: tuple[Feeder, socket.socket],
) -> None:
    feeder, sock = feeder_and_socket
    refusals = {
        b"not json": "JSON object",
        b"[1, 2]": "unknown request",
        b'{"op": "delete"}': "unknown request",
        b" " * (MAX_REQUEST_BYTES + 100): f"longer than {MAX_REQUEST_BYTES}",
        b'{"op": "open", "batch_size": true}': "batch_size must be a positive integer",
        b'{"op": "open", "batch_size": -4}': "batch_size must be a positive integer",
        b'{"op": "open", "batch_size": 1e9}': "batch_size must be a positive integer",
        b'{"op": "open", "batch_size": 100000000000}': f"at most {MAX_SHARED_BYTES >> 20} MiB",
        b'{"op": "next", "loader": 7}': "no open loader 7",
        b'{"op": "close", "loader": "0"}': "loader must be a non-negative integer",
    }
    for message, error in refusals.items():
        reply, fds = ask(sock, message)
        assert reply["ok"] is False and error in reply["error"], (message, reply)
        assert fds == []
    assert feeder.loaders == {}  # nothing was allocated
    opened = []
    for _ in range(MAX_LOADERS):
        reply, fds = ask(sock, b'{"op": "open", "batch_size": 2}')
        assert reply["ok"], reply
        opened.append(fds[0])
    reply, _ = ask(sock, b'{"op": "open", "batch_size": 2}')
    assert reply == {"ok": False, "error": f"at most {MAX_LOADERS} loaders can be open at once", "id": None}
    reply, _ = ask(sock, b'{"op": "close", "loader": 0}')
    assert reply == {"ok": True, "id": None}
    reply, _ = ask(sock, b'{"op": "next", "loader": 1}')  # the others still serve
    assert reply["ok"] and 0 <= reply["slot"] < SLOTS
    for fd in opened:
        os.close(fd)
    assert feeder.failure is None


def test_a_sandbox_cannot_resize_the_shared_buffers(feeder_and_socket: tuple[Feeder, socket.socket]) -> None:
    """The feeder writes into these buffers: shrinking one would make it fault (SIGBUS)."""
    _, sock = feeder_and_socket
    reply, (fd,) = ask(sock, b'{"op": "open", "batch_size": 2}')
    size = os.fstat(fd).st_size
    assert size == SLOTS * 2 * reply["row_len"] * 2  # uint16 tokens
    for length in (0, size // 2, size * 2):
        with pytest.raises(PermissionError):
            os.ftruncate(fd, length)
    os.close(fd)
    reply, _ = ask(sock, b'{"op": "next", "loader": 0}')
    assert reply["ok"]


def test_close_returns_while_the_sandbox_floods_requests_without_reading(
    feeder_and_socket: tuple[Feeder, socket.socket],
) -> None:
    feeder, sock = feeder_and_socket
    sock.setblocking(False)
    sent = 0
    with pytest.raises(BlockingIOError):  # its receive buffer fills, then the feeder's send blocks
        while sent < 1_000_000:
            sock.send(b'{"op": "next", "loader": 0}')
            sent += 1
    started = time.monotonic()
    feeder.close()
    assert time.monotonic() - started < 5.0
    assert not feeder.thread.is_alive()


def test_token_files_that_fail_mid_run_are_a_harness_failure(job: FeedJob, tmp_path: Path) -> None:
    train = tmp_path / "train"
    shutil.copytree(job.train_dir, train)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    feeder = Feeder(FeedJob(train, job.seq_len, job.bos_id, job.max_tokens), ours)
    feeder.start(SEED)
    try:
        client = FeedClient(theirs.detach(), on_first_request=lambda: None)
        batches = client.batches(4, CPU)
        next(batches)
        with open(train / "tokens.bin", "r+b") as handle:  # a disk that lost the file's end
            handle.truncate(64)
        with pytest.raises(RuntimeError, match="stopped serving training data"):
            for _ in range(10_000):
                next(batches)
        assert feeder.failure is not None and "tokens.bin" in feeder.failure
    finally:
        feeder.close()


def test_requests_from_two_threads_each_get_their_own_answer(
    job: FeedJob, feeder_and_socket: tuple[Feeder, socket.socket]
) -> None:
    _, sock = feeder_and_socket
    client = FeedClient(sock.detach(), on_first_request=lambda: None)
    results: dict[int, list[torch.Tensor]] = {}

    def drain(batch_size: int) -> None:
        batches = client.batches(batch_size, CPU)
        results[batch_size] = [next(batches)[0] for _ in range(20)]

    threads = [threading.Thread(target=drain, args=(size,)) for size in (2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for size in (2, 3):
        local = packed_batches(job.train_dir, size, job.seq_len, job.bos_id, CPU, SEED, job.max_tokens)
        assert all(torch.equal(got, next(local)[0]) for got in results[size])
