"""The `local` source: any folder of parquet (with a `text` column), jsonl or txt files.

Files are taken in name order and rewritten as text shards. The validation split is one pinned
file: LOCAL_VAL_FILE, or by default the last file by name. In jsonl files every line is a JSON
object with a string `text`; a txt file is one document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from harness.data.errors import DataError
from harness.data.shards import iter_texts, write_shard, write_shards

SUFFIXES = (".parquet", ".jsonl", ".txt")
TRAIN_SHARD_BYTES = 64_000_000


def local_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DataError(
            f"LOCAL_DATA_DIR={folder} is not a folder; point it at a folder of {'/'.join(SUFFIXES)} files"
        )
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise DataError(f"LOCAL_DATA_DIR={folder} holds no {', '.join(SUFFIXES)} files")
    return files


def file_texts(path: Path) -> Iterator[str]:
    """The non-empty documents of one local file, streamed."""
    if path.suffix == ".parquet":
        yield from iter_texts([path])
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    text = record["text"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise DataError(
                        f"{path}:{number}: each line must be a JSON object with a string 'text' ({exc})"
                    ) from exc
                if not isinstance(text, str):
                    raise DataError(f"{path}:{number}: 'text' must be a string, not {type(text).__name__}")
                if text:
                    yield text
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 ({exc}); convert it or remove it from the folder") from exc
        if text.strip():
            yield text


def counted(path: Path, texts: Iterator[str]) -> Iterator[str]:
    """Pass `texts` through; a DataError if the file gave none (an empty text column, say)."""
    any_text = False
    for text in texts:
        any_text = True
        yield text
    if not any_text:
        raise DataError(f"{path}: no non-empty text; fill its text or remove the file from the folder")


def fetch_local(folder: Path | None, raw_dir: Path, val_file: str | None, corpus_max_bytes: int) -> None:
    """Rewrite the folder as raw/train shards and the pinned raw/val/shard_val.parquet."""
    if folder is None:
        raise DataError("DATA_SOURCE=local needs LOCAL_DATA_DIR, the folder of parquet/jsonl/txt files")
    files = local_files(folder)
    if val_file is None:
        val_path = files[-1]
    else:
        val_path = folder / val_file
        if val_path not in files:
            raise DataError(
                f"LOCAL_VAL_FILE={val_file} is not one of the {len(files)} data files in {folder}; "
                "give a path relative to LOCAL_DATA_DIR"
            )
    train_files = [p for p in files if p != val_path]
    if not train_files:
        raise DataError(
            f"{folder} holds only {val_path.name}, which is the validation file; "
            "add at least one more file for training"
        )

    def train_texts() -> Iterator[str]:
        total = 0
        for path in train_files:
            for text in counted(path, file_texts(path)):
                if corpus_max_bytes and total >= corpus_max_bytes:
                    return
                total += len(text.encode("utf-8"))
                yield text

    write_shards(raw_dir / "train", train_texts(), TRAIN_SHARD_BYTES)
    write_shard(raw_dir / "val" / "shard_val.parquet", counted(val_path, file_texts(val_path)))
