"""The server's layers, read from the code's own imports: persistence (server/crud) calls nothing
above it, so a reader of a crud module finds rows read and written, not decisions or transactions
(issue 31). Flows are what routes and background tasks call."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "server"
# Above persistence: the decision rules' effects, the app context (transactions, events), the flows
# and the HTTP layer.
ABOVE_CRUD = (
    "server.flows.decisions",
    "server.context",
    "server.flows",
    "server.api",
    "server.pages",
    "server.main",
)


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_crud_imports_nothing_above_it() -> None:
    modules = sorted((SERVER / "crud").glob("*.py"))
    assert len(modules) > 10
    offending = {
        path.name: sorted(name for name in imported(path) if name.startswith(ABOVE_CRUD)) for path in modules
    }
    assert {name: found for name, found in offending.items() if found} == {}


def test_routes_reach_the_worker_protocol_and_submissions_through_flows() -> None:
    worker_routes = imported(SERVER / "api" / "routes" / "worker.py")
    assert {"server.flows", "server.flows.results", "server.flows.workers"} <= worker_routes
    assert not any(name.startswith("server.crud.leases") for name in worker_routes)
    assert "server.flows.submit" in imported(SERVER / "api" / "routes" / "experiments.py")
