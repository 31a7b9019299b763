"""Bearer tokens: random, shown once, stored only as a SHA-256 hash.

Tokens carry 256 bits of randomness, so a fast hash is enough: nobody can brute-force the
preimage, and lookups by hash stay one indexed query per request.
"""

from __future__ import annotations

import hashlib
import secrets

from protocol.states import TokenKind

TOKEN_PREFIX = {TokenKind.AGENT: "ara", TokenKind.WORKER: "arw", TokenKind.ADMIN: "arx"}


def new_token(kind: str) -> str:
    return f"{TOKEN_PREFIX[TokenKind(kind)]}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
