"""The layers, read from the code's own imports.

Persistence (server/crud) calls nothing above it, so a reader of a crud module finds rows read and
written, not decisions or transactions (issue 31); flows are what routes and background tasks call.
Between packages no arrow points up and none goes round (issue 54): protocol/ (the shared
vocabulary) imports nothing of this repository, the harness only protocol, the pure rules and the
train.py text tools no database, the package graph has no cycle, and SQL is written only in crud."""

from __future__ import annotations

import ast
import graphlib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "server"
# Above persistence: the app context (transactions, events), the flows and the HTTP layer.
ABOVE_CRUD = ("server.context", "server.flows", "server.api", "server.pages", "server.mcp", "server.main")
PACKAGES = ("protocol", "harness", "client", "server", "worker", "cli", "agent", "testkit")
# The units of the package graph: the server's subpackages and root modules, and the other packages.
SERVER_PARTS = ("rules", "trainpy", "mcp", "crud", "flows", "api", "pages", "core", "models")
DATABASE = ("sqlalchemy", "server.crud", "server.core.db", "server.context", "server.transaction")
# SQLAlchemy's statement builders and raw SQL: only persistence writes them.
SQL_BUILDERS = {"select", "insert", "update", "delete", "text", "union_all", "exists"}
RAW_SQL_CALLS = {"execute", "exec_driver_sql", "executescript"}
# Where SQL may be written in the server: persistence, the schema (its server defaults are SQL
# text), and the engine (SQLite's pragmas and BEGIN mode on each connection, the WAL checkpoint and
# the health check's ping: about the connection, no table).
SQL_ALLOWED = ("server.crud", "server.models", "server.core.db")


def imported(path: Path) -> set[str]:
    """Every module `path` imports by absolute name (`from a import b` counts a.b when b is one)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            names |= {name for name in subs if module_path(name) is not None} or {node.module}
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def module_path(name: str) -> Path | None:
    path = REPO.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def unit(name: str) -> str | None:
    """The package graph's node for a module of this repository, None for any other module."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] == "server" and len(parts) > 1:
        return f"server.{parts[1]}"
    return parts[0]


def sql_written(path: Path) -> list[str]:
    """Each place in `path` that builds a statement with SQLAlchemy or passes SQL as a string, as
    `line: code`."""
    tree = ast.parse(path.read_text())
    builders, packages = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            builders |= {alias.asname or alias.name for alias in node.names if alias.name in SQL_BUILDERS}
        elif isinstance(node, ast.Import):
            packages |= {alias.asname or alias.name for alias in node.names if alias.name == "sqlalchemy"}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        built = isinstance(function, ast.Name) and function.id in builders
        qualified = (
            isinstance(function, ast.Attribute)
            and function.attr in SQL_BUILDERS
            and isinstance(function.value, ast.Name)
            and function.value.id in packages
        )
        raw = (
            isinstance(function, ast.Attribute)
            and function.attr in RAW_SQL_CALLS
            and bool(node.args)
            and isinstance(node.args[0], ast.Constant | ast.JoinedStr)
        )
        if built or qualified or raw:
            found.append(f"{node.lineno}: {ast.unparse(function)}(")
    return found


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def importing(found: dict[str, Path], prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules of `found` that import a module named with one of `prefixes`, and those."""
    offending = {
        name: sorted(n for n in imported(path) if n.startswith(prefixes)) for name, path in found.items()
    }
    return {name: names for name, names in offending.items() if names}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for name, path in modules(REPO / package).items():
            me = unit(name)
            assert me is not None
            graph[me] |= {u for other in imported(path) if (u := unit(other)) not in (None, me)}
    return graph


def test_crud_imports_nothing_above_it() -> None:
    found = modules(SERVER / "crud")
    assert len(found) > 10
    offending = {
        name: sorted(n for n in imported(path) if n.startswith(ABOVE_CRUD)) for name, path in found.items()
    }
    assert {name: names for name, names in offending.items() if names} == {}


def test_routes_reach_the_worker_protocol_and_submissions_through_flows() -> None:
    worker_routes = imported(SERVER / "api" / "routes" / "worker.py")
    assert {"server.flows.results", "server.flows.workers"} <= worker_routes
    assert not any(name.startswith("server.crud.leases") for name in worker_routes)
    assert "server.flows.submit" in imported(SERVER / "api" / "routes" / "experiments.py")


def test_the_package_graph_has_no_cycle() -> None:
    graph = package_graph()
    assert {f"server.{part}" for part in SERVER_PARTS} <= set(graph)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_the_bottom_layers_import_only_what_is_below_them() -> None:
    graph = package_graph()
    assert graph["protocol"] == set()
    assert graph["harness"] == {"protocol"}
    assert graph["client"] == {"protocol"}
    assert graph["server.models"] == {"protocol"}
    assert graph["server.trainpy"] <= {"protocol"}
    assert graph["server.rules"] <= {"protocol", "server.trainpy", "server.models"}


def test_rules_and_train_py_tools_touch_no_database() -> None:
    pure = {**modules(SERVER / "rules"), **modules(SERVER / "trainpy")}
    assert len(pure) > 15
    offending = {
        name: sorted(n for n in imported(path) if n.startswith(DATABASE)) for name, path in pure.items()
    }
    assert {name: names for name, names in offending.items() if names} == {}


def test_sql_is_written_only_in_persistence() -> None:
    found = modules(SERVER)
    assert "server.crud.pages" in found
    offending = {
        name: written
        for name, path in found.items()
        if not name.startswith(SQL_ALLOWED) and (written := sql_written(path))
    }
    assert offending == {}
    # The check sees what it refuses: crud and the engine write SQL, each in its own way.
    assert any("select(" in line for line in sql_written(SERVER / "crud" / "pages.py"))
    assert any("execute(" in line for line in sql_written(SERVER / "core" / "db.py"))
