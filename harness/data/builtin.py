"""The built-in offline corpus: the Python standard library's own source files.

Every machine that runs the harness has them, so the demo and the test suite need no network.
The corpus is deterministic for a given Python version: the same files (sorted by path, with the
parts that distributions package separately or generate at build time left out), split into
documents the same way, shuffled with a fixed seed, and the same modules held out for validation.

Every sandbox sees this standard library (its interpreter runs on it), so the validation text
must be hidden there (harness.runner.sandbox): it is a fixed set of modules that nothing a
sandbox runs imports, neither torch, NumPy, the harness nor train.py's usual imports, so hiding
them breaks nothing (tests/harness/test_builtin.py checks every installed package's imports).
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from harness.data.errors import DataError
from harness.data.shards import write_shard, write_shards

# Left out because Linux distributions ship them in separate packages (tests, IDLE, Tk, 2to3,
# distutils, ensurepip) or because they are generated per machine (_sysconfigdata, config-*).
EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "lib2to3",
        "distutils",
        "ensurepip",
        "lib-dynload",
        "__pycache__",
    }
)
EXCLUDED_PREFIXES = ("_sysconfigdata", "config-")
# The validation shard: modules (top-level .py files or packages) that no installed package, the
# harness, the baseline or another standard module outside the tests imports: mostly the
# "dead batteries" of PEP 594, deprecated since 3.11 (docs/harness.md says how much text they hold);
# versions that removed some of them (3.12, 3.13) hold out the ones they still have.
VALIDATION_MODULES = (
    "aifc",
    "asynchat",
    "asyncore",
    "cgitb",
    "chunk",
    "crypt",
    "imaplib",
    "imghdr",
    "mailbox",
    "mailcap",
    "nntplib",
    "pipes",
    "poplib",
    "smtpd",
    "sndhdr",
    "sunau",
    "telnetlib",
    "uu",
    "wsgiref",
    "xdrlib",
)
# Documents are runs of whole top-level blocks (or methods) of about this many characters.
DOC_TARGET_CHARS = 600
SHUFFLE_SEED = 0
TRAIN_SHARD_BYTES = 4_000_000


def stdlib_root() -> Path:
    """Where this interpreter's standard library source lives."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[Path]:
    """The corpus files, sorted by path relative to `root`."""
    files = [
        path
        for path in root.rglob("*.py")
        if not EXCLUDED_DIRS.intersection(path.relative_to(root).parts[:-1])
        and not any(part.startswith(EXCLUDED_PREFIXES) for part in path.relative_to(root).parts)
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_validation(relpath: str) -> bool:
    """Whether a file (path relative to the standard library) belongs to the validation shard."""
    return relpath.split("/")[0].removesuffix(".py") in VALIDATION_MODULES


def validation_paths(root: Path) -> list[Path]:
    """The held-out modules present under the standard library `root`: files and package folders."""
    found = []
    for name in VALIDATION_MODULES:
        for path in (root / f"{name}.py", root / name):
            if path.exists():
                found.append(path)
    return found


def split_source(relpath: str, text: str, target_chars: int = DOC_TARGET_CHARS) -> list[str]:
    """Split a source file into documents at block boundaries, each headed by the file's path.

    A new document starts once the current one reaches `target_chars`, at the next line after a
    blank line that begins a top-level statement or a method, so documents are readable code.
    Code without such boundaries (big literal tables) is split at any line past 4x the target.
    """
    docs: list[str] = []
    current: list[str] = []
    size = 0
    previous_blank = False
    for line in text.splitlines(keepends=True):
        starts_block = previous_blank and (
            (line[:1].strip() != "") or line.startswith(("    def ", "    async def ", "    @"))
        )
        if (size >= target_chars and starts_block) or size >= 4 * target_chars:
            docs.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
        previous_blank = line.strip() == ""
    if current:
        docs.append("".join(current))
    header = f"# {relpath}\n"
    return [header + doc for doc in docs if doc.strip()]


def corpus_documents(root: Path) -> tuple[list[str], list[str]]:
    """(train documents, validation documents); the train ones in a fixed shuffled order."""
    train: list[str] = []
    val: list[str] = []
    for path in stdlib_files(root):
        relpath = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        (val if is_validation(relpath) else train).extend(split_source(relpath, text))
    random.Random(SHUFFLE_SEED).shuffle(train)
    return train, val


def max_validation_tokens(root: Path) -> int:
    """An upper bound on the validation shard's tokens, without tokenizing: every token covers at
    least one byte, plus one BOS per document. Lets `prepare` refuse at once an evaluation that
    the corpus cannot fill (e.g. the h100 preset's 20 M tokens)."""
    total = 0
    for path in stdlib_files(root):
        relpath = path.relative_to(root).as_posix()
        if is_validation(relpath):
            text = path.read_text(encoding="utf-8", errors="replace")
            total += sum(len(doc.encode("utf-8")) + 1 for doc in split_source(relpath, text))
    return total


def _capped(docs: list[str], max_bytes: int) -> Iterator[str]:
    total = 0
    for doc in docs:
        if max_bytes and total >= max_bytes:
            return
        total += len(doc.encode("utf-8"))
        yield doc


def fetch_builtin(raw_dir: Path, corpus_max_bytes: int) -> None:
    """Write the corpus as parquet: raw/train/shard_*.parquet and the pinned raw/val/shard_val.parquet."""
    root = stdlib_root()
    train, val = corpus_documents(root)
    if not train or not val:
        raise DataError(
            f"the Python standard library at {root} has too little source for the built-in corpus "
            f"({len(train)} train and {len(val)} validation documents); use DATA_SOURCE=local instead"
        )
    write_shards(raw_dir / "train", _capped(train, corpus_max_bytes), TRAIN_SHARD_BYTES)
    write_shard(raw_dir / "val" / "shard_val.parquet", val)
