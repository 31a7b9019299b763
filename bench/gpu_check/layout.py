"""Where the GPU kit's parts are, and the environment that points the harness at its data.

Standard library only: the check's driver imports this on the GPU machine before the carried
wheels are installed.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "var" / "gpu-kit"
WHEELS = KIT / "wheels"
DEBS = KIT / "debs"
CORPUS = KIT / "corpus"
DATA = KIT / "data"
MANIFEST = KIT / "kit.json"

PRESET = "gpu-check"
# The corpus is a `local` source named relative to the repository root, the working directory of
# every process that may call `prepare` (kit build, worker), so the name is the same on any machine.
CORPUS_RELATIVE = CORPUS.relative_to(REPO)
LOCAL_VAL_FILE = "val/pool.parquet"
# Every corpus file gets this modification time here and on the GPU machine: the local source's
# `prepare` stage hashes the files' names, sizes and times, and a copy does not keep the times.
CORPUS_MTIME_NS = 1_700_000_000 * 10**9


def kit_env() -> dict[str, str]:
    """The environment that makes `load_settings()` the gpu-check preset on the kit's data."""
    return {
        "PRESET": PRESET,
        "DATA_SOURCE": "local",
        "LOCAL_DATA_DIR": str(CORPUS_RELATIVE),
        "LOCAL_VAL_FILE": LOCAL_VAL_FILE,
        "DATA_DIR": str(DATA),
    }


def pin_corpus_mtimes() -> int:
    """Give every corpus file the kit's fixed modification time (see CORPUS_MTIME_NS); how many."""
    files = [path for path in CORPUS.rglob("*") if path.is_file()]
    for path in files:
        os.utime(path, ns=(CORPUS_MTIME_NS, CORPUS_MTIME_NS))
    return len(files)
