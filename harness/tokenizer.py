"""BPE tokenizer: trained with rustbpe, stored as plain JSON, encoded with tiktoken.

The file `tokenizer.json` holds the mergeable ranks (base64 bytes -> rank), the split pattern and
the special tokens; nothing is pickled, so loading it cannot run code. Special tokens take the
ids after the learned vocabulary, so the vocabulary is exactly `vocab_size` ids.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiktoken

from harness.data.errors import DataError

# The GPT-4 (cl100k) split pattern.
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
BOS = "<|bos|>"
# Reserved so that later harness versions can add tokens without changing the id layout.
SPECIAL_TOKENS: tuple[str, ...] = (BOS, "<|reserved_1|>", "<|reserved_2|>", "<|reserved_3|>")
TOKENIZER_FILE = "tokenizer.json"
TOKEN_BYTES_FILE = "token_bytes.npy"
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS) + 1  # all bytes, the specials and at least one merge
MAX_VOCAB_SIZE = 2**32 - 1


@dataclass(frozen=True)
class Tokenizer:
    """A loaded tokenizer: tiktoken for fast (batched, multi-threaded) encoding."""

    encoding: tiktoken.Encoding
    bos_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings inside it are encoded as ordinary text."""
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 4) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(list(texts), num_threads=num_threads)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode(list(ids))

    def token_bytes(self) -> np.ndarray:
        """Byte length of every token id; special tokens count 0 bytes (they are not text)."""
        lengths = np.zeros(self.vocab_size, dtype=np.int32)
        specials = {self.encoding.encode_single_token(name) for name in self.encoding.special_tokens_set}
        for token_id in range(self.vocab_size):
            if token_id not in specials:
                lengths[token_id] = len(self.encoding.decode_single_token_bytes(token_id))
        return lengths


def check_vocab_size(vocab_size: int) -> None:
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise DataError(
            f"VOCAB_SIZE={vocab_size} is out of range: it needs at least {MIN_VOCAB_SIZE} "
            f"(256 byte tokens + {len(SPECIAL_TOKENS)} special tokens + 1 merge); set VOCAB_SIZE "
            f"between {MIN_VOCAB_SIZE} and {MAX_VOCAB_SIZE}"
        )


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, out_dir: Path, check_texts: Sequence[str] = ()
) -> Tokenizer:
    """Learn BPE merges from `texts` with rustbpe and save the tokenizer to `out_dir`.

    The saved file is then loaded into tiktoken and checked on `check_texts`: tiktoken must give
    the same ids as rustbpe, and decoding must give the text back.
    """
    import rustbpe  # only `prepare` trains; the sandboxed training process never imports it

    check_vocab_size(vocab_size)
    learned = vocab_size - len(SPECIAL_TOKENS)
    bpe = rustbpe.Tokenizer()
    bpe.train_from_iterator(iter(texts), learned, pattern=SPLIT_PATTERN)
    ranks = {bytes(token): rank for token, rank in bpe.get_mergeable_ranks()}
    if len(ranks) != learned:
        raise DataError(
            f"the training text only supports {len(ranks)} BPE tokens, fewer than VOCAB_SIZE={vocab_size} "
            f"needs ({learned} + {len(SPECIAL_TOKENS)} special); add more text or lower VOCAB_SIZE"
        )
    save_tokenizer(out_dir, ranks, bpe.get_pattern())
    tokenizer = load_tokenizer(out_dir)
    for text in check_texts:
        ids = tokenizer.encode(text)
        if ids != list(bpe.encode(text)) or tokenizer.decode(ids) != text:
            raise DataError(
                f"{out_dir / TOKENIZER_FILE}: round-trip check failed on a text starting {text[:60]!r}; "
                "delete the tokenizer folder and run prepare again"
            )
    return tokenizer


def save_tokenizer(out_dir: Path, ranks: dict[bytes, int], pattern: str) -> None:
    """Write tokenizer.json (atomically) and the per-token byte-length table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "format": "autoresearch-bpe-v1",
        "pattern": pattern,
        "mergeable_ranks": [[base64.b64encode(token).decode("ascii"), rank] for token, rank in ranks.items()],
        "special_tokens": {name: len(ranks) + i for i, name in enumerate(SPECIAL_TOKENS)},
    }
    path = out_dir / TOKENIZER_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)
    bytes_path = out_dir / TOKEN_BYTES_FILE
    tmp_bytes = out_dir / f".token_bytes.tmp-{os.getpid()}.npy"
    np.save(tmp_bytes, load_tokenizer(out_dir).token_bytes())
    os.replace(tmp_bytes, bytes_path)


def load_tokenizer(tokenizer_dir: Path) -> Tokenizer:
    """Load tokenizer.json into tiktoken. A clear DataError when it is missing or malformed."""
    path = Path(tokenizer_dir) / TOKENIZER_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        ranks = {base64.b64decode(token): int(rank) for token, rank in document["mergeable_ranks"]}
        specials = {str(name): int(i) for name, i in document["special_tokens"].items()}
        encoding = tiktoken.Encoding(
            name=f"autoresearch-{len(ranks) + len(specials)}",
            pat_str=document["pattern"],
            mergeable_ranks=ranks,
            special_tokens=specials,
        )
    except FileNotFoundError as exc:
        raise DataError(f"{path}: no tokenizer; run `autoresearch prepare` first") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: malformed tokenizer file ({exc}); delete it and run prepare again") from exc
    if BOS not in specials:
        raise DataError(f"{path}: no {BOS} special token; delete it and run prepare again")
    return Tokenizer(encoding=encoding, bos_id=specials[BOS], vocab_size=encoding.n_vocab)


def load_token_bytes(tokenizer_dir: Path) -> np.ndarray:
    return np.load(Path(tokenizer_dir) / TOKEN_BYTES_FILE)
