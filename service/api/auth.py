"""Bearer tokens: made here, stored only as a SHA-256 hash, one tenant each.

A token is ``jobq_`` followed by 32 random bytes in URL-safe base64 (43
characters). The store keeps its SHA-256 (hex), never the token: a leaked
database does not leak credentials. A 256-bit random token needs no slow,
salted hash — nobody can guess it — and a plain hash lets the lookup be one
indexed equality. Missing, malformed, unknown and revoked tokens all get the
same 401, so a caller cannot tell which.
"""

from __future__ import annotations

import hashlib
import secrets

from service.errors import Unauthorized

TOKEN_PREFIX = "jobq_"
TOKEN_BYTES = 32
MAX_TOKEN_CHARS = 200  # longer is never ours: refused without a database lookup

UNAUTHORIZED_MESSAGE = (
    "a valid API token is required: send 'Authorization: Bearer <token>' "
    "(create one with `jobq token create --tenant NAME`)"
)


def new_token() -> str:
    """A fresh token: shown once to whoever creates it, never stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """What the store keeps and looks up: the token's SHA-256, in hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def unauthorized() -> Unauthorized:
    """The one 401 error, the same whatever was wrong with the token."""
    return Unauthorized(UNAUTHORIZED_MESSAGE)


def plausible(token: str) -> bool:
    """Cheap checks before a lookup; anything failing them is unauthorised."""
    return 0 < len(token) <= MAX_TOKEN_CHARS and token.isascii() and token.isprintable()
