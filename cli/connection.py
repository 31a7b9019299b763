"""How the agent-side commands reach the server: --server and --token, and errors in plain words.

`--server` falls back to $AUTORESEARCH_SERVER and `--token` to $AUTORESEARCH_TOKEN (an agent
token; `import` needs an admin token). Tokens in the environment stay out of `ps` listings.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from client import ApiError, Client, SchemaError
from client.api import API_PREFIX

SERVER_ENV = "AUTORESEARCH_SERVER"
TOKEN_ENV = "AUTORESEARCH_TOKEN"
TRACK_ENV = "AUTORESEARCH_TRACK"
TOKEN_HINT = "create one on the server host with `autoresearch token create --kind agent --name NAME`"


def add_connection_args(parser: argparse.ArgumentParser, token_kind: str = "agent") -> None:
    parser.add_argument(
        "--server", metavar="URL", help=f"server URL, e.g. http://127.0.0.1:8000 (default: ${SERVER_ENV})"
    )
    parser.add_argument(
        "--token", help=f"{token_kind} token (default: ${TOKEN_ENV}, which keeps it out of `ps`)"
    )


def add_track_arg(parser: argparse.ArgumentParser, what: str = "the track") -> None:
    parser.add_argument(
        "--track",
        metavar="NAME",
        help=f"{what} (default: ${TRACK_ENV}, else the server's only track; `autoresearch track list`)",
    )


def track_of(args: argparse.Namespace) -> str | None:
    """--track, else $AUTORESEARCH_TRACK, else None (the server's only track)."""
    return args.track or os.environ.get(TRACK_ENV) or None


def connect(args: argparse.Namespace, command: str, *, token_required: bool) -> Client:
    """A client for the server named by --server/$AUTORESEARCH_SERVER; exits with the fix if unusable."""
    server = args.server or os.environ.get("AUTORESEARCH_SERVER")
    token = args.token or os.environ.get("AUTORESEARCH_TOKEN")
    if not server:
        raise SystemExit(
            f"autoresearch {command}: give the server URL with --server or ${SERVER_ENV} "
            "(e.g. http://127.0.0.1:8000, printed by `autoresearch up`)"
        )
    if not server.startswith(("http://", "https://")):
        raise SystemExit(f"autoresearch {command}: --server {server!r}: use a URL like http://HOST:8000")
    if token_required and not token:
        raise SystemExit(f"autoresearch {command}: give a token with --token or ${TOKEN_ENV} ({TOKEN_HINT})")
    return Client(server, token or None)


def explain(error: ApiError | SchemaError | httpx.HTTPError, server: str) -> str:
    """What went wrong, and what to do about it, in one message."""
    if isinstance(error, SchemaError):
        return f"the server's answer was not understood ({error}); is {server} a server of this version?"
    if isinstance(error, ApiError):
        hint = {
            401: f"check --token / ${TOKEN_ENV}; {TOKEN_HINT}",
            403: "this needs another kind of token (agent for submitting, admin for importing)",
        }.get(error.status)
        return f"the server refused: {error}" + (f" ({hint})" if hint else "")
    if isinstance(error, httpx.TimeoutException):
        return f"the server at {server} did not answer in time ({type(error).__name__})"
    return f"cannot reach the server at {server} ({error}); is it running (`autoresearch serve` or `up`)?"


@contextmanager
def reporting(command: str, client: Client) -> Iterator[None]:
    """Turn API, answer and transport errors into an exit with a message naming the fix."""
    try:
        yield
    except (ApiError, SchemaError, httpx.HTTPError) as error:
        server = str(client.http.base_url).rstrip("/").removesuffix(API_PREFIX)
        raise SystemExit(f"autoresearch {command}: {explain(error, server)}") from error
    finally:
        client.close()
