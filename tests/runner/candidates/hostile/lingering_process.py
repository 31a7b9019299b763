# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: leaves a detached daemon running after train() returns."""

import os
import subprocess
import sys


def train(model, ctx):
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", HOSTILE_ARGS["marker"]],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if os.fork() == 0:  # and a classic double-forked daemon
        os.setsid()
        if os.fork() == 0:
            os.execv(
                sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", HOSTILE_ARGS["marker"]]
            )
        os._exit(0)
    honest_train(model, ctx)
