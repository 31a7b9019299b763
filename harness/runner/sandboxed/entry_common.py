"""Shared by the entry points that run inside a sandbox: limits, candidate import, reporting.

This code runs in the same process as untrusted `train.py`, so nothing it reports is trusted by
the harness; it exists to give honest candidates precise error messages.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import sys
import threading
import traceback
from types import ModuleType
from typing import Any, NoReturn

from harness.runner.messages import MAX_TEXT_CHARS, encode

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


class Reporter:
    """Writes protocol messages to the harness's pipe; silently stops if the pipe is gone."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, event: str, **fields: Any) -> None:
        data = encode(event, **fields)
        with self.lock, contextlib.suppress(OSError):
            os.write(self.fd, data)

    def error(self, where: str, exc: BaseException, kind: str | None = None) -> None:
        lines = traceback.format_exception(exc)
        tail = "".join(lines)[-MAX_TEXT_CHARS:]
        message = f"{type(exc).__name__}: {exc}"[:MAX_TEXT_CHARS]
        self.send("error", where=where, kind=kind or failure_kind(exc), message=message, traceback=tail)
        print(tail, file=sys.stderr, flush=True)


def failure_kind(exc: BaseException) -> str:
    """'oom' for out-of-memory errors (host or CUDA), 'disk' for a full work folder or a file past
    RLIMIT_FSIZE (Python ignores SIGXFSZ, so the write fails with EFBIG), else 'exception'."""
    if isinstance(exc, MemoryError):
        return "oom"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "disk"
    text = str(exc).lower()
    if type(exc).__name__ == "OutOfMemoryError" or any(marker in text for marker in OOM_MARKERS):
        return "oom"
    return "exception"


CANDIDATE_MODULE = "train"  # the name train.py is imported under


def import_candidate(path: str) -> ModuleType:
    """Import train.py from `path` as the module CANDIDATE_MODULE."""
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE] = module
    spec.loader.exec_module(module)
    for name in ("build_model", "train"):
        if not callable(getattr(module, name, None)):
            raise AttributeError(f"train.py must define a function `{name}`")
    return module


def finish(code: int) -> NoReturn:
    """Exit at once: candidate threads must not outlive the entry, nor delay the exit."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
