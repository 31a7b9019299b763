"""Hashes of 32-byte windows, for finding copies of a text (or of token ids) in a whole file tree.

Shared by the leak test (tests/runner/test_leaks.py), which hashes every window of the
validation text at every byte offset, and the walker it runs in each sandbox
(candidates/hostile/walks_sandbox.py, which includes this file), which hashes only the windows
that start at multiples of STRIDE_BYTES in each file: one such window lies inside any common
stretch of WINDOW_BYTES + STRIDE_BYTES - 1 = 47 bytes or more, so every such stretch is found, at
a sixteenth of the work. The walker first looks up only the first 8 bytes of each window in a
table of the patterns' first words (`first_buckets`), and hashes the few windows that pass.
Pure numpy on uint64 words.
"""

import numpy as np

WINDOW_BYTES = 32
STRIDE_BYTES = 16
_MIX = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], dtype=np.uint64
)
_FINAL = np.uint64(0xFF51AFD7ED558CCD)
_SHIFT = np.uint64(31)
FIRST_BITS = 20
_FIRST_MIX = np.uint64(0xA0761D6478BD642F)
_FIRST_SHIFT = np.uint64(64 - FIRST_BITS)


def first_buckets(words, out=None):
    """The table bucket of each uint64 word, as the first word of a window."""
    out = np.empty(len(words), dtype=np.uint64) if out is None else out[: len(words)]
    np.multiply(words, _FIRST_MIX, out=out)
    np.right_shift(out, _FIRST_SHIFT, out=out)
    return out.view(np.int64)


def hash_words(words, step=1, out=None, scratch=None):
    """The hash of each window of 4 consecutive uint64 words, for windows starting every `step`
    words: (len(words) - 4) // step + 1 of them."""
    count = (len(words) - 4) // step + 1 if len(words) >= 4 else 0
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    out = np.empty(count, dtype=np.uint64) if out is None else out[:count]
    scratch = np.empty(count, dtype=np.uint64) if scratch is None else scratch[:count]
    end = (count - 1) * step + 1
    np.multiply(words[0:end:step], _MIX[0], out=out)
    for lag in (1, 2, 3):
        np.multiply(words[lag : lag + end : step], _MIX[lag], out=scratch)
        np.add(out, scratch, out=out)
    np.right_shift(out, _SHIFT, out=scratch)
    np.bitwise_xor(out, scratch, out=out)
    np.multiply(out, _FINAL, out=out)
    return out


def matching_windows(words, step, table, hashes, out=None):
    """The windows of uint64 `words`, one every `step` words, whose first word is in `table` (a
    bool array of first_buckets) and whose hash is among the sorted `hashes`: their numbers (in
    windows) and the index of each one's hash. Only the few that pass the table are hashed."""
    count = (len(words) - 4) // step + 1
    if count <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    heads = words[0 : (count - 1) * step + 1 : step]
    maybe = np.flatnonzero(table.take(first_buckets(heads, out)))
    at = maybe * step
    windows = np.stack([words[at], words[at + 1], words[at + 2], words[at + 3]], axis=1)
    found = hash_words(windows.reshape(-1), 4)
    index = np.minimum(np.searchsorted(hashes, found), len(hashes) - 1)
    exact = hashes[index] == found
    return maybe[exact], index[exact]


def window_words(data):
    """uint64 words of `data` at each of its 8 byte offsets: every window lies in one of them."""
    for offset in range(8):
        count = (len(data) - offset) // 8
        if count >= 4:
            yield np.frombuffer(data, dtype=np.uint64, count=count, offset=offset)


def window_hashes(data):
    """The hashes of every WINDOW_BYTES window of `data`, at every byte offset."""
    parts = [hash_words(words) for words in window_words(data)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def window_first_buckets(data):
    """The first-word buckets of the same windows."""
    parts = [first_buckets(words[:-3]) for words in window_words(data)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
