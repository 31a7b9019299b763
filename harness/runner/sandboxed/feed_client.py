"""`ctx.loader` inside the train sandbox: batches asked of the trusted feeder (harness.runner.feeder).

Runs in the same process as untrusted train.py, so nothing here is trusted by the harness: the
harness times the first request on its own side. A loader asks for nothing until its first
next(); then a background thread (harness.loader.on_device) requests batches a few ahead and
turns each shared-memory slot into int64 (inputs, targets), pinned on CUDA for an async copy.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import operator
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from harness.loader import Batch, on_device, pair_from_rows

MAX_REPLY_BYTES = 4096


class FeedClient:
    def __init__(self, fd: int, on_first_request: Callable[[], None]) -> None:
        self.sock = socket.socket(fileno=fd)
        self.lock = threading.Lock()  # one request and its answer at a time, for all loaders
        self.on_first_request: Callable[[], None] | None = on_first_request
        # Loaders dropped by their consumer, to close at the next request: a generator finalizer
        # may run in a thread that holds the lock, so it must not talk to the feeder itself.
        self.dropped: list[int] = []
        self.sent = 0  # the id of the last request: answers with another id are not ours

    def request(self, **message: Any) -> tuple[dict[str, Any], list[int]]:
        with self.lock:
            if self.on_first_request is not None:
                self.on_first_request()
                self.on_first_request = None
            try:
                while self.dropped:
                    self._exchange({"op": "close", "loader": self.dropped.pop()})
                data, fds = self._exchange(message)
            except OSError:
                data, fds = b"", []
        if not data:
            raise RuntimeError("ctx.loader: the harness stopped serving training data")
        reply = json.loads(data)
        if not reply.get("ok"):
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"ctx.loader: {reply.get('error')}")
        return reply, fds

    def _exchange(self, message: dict[str, Any]) -> tuple[bytes, list[int]]:
        """Send one request and return its answer; answers to messages train.py wrote to this
        socket itself (it can write to any fd) are dropped, so they cannot shift ours."""
        self.sent += 1
        self.sock.send(json.dumps({**message, "id": self.sent}).encode())
        while True:
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_REPLY_BYTES, 1)
            if not data or json.loads(data).get("id") == self.sent:
                return data, fds
            for fd in fds:
                os.close(fd)

    def pairs(self, batch_size: int, pin_memory: bool) -> Iterator[torch.Tensor]:
        """Endless [2, B, T] int64 CPU tensors, copied out of the feeder's shared buffer."""
        reply, fds = self.request(op="open", batch_size=operator.index(batch_size))
        (fd,) = fds
        shape = (reply["slots"], reply["rows"], reply["row_len"])
        dtype = np.dtype(reply["dtype"])
        mapping = mmap.mmap(fd, int(np.prod(shape)) * dtype.itemsize, prot=mmap.PROT_READ)
        slots = np.frombuffer(mapping, dtype=dtype).reshape(shape)
        try:
            while True:
                slot = self.request(op="next", loader=reply["loader"])[0]["slot"]
                # The slot stays ours until the next request on this loader: copy it out first.
                yield pair_from_rows(slots[slot], pin_memory)
        finally:
            self.dropped.append(reply["loader"])
            del slots
            with contextlib.suppress(BufferError):  # a view may outlive us in a traceback
                mapping.close()
            os.close(fd)

    def batches(self, batch_size: int, device: torch.device) -> Iterator[Batch]:
        return on_device(self.pairs(batch_size, pin_memory=device.type == "cuda"), device)
