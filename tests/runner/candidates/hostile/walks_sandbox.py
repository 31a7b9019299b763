# ruff: noqa: F821
# Appended to good_bigram.py and tests/runner/leak_hash.py by tests/runner/candidates.py, which
# defines HOSTILE_ARGS, honest_build_model and honest_train.
"""Hostile: reads every byte it can in its sandbox and looks for validation text.

In build_model, before any batch of validation inputs can have reached the process, it walks the
whole visible file tree (or, when HOSTILE_ARGS["skip"] names the system and Python folders, the
rest of it; the system folders of HOSTILE_ARGS["system"] are read in the train sandbox and only
listed in the others), the memory and open files of every process of its sandbox
(/proc/PID/mem, /proc/PID/fd) and the rest of /proc/PID, and checks every 32-byte window at
16-byte steps against the hashes (no text) of the test's patterns (HOSTILE_ARGS): the validation
text, the evaluation rows as text and as token ids (int64, int32, uint16), and a canary planted
in the training text, which the test also wrote into this file as a comment so that the walk must
find it. In the train sandbox it then takes a row of training data, copies it into /dev/shm, and walks
memory, /dev/shm and /tmp again: the training canary's tokens must turn up there. Each walk prints
one LEAKWALK line of JSON.
"""

import base64
import hashlib
import json
import mmap
import os
import stat
import time

import numpy as np

CHUNK_WORDS = 1 << 20  # 8 MiB per step
STEP = STRIDE_BYTES // 8  # words from one window to the next
SMALL_FILE = 1 << 20  # smaller files are read whole and checked many at once
SEPARATOR = bytes(48)  # 32 and up to 16 for alignment: no window spans two files checked together
SKIPPED_IN_PROC = {"mem", "pagemap", "task", "clear_refs", "map_files", "cwd", "root", "exe", "fd"}


