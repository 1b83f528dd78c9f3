"""API tokens: made here, stored only as a SHA-256 hash, one tenant each.

A token is ``jobq_`` followed by 32 random bytes in URL-safe base64 (43
characters). The store keeps its SHA-256 (hex), never the token: a leaked
database does not leak credentials. A 256-bit random token needs no slow,
salted hash (nobody can guess it), and a plain hash lets the lookup be one
indexed equality.

The one home of these rules: the CLI creates tokens with them, the API and the
console check what callers send with them.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "jobq_"
TOKEN_BYTES = 32
MAX_TOKEN_CHARS = 200  # longer is never ours: refused without a database lookup


def new_token() -> str:
    """A fresh token: shown once to whoever creates it, never stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """What the store keeps and looks up: the token's SHA-256, in hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def plausible(token: str) -> bool:
    """Cheap checks before a lookup; a token failing them is unknown without asking the store."""
    return 0 < len(token) <= MAX_TOKEN_CHARS and token.isascii() and token.isprintable()
