"""`autoresearch serve`: run the API server (migrates the database first)."""

from __future__ import annotations

import argparse
import logging
import sys

from server.core.config import ServerSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the experiment server (REST API, events, pages)",
        description="Run the server for the research repo made by `autoresearch init`. Settings come "
        "from the environment (see docs/operations.md); --host and --port override HOST and PORT.",
    )
    parser.add_argument("--host", help="address to listen on (default: $HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: $PORT, else 8000)")
    parser.add_argument(
        "--fd", type=int, help="serve on this listening socket, inherited (instead of --host and --port)"
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default info"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from server.core.config import settings_error
    from server.harness_pin import TrackMismatch
    from server.main import StartupError, create_app
    from server.serving import Server, uvicorn_config

    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    try:
        settings = ServerSettings(**overrides)
    except ValidationError as exc:
        print(f"autoresearch serve: refusing to start: {settings_error(exc)}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        app = create_app(settings)
    except (StartupError, TrackMismatch) as exc:
        print(f"autoresearch serve: {exc}", file=sys.stderr)
        return 2
    Server(uvicorn_config(app, settings.host, settings.port, args.fd, log_level=args.log_level)).run()
    return 0