class Walker:
    def __init__(self):
        self.hashes = np.frombuffer(base64.b64decode(HOSTILE_ARGS["hashes"]), dtype=np.uint64)
        self.labels = np.frombuffer(base64.b64decode(HOSTILE_ARGS["labels"]), dtype=np.uint8)
        self.names = HOSTILE_ARGS["label_names"]
        first = np.frombuffer(base64.b64decode(HOSTILE_ARGS["first_table"]), dtype=np.uint8)
        self.first_table = np.unpackbits(first).astype(bool)
        self.out = np.empty(CHUNK_WORDS + SMALL_FILE // 8 + 8, dtype=np.uint64)  # a batch and one more
        self.findings = {name: [] for name in self.names}
        self.files = self.bytes = self.unreadable = 0
        self.seen = set()
        self.pending = []  # (name, contents) of small files not yet checked
        self.pending_bytes = 0

    def hits(self, words):
        """(window index, label) of the windows of uint64 `words`, every STEP words, that match:
        only windows whose first word is in the patterns' table are hashed."""
        found, index = matching_windows(words, STEP, self.first_table, self.hashes, self.out)
        return found, self.labels[index]

    def scan(self, name, chunks):
        """Check the uint64 words of one file or memory region, given as (first window, words)
        pieces; each piece carries the 2 words of the next one that its last window needs."""
        positions, labels = [], []
        for first, words in chunks:
            self.bytes += 8 * max(len(words) - 2, 0)
            found, label = self.hits(words)
            positions.append(first + found)
            labels.append(label)
        if positions:
            self.record(name, np.concatenate(positions), np.concatenate(labels))

    def add_small(self, name, data):
        self.pending.append((name, data))
        self.pending_bytes += len(data) + len(SEPARATOR) + 8

    def flush(self):
        """Check the pending small files in one pass, each starting at a multiple of 8 bytes."""
        if not self.pending:
            return
        padded = [data + SEPARATOR[: 32 + (-len(data)) % STRIDE_BYTES] for _, data in self.pending]
        starts = np.cumsum([0] + [len(data) // STRIDE_BYTES for data in padded])  # in windows
        found, label = self.hits(np.frombuffer(b"".join(padded), dtype=np.uint64))
        owner = np.searchsorted(starts, found, side="right") - 1
        for index in np.unique(owner):
            mine = owner == index
            self.record(self.pending[index][0], found[mine] - starts[index], label[mine])
        self.bytes += sum(len(data) for _, data in self.pending)
        self.pending, self.pending_bytes = [], 0

    def record(self, name, positions, labels):
        """A finding is a run of min_run or more consecutive windows (16-byte steps) of one label."""
        for label in np.unique(labels):
            steps = np.unique(positions[labels == label])
            breaks = np.flatnonzero(np.diff(steps) != 1)
            runs = np.diff(np.concatenate(([0], breaks + 1, [len(steps)])))
            if runs.max() >= HOSTILE_ARGS["min_run"]:
                self.findings[self.names[label]].append([name, int(runs.max())])

    def scan_file(self, path, follow=False):
        try:
            info = os.stat(path) if follow else os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                return
            key = (info.st_dev, info.st_ino)
            if key in self.seen and info.st_size:  # the same file bound at a second path
                return
            self.seen.add(key)
            with open(path, "rb", buffering=0) as handle:
                if info.st_size < SMALL_FILE:  # /proc files say size 0: read them to the end
                    self.add_small(path, handle.readall())
                else:
                    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                        self.scan(path, self.mapped_chunks(mapped))
            self.files += 1
        except (OSError, ValueError, BufferError):
            self.unreadable += 1
        if self.pending_bytes >= CHUNK_WORDS * 8:
            self.flush()

    def scan_memory(self, pid):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                regions = [line.split() for line in maps]
            handle = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError:
            self.unreadable += 1
            return
        try:
            for fields in regions:
                if "r" not in fields[1]:
                    continue
                start, end = (int(part, 16) for part in fields[0].split("-"))
                name = f"/proc/{pid}/mem {fields[0]} {fields[5] if len(fields) > 5 else ''}"
                try:
                    self.scan(name, self.region_chunks(handle, start, end))
                except OSError:
                    self.unreadable += 1
        finally:
            os.close(handle)

    @staticmethod
    def mapped_chunks(mapped):
        words = np.frombuffer(mapped, dtype=np.uint64, count=len(mapped) // 8)
        for first in range(0, len(words), CHUNK_WORDS):
            yield first // STEP, words[first : first + CHUNK_WORDS + 2]

    @staticmethod
    def region_chunks(handle, start, end):
        for offset in range(start, end, CHUNK_WORDS * 8):
            data = os.pread(handle, min(CHUNK_WORDS * 8 + 16, end - offset), offset)
            yield (offset - start) // STRIDE_BYTES, np.frombuffer(data, dtype=np.uint64, count=len(data) // 8)

    def walk_tree(self, top, skip=()):
        for root, dirs, names in os.walk(top, onerror=lambda error: None):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
            for name in names:
                self.scan_file(os.path.join(root, name))

    def walk_processes(self):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            folder = f"/proc/{entry}"
            self.scan_memory(entry)
            try:
                fds = os.listdir(f"{folder}/fd")
            except OSError:
                fds = []
            for fd in fds:  # memfds, deleted files, files opened elsewhere: through the link
                self.scan_file(f"{folder}/fd/{fd}", follow=True)
            for root, dirs, names in os.walk(folder, onerror=lambda error: None):
                dirs[:] = [d for d in dirs if d not in SKIPPED_IN_PROC]
                for name in names:
                    if name not in SKIPPED_IN_PROC:
                        self.scan_file(os.path.join(root, name))

    def report(self, phase, started, **extra):
        self.flush()
        summary = {
            **extra,
            "walk": phase,
            "seconds": round(time.monotonic() - started, 1),
            "files": self.files,
            "bytes": self.bytes,
            "unreadable": self.unreadable,
            "findings": {name: found[:20] for name, found in self.findings.items()},
        }
        print("LEAKWALK", json.dumps(summary), flush=True)


def listing(roots):
    """sha256 of the path, inode, size and modification time of every regular file under `roots`,
    and their count: sandboxes with the same listing there show the same bytes (the same host
    files, bound read-only)."""
    digest, count = hashlib.sha256(), 0
    for top in roots:
        for root, dirs, names in os.walk(top, onerror=lambda error: None):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    digest.update(f"{path}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
                    count += 1
    return [digest.hexdigest(), count]


def walk_everything(phase):
    started = time.monotonic()
    walker = Walker()
    # The system folders (HOSTILE_ARGS["system"]) are read in the train sandbox only; the others
    # list them, and the test checks that every sandbox lists the same files there.
    system = HOSTILE_ARGS["system"]
    unread = [] if phase == "train" else system
    # /sys is bound only on CUDA machines (read-only kernel attributes); /proc is walked per process.
    walker.walk_tree("/", skip=("/proc", "/sys", *HOSTILE_ARGS["skip"], *unread))
    walker.walk_processes()
    walker.report(phase, started, system_listing=listing(system))


def build_model(ctx):
    walk_everything("train" if ctx.time_left() > 0 else "score")
    return honest_build_model(ctx)


def train(model, ctx):
    """One row of training data (and what the loader fetches ahead), walked for in memory and in a
    copy in /dev/shm, then trained on for HOSTILE_ARGS["train_seconds"] of this thread's CPU time. A
    run served few tokens and training long on each gets a long startup in the score phase on a CPU
    (STARTUP_TOKENS of its own training, up to 2 % of the budget: harness.runner.scoring.score_budget), and
    the test gives a long budget: so the walks in the score sandboxes' build_model fit in it."""
    inputs, targets = next(ctx.loader(1))
    with open("/dev/shm/batch.bin", "wb") as handle:
        handle.write(inputs.numpy().tobytes())
    started = time.monotonic()
    walker = Walker()
    walker.walk_processes()
    walker.walk_tree("/dev/shm")
    walker.walk_tree("/tmp")
    walker.report("train-after-data", started)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    step, until = 0, time.thread_time() + HOSTILE_ARGS["train_seconds"]
    while time.thread_time() < until:
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
    ctx.log(step=step, loss=loss.item())
