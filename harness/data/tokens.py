"""Token files: the training corpus tokenized once, read by every run without re-tokenizing.

`tokens.bin` is every document's tokens back to back, each document starting with BOS, as raw
uint16 (uint32 when the vocabulary does not fit). `docs.npy` holds int64 offsets: document i is
tokens[offsets[i]:offsets[i+1]]. `meta.json` records the dtype and BOS id. The folder is built
under a temporary name and renamed when complete, and it is opened read-only (a read-only mount
works). Only trusted code reads it: the sandboxed training process gets batches from the
harness's feeder (harness.runner.feeder), never the files.

Readers get both a read-only memory map of the tokens and `read_into`, which copies one
document straight into its row with a single pread. The loader uses the latter: it visits
documents in random order, and reading just the bytes it needs keeps the process's memory flat
(the page cache holds the file) and avoids the readahead that page faults on a map bring.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.data.errors import DataError
from harness.data.packing import ReadInto

TOKENS_FILE = "tokens.bin"
DOCS_FILE = "docs.npy"
META_FILE = "meta.json"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


@dataclass(frozen=True)
class TokenFile:
    """An opened token folder: `tokens` is a read-only memory map, `offsets` has n_docs + 1 entries,
    `read_into` copies tokens from the file (see the module docstring)."""

    tokens: np.ndarray
    offsets: np.ndarray
    bos_id: int
    read_into: ReadInto

    @property
    def num_docs(self) -> int:
        return len(self.offsets) - 1


def write_token_dir(
    out_dir: Path, docs: Iterable[list[list[int]]], bos_id: int, vocab_size: int, extra_meta: dict
) -> dict:
    """Stream batches of tokenized documents into `out_dir`; returns the meta written.

    Offsets are spilled to a temporary raw file while streaming, so memory does not grow with the
    number of documents; they become `docs.npy` at the end.
    """
    dtype = token_dtype(vocab_size)
    tmp_dir = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    offsets_raw = tmp_dir / "offsets.raw"
    total = 0
    num_docs = 0
    with open(tmp_dir / TOKENS_FILE, "wb") as tokens_out, open(offsets_raw, "wb") as offsets_out:
        offsets_out.write(np.zeros(1, dtype=np.int64).tobytes())
        for batch in docs:
            lengths = np.fromiter((len(ids) + 1 for ids in batch), dtype=np.int64, count=len(batch))
            flat = np.empty(int(lengths.sum()), dtype=dtype)
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            flat[starts] = bos_id
            for start, ids in zip(starts.tolist(), batch, strict=True):
                flat[start + 1 : start + 1 + len(ids)] = ids
            tokens_out.write(flat.tobytes())
            offsets_out.write((total + np.cumsum(lengths)).tobytes())
            total += int(lengths.sum())
            num_docs += len(batch)
    if num_docs == 0:
        shutil.rmtree(tmp_dir)
        raise DataError("no training documents: the training shards hold no non-empty text")
    offsets = np.lib.format.open_memmap(tmp_dir / DOCS_FILE, mode="w+", dtype=np.int64, shape=(num_docs + 1,))
    chunk = 1 << 20
    with open(offsets_raw, "rb") as handle:
        for start in range(0, num_docs + 1, chunk):
            part = np.fromfile(handle, dtype=np.int64, count=chunk)
            offsets[start : start + len(part)] = part
    offsets.flush()
    del offsets
    offsets_raw.unlink()
    meta = {"dtype": dtype.name, "bos_id": bos_id, "num_tokens": total, "num_docs": num_docs, **extra_meta}
    (tmp_dir / META_FILE).write_text(json.dumps(meta, indent=1))
    replace_dir(tmp_dir, out_dir)
    return meta


def replace_dir(new: Path, target: Path) -> None:
    """Put the finished folder `new` at `target`, replacing an old one."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(new, target)
        shutil.rmtree(old)
    else:
        os.replace(new, target)


def read_meta(train_dir: Path) -> dict:
    path = Path(train_dir) / META_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DataError(f"{path}: missing; training tokens not prepared, run `autoresearch prepare`") from exc
    except ValueError as exc:
        raise DataError(f"{path}: corrupt ({exc}); run `autoresearch prepare` again") from exc


def open_token_dir(train_dir: Path) -> TokenFile:
    """Memory-map a token folder read-only and check that its files agree with each other."""
    train_dir = Path(train_dir)
    meta = read_meta(train_dir)
    dtype = np.dtype(meta["dtype"])
    tokens_path = train_dir / TOKENS_FILE
    try:
        offsets = np.load(train_dir / DOCS_FILE, mmap_mode="r")
        size = tokens_path.stat().st_size
    except (OSError, ValueError) as exc:
        raise DataError(f"{train_dir}: token files unreadable ({exc}); run `autoresearch prepare`") from exc
    expected = int(offsets[-1]) * dtype.itemsize if len(offsets) else -1
    if len(offsets) < 2 or size != expected or size == 0:
        raise DataError(
            f"{tokens_path}: {size} bytes, but {train_dir / DOCS_FILE} describes {expected}; "
            "the token files are incomplete or corrupt, run `autoresearch prepare` again"
        )
    with open(tokens_path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    tokens = np.frombuffer(mapped, dtype=dtype)
    return TokenFile(
        tokens=tokens,
        offsets=np.asarray(offsets),
        bos_id=int(meta["bos_id"]),
        read_into=file_reader(tokens_path, dtype),
    )


def file_reader(path: Path, dtype: np.dtype) -> ReadInto:
    """Copy tokens from the file at `path` with one pread per call (the file stays open)."""
    handle = open(path, "rb", buffering=0)  # noqa: SIM115  (closed when the reader is dropped)
    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
    itemsize = dtype.itemsize

    def read_into(out: np.ndarray, start: int) -> None:
        if os.preadv(handle.fileno(), [out.data], start * itemsize) != out.nbytes:
            raise DataError(f"{path}: ends before token {start + len(out)}; run `autoresearch prepare`")

    return read_into
