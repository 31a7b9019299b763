"""The worker runs a claimed train.py only if it is exactly what the server hashed."""

from __future__ import annotations

import hashlib

from worker.main import hash_mismatch


def claim_of(train_py: str, hashed: str) -> dict[str, str]:
    return {"train_py": train_py, "train_py_sha256": hashlib.sha256(hashed.encode()).hexdigest()}


def test_the_text_the_server_hashed_passes() -> None:
    source = "LEARNING_RATE = 0.01\n# é and other non-ASCII text hash as UTF-8\n"
    assert hash_mismatch(claim_of(source, source)) is None


def test_a_changed_text_is_refused_naming_both_hashes() -> None:
    sent, hashed = "LEARNING_RATE = 0.02\n", "LEARNING_RATE = 0.01\n"
    reason = hash_mismatch(claim_of(sent, hashed))
    assert reason is not None
    assert hashlib.sha256(sent.encode()).hexdigest() in reason
    assert hashlib.sha256(hashed.encode()).hexdigest() in reason
