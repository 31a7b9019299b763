# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: while scored, trains in processes the kernel reaps at once, so that sampling the live
processes never sees their CPU time: the model process makes itself a child subreaper, ignores
SIGCHLD, and trains the table (shared memory) in a chain of short-lived children, each of which
starts the next and exits. Before that it tries every way to start a process and says what each
did, so a test sees that none got through."""

import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
CHAIN = 4  # children, one after another
STEPS_EACH = 200


def attempts():
    libc = ctypes.CDLL(None, use_errno=True)
    machine_clone = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)

    def raw(number, *args):
        def call():
            if libc.syscall(number, *args) == -1:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            os._exit(0)  # a child (0) would leave here; the parent goes on

        return call

    return {
        "fork": os.fork,
        "subprocess": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
        "posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
        "multiprocessing": lambda: multiprocessing.get_context("fork").Process(target=print).start(),
        "clone": raw(machine_clone, signal.SIGCHLD, 0, 0, 0, 0),
        "clone3": raw(435, 0, 0),
    }


def try_every_way():
    for name, attempt in attempts().items():
        try:
            pid = attempt()
        except Exception as exc:  # refused, as it should be
            print(f"REFUSED {name}: {type(exc).__name__}", file=sys.stderr, flush=True)
            continue
        if pid == 0:  # a child of os.fork
            os._exit(0)
        print(f"STARTED {name}", file=sys.stderr, flush=True)


def train_in_chain(model, links, done):
    """Each child trains, starts the next and exits; the last one tells the model process."""
    if os.fork() == 0:
        train_on_carried(model, STEPS_EACH)
        print("CHILD TRAINED", file=sys.stderr, flush=True)
        if links > 1:
            train_in_chain(model, links - 1, done)
        else:
            os.write(done, b"x")
        os._exit(0)


def train_hidden(module, keys):
    """After the harness loaded the weights (in place, into the shared table): the chain, waited for."""
    try_every_way()
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    done_r, done_w = os.pipe()
    try:
        train_in_chain(module, CHAIN, done_w)
    except PermissionError:
        print("NO CHAIN", file=sys.stderr, flush=True)
        return
    os.read(done_r, 1)


def build_model(ctx):
    model = carrier(ctx)
    if ctx.time_left() <= 0:  # scored
        model.table.weight.data.share_memory_()
        model.register_load_state_dict_post_hook(train_hidden)
    return model
