"""The feeder: the only way training data reaches the train sandbox (trusted, runner side).

The token files are not visible in the train sandbox. `ctx.loader(batch_size)` there asks this
feeder for batches over a socket (harness.runner.sandboxed.feed_client); the feeder packs them
(harness.data.rows: seeded epoch order, best fit) into shared memory it owns, a few batches
ahead, and answers with the slot that holds the next one. So the harness knows, by its own
clock, when the candidate first asked for data: that ends startup (harness.runner.timing), and a
candidate cannot train on the corpus before it, because before it has none.

Everything that arrives on the socket is hostile input. Requests are small JSON objects whose
fields are checked; the shared memory of one run is capped; the feeder only ever writes the
shared buffers (it never reads back what the sandbox may write there), and each buffer is sealed
against shrinking, so the sandbox cannot make the feeder fault on a truncated mapping.

Protocol (SOCK_SEQPACKET, one JSON object per message, one answer per message, each answer
carrying the request's optional integer "id", or null):

    {"op": "open", "batch_size": B}  -> {"ok": true, "loader": L, "slots": S, "rows": B,
                                         "row_len": T + 1, "dtype": "uint16"} + the buffer's fd
    {"op": "next", "loader": L}       -> {"ok": true, "slot": k}: slot k holds the batch until the
                                         next request on L
    {"op": "close", "loader": L}      -> {"ok": true}
    anything else                     -> {"ok": false, "error": "..."}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.errors import DataError
from harness.data.rows import open_training_tokens, row_batches
from harness.data.tokens import TokenFile

SLOTS = 4  # batches per loader packed ahead of the sandbox's own prefetch (harness.loader)
MAX_REQUEST_BYTES = 1024
MAX_LOADERS = 16  # open at once; each ctx.loader() call opens one
# All buffers of one run together. The h100 baseline needs 4 x 64 x 2049 x 2 bytes = 1 MiB per
# loader; a batch too large for this would not fit a GPU's logits either.
MAX_SHARED_BYTES = 1 << 30


@dataclass(frozen=True)
class FeedJob:
    train_dir: Path
    seq_len: int
    bos_id: int
    max_tokens: int  # TRAIN_TOKENS_MAX, 0 = all


class RequestError(ValueError):
    """A request the feeder refuses; its message goes back to the sandbox."""


@dataclass
class Loader:
    """One ctx.loader() stream: its rows, its shared buffer and which slots are where."""

    rows: Iterator[np.ndarray]
    fd: int
    mapping: mmap.mmap
    slots: np.ndarray  # [SLOTS, B, T + 1], writable view of the shared buffer
    free: deque[int] = field(default_factory=lambda: deque(range(SLOTS)))
    ready: deque[int] = field(default_factory=deque)  # packed, in order, not yet handed out
    held: int | None = None  # handed out; free again at the loader's next request

    @property
    def nbytes(self) -> int:
        return self.slots.nbytes

    def fill_one(self) -> None:
        slot = self.free.popleft()
        self.slots[slot] = next(self.rows)
        self.ready.append(slot)

    def take(self) -> int:
        if self.held is not None:
            self.free.append(self.held)
            self.held = None
        if not self.ready:
            self.fill_one()
        self.held = self.ready.popleft()
        return self.held

    def close(self) -> None:
        del self.slots  # the mapping cannot close while a view of it exists
        self.mapping.close()
        os.close(self.fd)


class Feeder:
    """Serves one train sandbox's data requests from a thread of the runner, from `start()` (the
    experiment's `go`) until `close()`."""

    def __init__(self, job: FeedJob, sock: socket.socket) -> None:
        self.job = job
        self.sock = sock
        self.first_request_at: float | None = None  # time.monotonic() of the first message
        # Called on the first message, before it is answered and timed: startup's last act (the
        # compile cache's seal, harness.runner.compile_cache).
        self.on_first_request: Callable[[], None] | None = None
        # Rows of training data handed to the sandbox (each `next`): the run's trusted count of
        # what it trained on, behind the score phase's bound (harness.runner.scoring.score_budget).
        self.rows_served = 0
        self.failure: str | None = None  # the harness could not read the training data
        self.loaders: dict[int, Loader] = {}
        self.next_id = 0
        self.token_file: TokenFile | None = None
        self.stopped = False
        self.seed = 0  # set by start()
        self.thread = threading.Thread(target=self._serve, name="harness-feeder", daemon=True)

    def start(self, seed: int) -> None:
        """Serve from now on, in the order of documents `seed` draws: the run's seed, which the
        trusted side chose (no candidate knows it before its run), so two runs of any train.py
        see their data in different orders."""
        self.seed = seed
        self.thread.start()

    def close(self) -> None:
        """Stop serving and free every buffer; safe to repeat."""
        if self.stopped:
            return
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread in recv or send
        if self.thread.is_alive():
            self.thread.join()
        self.sock.close()
        for loader in self.loaders.values():
            loader.close()
        self.loaders.clear()

    def _serve(self) -> None:
        requests = select.poll()
        requests.register(self.sock, select.POLLIN)
        try:
            while not self.stopped:
                ahead = any(loader.free for loader in self.loaders.values())
                if not requests.poll(0 if ahead else None):
                    self._fill_ahead()
                    continue
                data = self._receive()
                if not data:
                    return
                if self.first_request_at is None:
                    if self.on_first_request is not None:
                        self.on_first_request()
                    self.first_request_at = time.monotonic()
                reply, fd = self._answer(data)
                if not self._send(json.dumps(reply).encode(), fd):
                    return
        except Exception as exc:  # a harness fault (e.g. the token files became unreadable)
            self.failure = self.failure or f"the feeder failed: {type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):  # the sandbox's next request sees the socket closed
                self.sock.shutdown(socket.SHUT_RDWR)

    def _receive(self) -> bytes:
        """The next request, or b"" when the sandbox is gone or close() shut the socket."""
        try:
            return self.sock.recv(MAX_REQUEST_BYTES + 1)
        except OSError:
            return b""

    def _send(self, message: bytes, fd: int | None) -> bool:
        try:
            if fd is None:
                self.sock.send(message)
            else:
                socket.send_fds(self.sock, [message], [fd])
        except OSError:
            return False
        return True

    def _fill_ahead(self) -> None:
        """Pack one batch for the loader with the fewest ready."""
        waiting = [loader for loader in self.loaders.values() if loader.free]
        if waiting:
            min(waiting, key=lambda loader: len(loader.ready)).fill_one()

    def _answer(self, data: bytes) -> tuple[dict[str, Any], int | None]:
        """The reply to one message, carrying the request's `id` (None when it has none), so that
        the client can skip answers to messages it did not send (a candidate may write to any fd)."""
        try:
            reply, fd = self._reply(parse_request(data))
        except RequestError as exc:
            reply, fd = {"ok": False, "error": str(exc)}, None
        return {**reply, "id": request_id(data)}, fd

    def _reply(self, request: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        try:
            if request["op"] == "open":
                return self._open(request["batch_size"])
            loader = self.loaders.get(request["loader"])
            if loader is None:
                raise RequestError(f"no open loader {request['loader']}")
            if request["op"] == "next":
                slot = loader.take()
                self.rows_served += loader.slots.shape[1]
                return {"ok": True, "slot": slot}, None
            loader.close()
            del self.loaders[request["loader"]]
            return {"ok": True}, None
        except DataError as exc:
            self.failure = str(exc)
            raise

    def _open(self, batch_size: int) -> tuple[dict[str, Any], int]:
        if len(self.loaders) >= MAX_LOADERS:
            raise RequestError(f"at most {MAX_LOADERS} loaders can be open at once")
        if self.token_file is None:
            self.token_file = open_training_tokens(self.job.train_dir, self.job.bos_id, self.job.max_tokens)
        row_len = self.job.seq_len + 1
        dtype = self.token_file.tokens.dtype
        nbytes = SLOTS * batch_size * row_len * dtype.itemsize
        in_use = sum(loader.nbytes for loader in self.loaders.values())
        if in_use + nbytes > MAX_SHARED_BYTES:
            raise RequestError(
                f"batch_size={batch_size} needs {nbytes >> 20} MiB of batch buffers, and the open "
                f"loaders already use {in_use >> 20} of at most {MAX_SHARED_BYTES >> 20} MiB; "
                "use a smaller batch (accumulate gradients over several) or fewer loaders"
            )
        fd = os.memfd_create("training-batches", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            mapping = mmap.mmap(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        slots = np.frombuffer(mapping, dtype=dtype).reshape(SLOTS, batch_size, row_len)
        rows = row_batches(self.token_file, batch_size, self.job.seq_len, self.seed, self.job.max_tokens)
        loader_id = self.next_id
        self.next_id += 1
        self.loaders[loader_id] = Loader(rows=rows, fd=fd, mapping=mapping, slots=slots)
        reply = {
            "ok": True,
            "loader": loader_id,
            "slots": SLOTS,
            "rows": batch_size,
            "row_len": row_len,
            "dtype": dtype.name,
        }
        return reply, fd


def parse_request(data: bytes) -> dict[str, Any]:
    """A checked request from the sandbox, or RequestError."""
    if len(data) > MAX_REQUEST_BYTES:
        raise RequestError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RequestError("a request must be a JSON object") from exc
    if not isinstance(request, dict) or request.get("op") not in ("open", "next", "close"):
        raise RequestError("unknown request; ops are open, next and close")
    key = "batch_size" if request["op"] == "open" else "loader"
    value = request.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "batch_size" else 0):
        raise RequestError(f"{key} must be a {'positive' if key == 'batch_size' else 'non-negative'} integer")
    return request


def request_id(data: bytes) -> int | None:
    """The message's integer "id", also when the rest of it is refused; None if it has none."""
    with contextlib.suppress(ValueError, RecursionError):
        message = json.loads(data) if len(data) <= MAX_REQUEST_BYTES else None
        if isinstance(message, dict) and type(message.get("id")) is int:
            return message["id"]
    return None
