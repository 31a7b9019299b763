"""The built-in corpus: the standard library's source, split and held out deterministically."""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import harness
from harness.data.builtin import (
    EXCLUDED_DIRS,
    VALIDATION_MODULES,
    corpus_documents,
    is_validation,
    split_source,
    stdlib_files,
    stdlib_root,
    validation_paths,
)


def test_corpus_is_the_portable_part_of_the_standard_library() -> None:
    root = stdlib_root()
    assert root == Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    relative = [f.relative_to(root) for f in files]
    assert Path("json/decoder.py") in relative and Path("os.py") in relative
    assert not [p for p in relative if EXCLUDED_DIRS.intersection(p.parts[:-1])]
    assert not [p for p in relative if p.name.startswith("_sysconfigdata")]
    train, val = corpus_documents(root)
    size = sum(len(doc.encode()) for doc in train + val)
    assert size > 9_500_000  # about 10 MB of text
    assert sum(len(doc.encode()) for doc in val) > 300_000  # room for the cpu preset's 32,768 tokens
    val_files = {doc.splitlines()[0].removeprefix("# ") for doc in val}
    assert not val_files & {doc.splitlines()[0].removeprefix("# ") for doc in train}  # whole files
    held_out = {path.relative_to(root) for path in validation_paths(root)}
    assert {Path(file).parts[0] for file in val_files} == {path.parts[0] for path in held_out}
    assert all(is_validation(file) for file in val_files)


# Any statement that imports a held-out module by name, or names one to importlib.
IMPORTS = re.compile(
    rb"^[ \t]*(?:from[ \t]+(?:NAMES)\b|import[ \t]+(?:[\w.]+[ \t]*,[ \t]*)*(?:NAMES)\b)"
    rb"|(?:import_module|__import__)\(\s*['\"](?:NAMES)['\"]".replace(
        b"NAMES", b"|".join(name.encode() for name in VALIDATION_MODULES)
    ),
    re.MULTILINE,
)


# Installed for the server alone, which never runs in a sandbox: prometheus_client serves metrics
# with wsgiref. A train.py that imports it fails, which costs nobody anything; the harness must not.
SERVER_ONLY = ("prometheus_client",)


def test_nothing_a_sandbox_runs_imports_a_held_out_module() -> None:
    """Every sandbox hides the validation modules (harness.runner.sandbox). That breaks nothing only
    if no installed package (torch, NumPy, ... everything in the virtualenv but SERVER_ONLY), no
    part of the harness or the baseline, and no other standard module outside the tests imports
    one, even lazily."""
    root = stdlib_root()
    folders = [Path(sys.prefix) / "lib", Path(harness.__file__).parent, root]
    held_out = [str(path) for path in validation_paths(root)]
    held_out += [
        str(path)
        for name in SERVER_ONLY
        for path in (Path(sys.prefix) / "lib").glob(f"*/site-packages/{name}")
    ]
    harness_sources = b"".join(path.read_bytes() for path in Path(harness.__file__).parent.rglob("*.py"))
    assert not any(name.encode() in harness_sources for name in SERVER_ONLY)
    importers = []
    for folder in folders:
        for parent, subfolders, names in os.walk(folder):
            subfolders[:] = [name for name in subfolders if name not in ("test", "tests", "idle_test")]
            for name in names:
                path = os.path.join(parent, name)
                if not name.endswith(".py") or any(path.startswith(held) for held in held_out):
                    continue
                with open(path, "rb") as handle:
                    if IMPORTS.search(handle.read()):
                        importers.append(path)
    assert importers == []
    assert IMPORTS.search(b"import os, mailbox\n") and IMPORTS.search(b"  from wsgiref.util import x")
    assert not IMPORTS.search(b"import mailboxes\n# import smtpd")


def test_corpus_is_deterministic() -> None:
    assert corpus_documents(stdlib_root()) == corpus_documents(stdlib_root())


LINES = ["def f():\n", "    return 1\n", "\n", "x = 2\n", "    def g(self):\n"]


@given(st.lists(st.sampled_from(LINES), max_size=400))
def test_splitting_keeps_every_line_in_order(lines: list[str]) -> None:
    text = "".join(lines)
    docs = split_source("pkg/mod.py", text, target_chars=40)
    assert all(doc.startswith("# pkg/mod.py\n") for doc in docs)
    rejoined = "".join(doc.removeprefix("# pkg/mod.py\n") for doc in docs)
    assert rejoined.strip() == text.strip() or not text.strip()
