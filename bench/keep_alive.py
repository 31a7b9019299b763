"""Dropped connections from keep-alive timing, before and after the fix, in one run.

    python bench/keep_alive.py [--clients 96] [--rounds 5]

The real app (a new project on SQLite) runs in uvicorn twice: first with uvicorn's and httpx's
default keep-alive (the server closes an idle connection after 5 s, the client keeps one for
5 s), then with ours (the server 65 s, server/serving.py; the SDK 20 s, client/api.py). Each of
`--clients` clients, on its own connection, sends GET /api/v1/healthz, then `--rounds` times
waits about 5 s (4.9-5.1 s, where the two limits meet) and sends it again. A request sent on a
connection that the server is closing gets no answer: a transport error (`ReadError`,
`RemoteProtocolError`), counted and never retried. Exit status 1 if the fix drops any.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx
from request_profile import new_project

from client.api import CONNECTION_LIMITS
from server.main import create_app
from server.serving import KEEP_ALIVE_S, served_in_thread

DEFAULT_S = 5  # uvicorn's timeout_keep_alive and httpx's keepalive_expiry


async def one_client(url: str, limits: httpx.Limits, rounds: int, dropped: Counter[str]) -> int:
    """Requests sent; transport errors are counted in `dropped` by kind."""
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:
        for number in range(rounds + 1):
            if number:
                await asyncio.sleep(random.uniform(DEFAULT_S - 0.1, DEFAULT_S + 0.1))
            try:
                (await http.get("/api/v1/healthz")).raise_for_status()
            except httpx.TransportError as exc:
                dropped[type(exc).__name__] += 1
    return rounds + 1


async def clients(url: str, limits: httpx.Limits, count: int, rounds: int) -> tuple[int, Counter[str]]:
    dropped: Counter[str] = Counter()
    sent = await asyncio.gather(*(one_client(url, limits, rounds, dropped) for _ in range(count)))
    return sum(sent), dropped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setups = {
        f"before: server {DEFAULT_S:g} s, client {DEFAULT_S:g} s": (
            DEFAULT_S,
            httpx.Limits(keepalive_expiry=DEFAULT_S),
        ),
        f"after:  server {KEEP_ALIVE_S:g} s, client {CONNECTION_LIMITS.keepalive_expiry:g} s": (
            KEEP_ALIVE_S,
            CONNECTION_LIMITS,
        ),
    }
    failures = 0
    with tempfile.TemporaryDirectory(prefix="keep-alive-") as folder:
        settings, _token, _baseline = new_project(f"sqlite:///{folder}/bench.db", Path(folder))
        for label, (server_s, limits) in setups.items():
            with served_in_thread(create_app(settings), keep_alive_s=server_s) as url:
                sent, dropped = asyncio.run(clients(url, limits, args.clients, args.rounds))
            kinds = ", ".join(f"{kind} {count}" for kind, count in dropped.items()) or "none"
            print(f"{label}: {sum(dropped.values())}/{sent} requests dropped ({kinds})", flush=True)
            failures = sum(dropped.values())  # the last setup is the fix
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
