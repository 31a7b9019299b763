"""The three data sources behind one interface: fill raw/train and raw/val with text shards."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.config import DataSource, HarnessSettings
from harness.data.climbmix import fetch_climbmix
from harness.data.errors import DataError
from harness.data.local import fetch_local
from harness.data.speeches import fetch_speeches
from harness.data.tokens import replace_dir


def fetch_raw(settings: HarnessSettings, raw_dir: Path, progress: bool) -> None:
    """Write the source's text shards under `raw_dir`.

    climbmix keeps shards already downloaded (so an interrupted download resumes); the other
    sources are cheap to rebuild, so they are built in a fresh folder that replaces `raw_dir`
    only when complete: no stale shard survives, and a failure leaves the old shards as they were.
    """
    if settings.data_source == DataSource.CLIMBMIX:
        fetch_climbmix(settings, raw_dir, progress)
        return
    building = raw_dir.with_name(f".{raw_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        if settings.data_source == DataSource.SPEECHES:
            fetch_speeches(building, Path(settings.data_dir) / "downloads", settings.corpus_max_bytes)
        elif settings.data_source == DataSource.LOCAL:
            fetch_local(settings.local_data_dir, building, settings.local_val_file, settings.corpus_max_bytes)
        else:
            raise DataError(f"DATA_SOURCE={settings.data_source!r}: use speeches, local or climbmix")
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    replace_dir(building, raw_dir)


def train_shards(raw_dir: Path) -> list[Path]:
    return sorted((raw_dir / "train").glob("*.parquet"))


def val_shards(raw_dir: Path) -> list[Path]:
    return sorted((raw_dir / "val").glob("*.parquet"))
