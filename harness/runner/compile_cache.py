"""Compile once per train.py: what torch.compile (inductor, Triton) wrote while a train.py started,
kept by the worker for the next runs of the same train.py (its confirmation runs, the best's
repeats), which so skip most of their compile.

Trust. A cache is written by candidate code, so it is candidate content:
- it reaches only runs of the train.py that wrote it: its key is the file's sha256 (with the
  harness id), and a run is given the cache of its own key or none;
- it holds only what was written before training began. The train sandbox's cache folder lies in
  its work tmpfs (capped with it). The train entry hands the runner a descriptor of that folder
  with `ready`, before any candidate code runs, and the runner copies the folder out at the first
  data request, before answering it (the feeder's hook): nothing the run learns from data can be
  in it, and nothing written later is ever read;
- the copy takes regular files only and follows no link: every folder and file is opened relative
  to its parent's descriptor with O_NOFOLLOW, so a link planted in the cache cannot make the
  runner read a host file; at most MAX_BYTES, MAX_FILES and MAX_DEPTH (past any, nothing is
  kept: a cache made to be slow or deep to copy costs its run its cache, not the runner).
Restoring writes the kept files into the next run's cache folder the same way, before its `go`.

State. A cache is filled once per train.py, by the first run of it that ends ok, and never
refreshed, so nothing compounds from run to run. What it can carry is what that run computed
before its first data request, with no data. A run that restores it is credited only the startup
the sealing run did not use (`allowance_after`): the compute behind any run's state before its
first batch, its own and the cache's together, is at most one `compile_allowance`, whichever run
of the train.py it is (docs/runner.md, "Compile once per train.py").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

FOLDER = "compile-cache"  # in the train sandbox's work folder
# Where torch.compile writes, relative to the cache folder (set in the train sandbox's environment).
FOLDERS = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
HAND_OVER = b"compile-cache"
MAX_BYTES = 2 << 30
MAX_FILES = 20_000  # files and folders together
MAX_DEPTH = 32  # folders within folders (inductor and Triton use a few)
KEPT = 8  # caches per worker: the newest used, the others removed
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block


class TooLarge(Exception):
    pass


@dataclass(frozen=True)
class CacheUse:
    """What a run does with the compile cache: restore a kept one (with the startup seconds the run
    that sealed it had used), or seal its own into a folder."""

    restore: Path | None
    seal_into: Path | None
    sealed_after: float = 0.0


def allowance_after(allowance: float, use: CacheUse | None) -> float:
    """A run's startup credit: the preset's allowance, less what the run that sealed the cache it
    restores had used of its own, so that no state has more than one allowance behind it."""
    if use is None or use.restore is None:
        return allowance
    return max(0.0, allowance - use.sealed_after)


def cache_key(train_py: bytes, harness_id: str) -> str:
    return hashlib.sha256(harness_id.encode() + b"\0" + train_py).hexdigest()


def environment(folder: str) -> dict[str, str]:
    """The variables that point torch.compile's caches into `folder`."""
    return {name: os.path.join(folder, sub) for name, sub in FOLDERS.items()}


def hand_over(folder: str, feed_fd: int) -> None:
    """Create the cache folder with its subfolders and send the runner a descriptor of it over the
    feed socket (the train entry, before `ready`: no candidate code has run)."""
    for sub in FOLDERS.values():
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    descriptor = os.open(folder, _OPEN_DIR)
    try:
        with socket.socket(fileno=os.dup(feed_fd)) as feed:
            socket.send_fds(feed, [HAND_OVER], [descriptor])
    finally:
        os.close(descriptor)


def take_over(feed: socket.socket) -> int | None:
    """The cache folder's descriptor the entry sent with `ready` (the runner, on `ready`), or None
    when there is none (no caching for the run)."""
    try:
        message, fds, _, _ = socket.recv_fds(feed, len(HAND_OVER) + 1, 2, socket.MSG_DONTWAIT)
    except OSError:
        return None
    if message == HAND_OVER and len(fds) == 1 and stat.S_ISDIR(os.fstat(fds[0]).st_mode):
        return fds[0]
    for fd in fds:
        os.close(fd)
    return None


