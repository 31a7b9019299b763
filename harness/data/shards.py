"""Parquet text shards: streaming reads (record batches, memory-mapped) and atomic writes.

Readers never hold more than one record batch of text, so memory stays flat whatever the corpus
size. Writers produce a shard under a temporary name and rename it when complete, so a crash
never leaves a half-written shard that looks finished.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.data.errors import DataError

TEXT_COLUMN = "text"
SCHEMA = pa.schema([(TEXT_COLUMN, pa.string())])
READ_BATCH_ROWS = 1024
ROW_GROUP_ROWS = 1024


def open_shard(path: Path) -> pq.ParquetFile:
    """Open a parquet shard for streaming; a clear DataError when it is unreadable or has no text."""
    try:
        shard = pq.ParquetFile(path, memory_map=True)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: shard is missing; run `autoresearch prepare` again to restore it") from exc
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path}: not a readable parquet file ({exc}); delete it and run `autoresearch prepare` again"
        ) from exc
    if TEXT_COLUMN not in shard.schema_arrow.names:
        raise DataError(
            f"{path}: no '{TEXT_COLUMN}' column (columns: {', '.join(shard.schema_arrow.names)}); "
            f"shards need a string column named '{TEXT_COLUMN}'"
        )
    if not pa.types.is_string(shard.schema_arrow.field(TEXT_COLUMN).type) and not pa.types.is_large_string(
        shard.schema_arrow.field(TEXT_COLUMN).type
    ):
        raise DataError(
            f"{path}: column '{TEXT_COLUMN}' has type {shard.schema_arrow.field(TEXT_COLUMN).type}, "
            "expected string"
        )
    return shard


def iter_text_batches(path: Path, batch_rows: int = READ_BATCH_ROWS) -> Iterator[list[str]]:
    """The shard's non-empty texts, one record batch at a time (nulls and empty strings skipped)."""
    shard = open_shard(path)
    try:
        for batch in shard.iter_batches(batch_size=batch_rows, columns=[TEXT_COLUMN]):
            texts = [t for t in batch.column(0).to_pylist() if t]
            if texts:
                yield texts
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path}: corrupt parquet data ({exc}); delete it and run `autoresearch prepare` again"
        ) from exc
    finally:
        shard.close()


def iter_texts(paths: Iterable[Path]) -> Iterator[str]:
    """All non-empty texts of the shards, in order."""
    for path in paths:
        for batch in iter_text_batches(path):
            yield from batch


def count_texts(path: Path) -> int:
    """Number of rows in the shard, from its footer (no data read)."""
    return open_shard(path).metadata.num_rows


class ShardWriter:
    """Writes one parquet shard row group by row group, under a temporary name until closed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        self.writer = pq.ParquetWriter(self.tmp, SCHEMA, compression="zstd")
        self.group: list[str] = []
        self.rows = 0
        self.bytes = 0

    def add(self, text: str) -> None:
        self.group.append(text)
        self.bytes += len(text.encode("utf-8"))
        if len(self.group) == ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.group:
            self.writer.write_table(pa.table({TEXT_COLUMN: self.group}, schema=SCHEMA))
            self.rows += len(self.group)
            self.group = []

    def close(self) -> None:
        """Finish the file and give it its final name."""
        self._flush()
        self.writer.close()
        os.replace(self.tmp, self.path)


def write_shard(path: Path, texts: Iterable[str]) -> int:
    """Write `texts` as one parquet shard at `path` (atomically); returns the number of rows."""
    writer = ShardWriter(path)
    for text in texts:
        writer.add(text)
    writer.close()
    return writer.rows


def write_shards(out_dir: Path, texts: Iterable[str], shard_bytes: int, prefix: str = "shard") -> list[Path]:
    """Split a stream of texts into numbered shards of about `shard_bytes` of text each.

    Only one row group of text is held in memory at a time, whatever the shard size.
    """
    paths: list[Path] = []
    writer: ShardWriter | None = None
    for text in texts:
        if writer is None:
            writer = ShardWriter(out_dir / f"{prefix}_{len(paths):05d}.parquet")
        writer.add(text)
        if writer.bytes >= shard_bytes:
            writer.close()
            paths.append(writer.path)
            writer = None
    if writer is not None:
        writer.close()
        paths.append(writer.path)
    return paths
