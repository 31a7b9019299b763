"""Which text is scored: a sample of the held-out pool, drawn with the installation's secret.

Every source holds its validation text apart from its training text, in a pool (the default
corpus: 60 % of the addresses; `local`: LOCAL_VAL_FILE; `climbmix`: its last CLIMBMIX_POOL_SHARDS
shards, never trained on). The evaluation rows are a sample of it that no candidate can know:

- every document of the pool is cut into pieces that fit a row (a BOS and at most seq_len of its
  tokens), so that all of the pool's text can be scored, not only each document's beginning;
- the pieces are taken in the order of HMAC-SHA256(secret, piece number) and packed best-fit into
  rows (harness.data.packing) until the evaluation is full;
- the secret is the installation's (DATA_SECRET, or a random one `prepare` writes once into
  DATA_DIR/validation.secret, readable by its owner only), kept outside every sandbox like the
  rest of the data folder, and never printed.

The corpus, the code and the tokenizer may all be public: without the secret a candidate cannot
tell which of the pool's pieces are scored, and the pool is at least VAL_POOL_MIN_BYTES, a hundred
times what a train.py may carry (docs/harness.md has the arithmetic of what carrying text can
still gain). Each row position also records the pool document its target comes from
(`target_docs`), for the scorer's per-document floor (harness.runner.scoring.scorer).

`pinned` (VALIDATION_SAMPLE=pinned) takes the pool's documents whole in their order instead, as
autoresearch evaluates its pinned shard: its figures can be compared with autoresearch's, and it is
open to any train.py that carries its text.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

import numpy as np

from harness.data.errors import DataError
from harness.data.packing import ReadInto, best_fit_batches
from harness.data.tokens import TokenFile

SECRET_FILE = "validation.secret"


def installation_secret(data_dir: Path, given: str | None) -> bytes:
    """The secret: `given` (DATA_SECRET), else the one in DATA_DIR/validation.secret, made now with
    32 random bytes if there is none (the first of several preparing workers writes it)."""
    if given:
        return given.encode()
    path = Path(data_dir) / SECRET_FILE
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    value = path.read_text().strip()
    if not value:
        raise DataError(f"{path} is empty; delete it (a new secret is made) or set DATA_SECRET")
    return value.encode()


def secret_digest(secret: bytes) -> str:
    """What names a secret in the prepare stages' records, without saying it."""
    return hashlib.sha256(b"autoresearch validation secret\0" + secret).hexdigest()


def pieces(offsets: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each document's tokens after its BOS (offsets[i] + 1 to offsets[i + 1]) cut into pieces of
    at most `width`: (first token, length, document) of every piece, in document order."""
    starts, ends = offsets[:-1] + 1, offsets[1:]
    lengths = ends - starts
    counts = np.maximum(0, -(-lengths // width))  # empty documents give none
    document = np.repeat(np.arange(len(lengths)), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    first = starts[document] + within * width
    return first, np.minimum(width, ends[document] - first), document


def keyed_order(secret: bytes, count: int) -> np.ndarray:
    """0..count-1 in the order of HMAC-SHA256(secret, number)."""
    keys = np.fromiter(
        (
            int.from_bytes(hmac.new(secret, number.to_bytes(8, "big"), hashlib.sha256).digest()[:8], "big")
            for number in range(count)
        ),
        dtype=np.uint64,
        count=count,
    )
    return np.argsort(keys, kind="stable")


def sample_rows(
    pool: TokenFile, seq_len: int, num_rows: int, secret: bytes | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The evaluation rows [num_rows, seq_len + 1] packed from `pool` with `secret` (None: pinned,
    the documents whole in their order), and the pool document of every row token; None when the
    pool cannot fill them."""
    dtype, row_len = pool.tokens.dtype, seq_len + 1
    if secret is None:
        spans = list(zip(pool.offsets[:-1].tolist(), np.diff(pool.offsets).tolist(), strict=True))
        document_of = {start: number for number, (start, _) in enumerate(spans)}
        read_tokens: ReadInto = pool.read_into
    else:
        first, length, document = pieces(pool.offsets, seq_len)
        order = keyed_order(secret, len(first))
        spans = list(zip(first[order].tolist(), (length[order] + 1).tolist(), strict=True))
        document_of = dict(zip(first.tolist(), document.tolist(), strict=True))

        def read_tokens(out: np.ndarray, start: int) -> None:  # a BOS, then the piece
            out[0] = pool.bos_id
            pool.read_into(out[1:], start)

    def read_documents(out: np.ndarray, start: int) -> None:
        out[:] = document_of[start]

    # The same spans in the same order pack the same way: once for the tokens, once for whose they are.
    rows = next(best_fit_batches(read_tokens, dtype, iter(spans), row_len, num_rows), None)
    docs = next(best_fit_batches(read_documents, np.dtype(np.int64), iter(spans), row_len, num_rows), None)
    if rows is None or docs is None or len(rows) < num_rows:
        return None
    return rows, docs