def copy_out(folder_fd: int, dest: Path) -> bool:
    """Copy the regular files under `folder_fd` into `dest` (a new folder); False, leaving nothing,
    when they exceed MAX_BYTES, MAX_FILES or MAX_DEPTH or the folder cannot be read."""
    budget = [MAX_BYTES, MAX_FILES]
    dest.mkdir()
    try:
        _copy_tree_out(folder_fd, dest, budget, MAX_DEPTH)
    except Exception:  # the tree is the candidate's: whatever it holds costs the run its cache only
        shutil.rmtree(dest, ignore_errors=True)
        return False
    return True


def _copy_tree_out(folder_fd: int, dest: Path, budget: list[int], depth: int) -> None:
    for entry in os.scandir(folder_fd):
        mode = os.lstat(entry.name, dir_fd=folder_fd).st_mode
        if stat.S_ISDIR(mode):
            budget[1] -= 1
            if budget[1] < 0 or depth <= 0:
                raise TooLarge
            child = os.open(entry.name, _OPEN_DIR, dir_fd=folder_fd)
            try:
                (dest / entry.name).mkdir()
                _copy_tree_out(child, dest / entry.name, budget, depth - 1)
            finally:
                os.close(child)
        elif stat.S_ISREG(mode):
            source = os.open(entry.name, _OPEN_FILE, dir_fd=folder_fd)
            try:
                if not stat.S_ISREG(os.fstat(source).st_mode):  # replaced since the lstat
                    continue
                budget[1] -= 1
                if budget[1] < 0:
                    raise TooLarge
                with open(dest / entry.name, "wb") as out, os.fdopen(os.dup(source), "rb") as data:
                    while chunk := data.read(1 << 20):
                        budget[0] -= len(chunk)
                        if budget[0] < 0:
                            raise TooLarge
                        out.write(chunk)
            finally:
                os.close(source)
        # links, FIFOs, sockets and devices are left out


def copy_in(source: Path, folder_fd: int) -> None:
    """Write the kept files under `source` into the folder of `folder_fd` (a fresh run's, before
    its candidate runs), creating subfolders relative to their parents' descriptors."""
    for entry in os.scandir(source):
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry.name, 0o755, dir_fd=folder_fd)
            child = os.open(entry.name, _OPEN_DIR, dir_fd=folder_fd)
            try:
                copy_in(Path(entry.path), child)
            finally:
                os.close(child)
        elif entry.is_file(follow_symlinks=False):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            target = os.open(entry.name, flags, 0o644, dir_fd=folder_fd)
            with os.fdopen(target, "wb") as out, open(entry.path, "rb") as data:
                shutil.copyfileobj(data, out, 1 << 20)


class CompileCaches:
    """A worker's kept caches, one folder per key under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find(self, key: str) -> tuple[Path, float] | None:
        """The kept cache of `key` (marked as just used) and the startup seconds of the run that
        sealed it, or None."""
        folder = self.root / key
        try:
            sealed_after = float((self.root / f".{key}.sealed-after").read_text())
        except (OSError, ValueError):
            return None  # no cache, or one kept without its startup: not used
        if not folder.is_dir():
            return None
        os.utime(folder)
        return folder, sealed_after

    def keep(self, sealed: Path, key: str, sealed_after: float) -> None:
        """Keep a run's sealed copy as the cache of `key`, sealed `sealed_after` seconds into its
        startup (if none is kept yet: the first one stays), and remove all but the KEPT most
        recently used."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=self.root))
        try:
            shutil.move(str(sealed), staging / "cache")  # a rename when on the same file system
            if not (self.root / key).exists():
                (self.root / f".{key}.sealed-after").write_text(f"{sealed_after!r}")
                with contextlib.suppress(OSError):
                    (staging / "cache").rename(self.root / key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        kept = sorted(
            (path for path in self.root.iterdir() if not path.name.startswith(".")),
            key=lambda path: path.stat().st_mtime,
            reverse=True,
        )
        for old in kept[KEPT:]:
            shutil.rmtree(old, ignore_errors=True)
            (self.root / f".{old.name}.sealed-after").unlink(missing_ok=True)
