"""`autoresearch mcp`: the MCP server over stdio, for a coding agent that starts it as a subprocess.

The server URL and the agent token come from $AUTORESEARCH_SERVER and $AUTORESEARCH_TOKEN (or
--server / --token), as for the other agent commands; each tool call is a REST call to that server
(server/mcp/tools.py). docs/agents.md shows the agent's MCP settings.
"""

from __future__ import annotations

import argparse

from cli.connection import add_connection_args, connect
from server.core.config import MCP_MAX_WAIT_S


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve the MCP tools over stdio (for coding agents; see docs/agents.md)",
        description="Run the Model Context Protocol server on standard input and output: tools for the "
        "best, submitting and following a change, searching experiments, the leaderboard, the noise "
        "and notes, each a call of the server's REST API with your agent token. Agents start it as "
        "a subprocess; it does not print anything else on standard output.",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=MCP_MAX_WAIT_S,
        metavar="S",
        help="the longest a tool call waits for decisions, under your client's read timeout "
        f"(default {MCP_MAX_WAIT_S:g})",
    )
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from server.mcp.tools import build_mcp  # the MCP SDK is only loaded by this command

    connect(args, "mcp", token_required=True).close()  # the settings' errors now, before serving

    if not 0 < args.max_wait <= 600:
        raise SystemExit("autoresearch mcp: --max-wait must be more than 0 and at most 600 seconds")
    build_mcp(lambda: connect(args, "mcp", token_required=True), max_wait_s=args.max_wait).run("stdio")
    return 0
