"""The harness id: one hash for everything that defines what a score means.

harness_id = sha256 over the validation rows, the tokenizer, the harness source (every .py under
harness/ except the baseline train.py folder and tests, and the result format it writes,
protocol/result.py) and `scoring_fields(settings)`. Results
are compared only when their harness ids are equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent
EXCLUDED_SOURCE_DIRS = frozenset({"baseline", "tests", "__pycache__"})
# A run's result format (statuses, integrity classes, fields) is the shared vocabulary's, and part
# of what a score means.
RESULT_FORMAT = HARNESS_DIR.parent / "protocol" / "result.py"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths: Iterable[Path], root: Path) -> str:
    """One hash over named files: each file's path relative to `root` and its content hash."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def harness_source_files(harness_dir: Path = HARNESS_DIR) -> list[Path]:
    return [
        path
        for path in harness_dir.rglob("*.py")
        if not EXCLUDED_SOURCE_DIRS.intersection(path.relative_to(harness_dir).parts[:-1])
        and not path.name.startswith("test_")
    ]


def harness_source_sha256(harness_dir: Path = HARNESS_DIR, result_format: Path = RESULT_FORMAT) -> str:
    harness = files_sha256(harness_source_files(harness_dir), harness_dir)
    return hashlib.sha256(f"{harness}\0{file_sha256(result_format)}".encode()).hexdigest()


def module_sha256(*modules: str) -> str:
    """Hash of some harness source files (paths relative to harness/), to version a prepare stage."""
    return files_sha256([HARNESS_DIR / name for name in modules], HARNESS_DIR)


def compute_harness_id(
    val_sha256: str, tokenizer_sha256: str, source_sha256: str, scoring: dict[str, Any]
) -> str:
    payload = json.dumps(
        {"val": val_sha256, "tokenizer": tokenizer_sha256, "source": source_sha256, "scoring": scoring},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()
