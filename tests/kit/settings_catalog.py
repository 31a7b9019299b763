"""The settings the code actually reads, derived from the code (not a list kept by hand).

- ServerSettings and HarnessSettings fields, upper-cased (pydantic-settings reads them so);
- the environment variables the `autoresearch work` command reads (`os.environ.get("NAME")` in
  cli/work.py), and the same for the agent-side CLI commands.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.config import HarnessSettings
from server.core.config import ServerSettings

REPO = Path(__file__).resolve().parents[2]
AGENT_CLI_MODULES = ("connection.py",)


def field_names(settings_class: type[ServerSettings] | type[HarnessSettings]) -> set[str]:
    return {name.upper() for name in settings_class.model_fields}


def environ_reads(path: Path) -> set[str]:
    """Names read with os.environ.get("NAME") / os.getenv("NAME") in a Python file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        func = node.func
        reads_environ = (
            isinstance(func, ast.Attribute)
            and func.attr == "get"
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "environ"
        )
        reads_getenv = isinstance(func, ast.Attribute) and func.attr == "getenv"
        if reads_environ or reads_getenv:
            names.add(str(node.args[0].value))
    return names


SERVER = field_names(ServerSettings)
HARNESS = field_names(HarnessSettings)
WORKER = environ_reads(REPO / "cli" / "work.py")
AGENT_CLI = set().union(*(environ_reads(REPO / "cli" / name) for name in AGENT_CLI_MODULES))
