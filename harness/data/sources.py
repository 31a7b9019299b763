"""The three data sources behind one interface: fill raw/train and raw/val with text shards."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.config import HarnessSettings
from harness.data.builtin import fetch_builtin
from harness.data.climbmix import fetch_climbmix
from harness.data.errors import DataError
from harness.data.local import fetch_local


def fetch_raw(settings: HarnessSettings, raw_dir: Path, progress: bool) -> None:
    """Write the source's text shards under `raw_dir`.

    climbmix keeps shards already downloaded (so an interrupted download resumes); the other
    sources are cheap to rebuild and start from an empty folder, so no stale shard survives.
    """
    if settings.data_source == "climbmix":
        fetch_climbmix(settings, raw_dir, progress)
        return
    shutil.rmtree(raw_dir, ignore_errors=True)
    if settings.data_source == "builtin":
        fetch_builtin(raw_dir, settings.corpus_max_bytes)
    elif settings.data_source == "local":
        fetch_local(settings.local_data_dir, raw_dir, settings.local_val_file, settings.corpus_max_bytes)
    else:
        raise DataError(f"DATA_SOURCE={settings.data_source!r} is unknown; use builtin, local or climbmix")


def train_shards(raw_dir: Path) -> list[Path]:
    return sorted((raw_dir / "train").glob("*.parquet"))


def val_shards(raw_dir: Path) -> list[Path]:
    return sorted((raw_dir / "val").glob("*.parquet"))
