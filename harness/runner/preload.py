"""Libraries loaded in a score sandbox before its clock starts: a fixed list, the harness's own.

On a CPU the score phase's startup allowance is small (harness.runner.scoring.score_budget), and torch's
compiler costs more to import than all else an honest model does before its first answer: a
compiler setting at import loads torch._dynamo (1.2 CPU s here), a helper decorated with
torch.compile loads torch._inductor too (1.5 CPU s more). The train entry imports torch._dynamo
before `go` for every candidate (every torch.optim optimizer imports it), so a score process that
had to pay for it would be charged for what training got free.

The list is the harness's (`HARNESS_LIBRARIES`): nothing a candidate names is ever imported untimed.
What the candidate decides is only which of those entries its score processes load: the train
sandbox reports the modules importing train.py and build_model loaded, those train.py's own import
statements named, and those its code reaches as attributes (`recording`, `reached`, `reported`,
sent in `libraries` messages: the train entry has loaded torch's compiler before `go`, so loading
alone would miss `import torch._dynamo` or `torch._dynamo.config`), and the scorer keeps the
entries of the list whose package the report touches (`chosen`). A false report costs the scorer
at most the list's imports and gains the candidate nothing beyond them; everything else train.py
imports in a score process (torch.distributed's tensors, say) is the candidate's work and timed.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import importlib.util
import re
import sys
import sysconfig
from collections.abc import Collection, Iterator, Mapping
from types import ModuleType
from typing import Any

MAX_NAMES = 20_000
MAX_NAME_CHARS = 200
MESSAGE_CHARS = 12_000  # of names in one `libraries` message: under messages.MAX_LINE_BYTES
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# The libraries a score process may load before its clock, each with the package whose use in
# training asks for it: torch's compiler (its settings, torch._dynamo) and its code generator (a
# torch.compile decoration loads torch._inductor; importing compile_fx loads what it does).
HARNESS_LIBRARIES = {"torch._dynamo": "torch._dynamo", "torch._inductor.compile_fx": "torch._inductor"}


def library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(paths[key].rstrip("/") + "/" for key in ("stdlib", "platstdlib", "purelib", "platlib"))


def in_library(origin: str | None, folders: tuple[str, ...]) -> bool:
    return origin is not None and (origin in ("built-in", "frozen") or origin.startswith(folders))


@contextlib.contextmanager
def recording(module: str) -> Iterator[set[str]]:
    """The absolute module names that import statements of `module` (train.py's: not the libraries'
    own, which ask for torch's compiler once it is loaded whether or not a fresh process would)
    ask for while inside, with each `from X import Y`'s X.Y, loaded already or not (train side)."""
    asked: set[str] = set()
    original = builtins.__import__

    def recorded(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        imported = original(name, globals, locals, fromlist, level)
        if level == 0 and isinstance(globals, dict) and globals.get("__name__") == module:
            asked.add(name)
            asked.update(f"{name}.{item}" for item in fromlist or () if isinstance(item, str))
        return imported

    builtins.__import__ = recorded
    try:
        yield asked
    finally:
        if builtins.__import__ is recorded:  # unless the candidate put in an import hook of its own
            builtins.__import__ = original


def reached(source: str | bytes, namespace: Mapping[str, Any]) -> set[str]:
    """The dotted names train.py's code (its functions' too) reaches as attribute chains from a
    module it holds in `namespace`, `torch._dynamo.config.x` giving `torch._dynamo`,
    `torch._dynamo.config` and `torch._dynamo.config.x` (train side; `reported` keeps the modules)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        root = namespace.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(root, ModuleType) and chain:
            dotted = root.__name__
            for attr in reversed(chain):
                dotted = f"{dotted}.{attr}"
                names.add(dotted)
    return names


def reported(before: Collection[str], asked: Collection[str]) -> list[str]:
    """The library modules in sys.modules that were loaded since `before` or `asked` for, sorted
    (train side)."""
    folders = library_folders()
    return valid_names(
        sorted(
            name
            for name, module in list(sys.modules.items())
            if (name not in before or name in asked)
            and in_library(getattr(module, "__file__", None) or "built-in", folders)
        )
    )


def messages(names: list[str]) -> Iterator[list[str]]:
    """`names` in parts small enough for one message line each (a name's quotes and comma
    included)."""
    part: list[str] = []
    size = 0
    for name in names:
        if part and size + len(name) + 4 > MESSAGE_CHARS:
            yield part
            part, size = [], 0
        part.append(name)
        size += len(name) + 4
    if part:
        yield part


def valid_names(value: object) -> list[str]:
    """The well-formed module names in an untrusted `libraries` message (harness side)."""
    if not isinstance(value, list):
        return []
    return [
        name
        for name in value
        if isinstance(name, str) and len(name) <= MAX_NAME_CHARS and NAME.fullmatch(name) is not None
    ]


def chosen(report: Collection[str]) -> list[str]:
    """The entries of HARNESS_LIBRARIES whose package an (untrusted) report names (harness side)."""
    return [
        library
        for library, package in HARNESS_LIBRARIES.items()
        if any(name == package or name.startswith(package + ".") for name in report)
    ]


def load(names: list[str]) -> int:
    """Import each of `names` that is on HARNESS_LIBRARIES (model side, before any candidate code
    runs); the number imported."""
    imported = 0
    for name in names:
        if name in HARNESS_LIBRARIES:
            importlib.import_module(name)
            imported += 1
    return imported
