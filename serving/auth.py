"""Bearer tokens and their scopes: which databases/tables a token reaches, and whether it may write.

A token file (or the ``FLUSS_LAKE_SERVE_TOKENS`` environment variable) holds JSON::

    {"tokens": [
        {"name": "scorer", "token": "...", "access": "read", "tables": ["shop.*", "audit.served"]},
        {"name": "ingest", "sha256": "<hex of the token>", "access": "read-write", "tables": ["shop.payments"]}
    ]}

``tables`` entries are ``db.table``, ``db.*`` or ``*``; ``access`` is ``read`` or ``read-write``. A token may be
given as its SHA-256 (``sha256``) so the file holds no secret. Tokens are compared in constant time.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fluss_lake.exceptions import InvalidConfigError
from serving.errors import PermissionDeniedError

__all__ = ["TOKENS_ENV", "TOKENS_FILE_ENV", "Access", "Token", "TokenSet"]

TOKENS_ENV = "FLUSS_LAKE_SERVE_TOKENS"
TOKENS_FILE_ENV = "FLUSS_LAKE_SERVE_TOKENS_FILE"
Access = Literal["read", "read-write"]


@dataclass(frozen=True, slots=True)
class Token:
    """One client's token: its name (for logs), the SHA-256 of its secret, its tables and its access."""

    name: str
    sha256: str
    tables: tuple[str, ...]
    access: Access = "read"

    def covers(self, table: str) -> bool:
        """Whether `table` (``db.table``) is one of this token's tables."""
        return any(fnmatch.fnmatchcase(table, pattern) for pattern in self.tables)

    def check(self, table: str, *, write: bool) -> None:
        """Raise :class:`PermissionDeniedError` unless this token may read (or write) `table`."""
        if not self.covers(table):
            raise PermissionDeniedError(
                f"token {self.name!r} does not cover table {table!r} (it covers {list(self.tables)}); use a token "
                "for that table"
            )
        if write and self.access != "read-write":
            raise PermissionDeniedError(
                f"token {self.name!r} may only read {table!r}; writes need a token with access 'read-write'"
            )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TokenSet:
    """The tokens a server accepts.

    Examples
    --------
    >>> tokens = TokenSet.from_json({"tokens": [{"name": "s", "token": "abcdefgh", "tables": ["shop.*"]}]})
    >>> tokens.find("abcdefgh").name, tokens.find("nope")
    ('s', None)
    """

    tokens: tuple[Token, ...]

    def find(self, secret: str) -> Token | None:
        """The token whose secret is `secret` (compared in constant time), or None."""
        digest = _digest(secret)
        found = None
        for token in self.tokens:
            if hmac.compare_digest(token.sha256, digest):
                found = token
        return found

    @classmethod
    def from_json(cls, data: Any, *, what: str = "tokens") -> TokenSet:
        """Tokens from parsed JSON (see the module docstring for the shape)."""
        entries = data.get("tokens") if isinstance(data, Mapping) else None
        if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
            raise InvalidConfigError(f'{what}: expected {{"tokens": [{{"name": ..., "token": ..., "tables": [...]}}]}}')
        tokens = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise InvalidConfigError(f"{what}: token #{i} is not an object")
            name = str(entry.get("name") or f"token-{i}")
            secret, digest = entry.get("token"), entry.get("sha256")
            if (secret is None) == (digest is None):
                raise InvalidConfigError(f"{what}: token {name!r} needs exactly one of 'token' or 'sha256'")
            if secret is not None and (not isinstance(secret, str) or len(secret) < 8):
                raise InvalidConfigError(f"{what}: token {name!r} must be a string of at least 8 characters")
            tables = entry.get("tables")
            if not isinstance(tables, Sequence) or isinstance(tables, str) or not tables:
                raise InvalidConfigError(f"{what}: token {name!r} needs 'tables': a list such as ['shop.*']")
            access = entry.get("access", "read")
            if access not in ("read", "read-write"):
                raise InvalidConfigError(f"{what}: token {name!r} has access {access!r}; use 'read' or 'read-write'")
            sha = _digest(secret) if secret is not None else str(digest).lower()
            tokens.append(Token(name, sha, tuple(str(t) for t in tables), access))
        return cls(tuple(tokens))

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> TokenSet | None:
        """Tokens from `path`, else from ``$FLUSS_LAKE_SERVE_TOKENS_FILE`` or ``$FLUSS_LAKE_SERVE_TOKENS`` (JSON);
        None if none is configured."""
        path = path or os.environ.get(TOKENS_FILE_ENV)
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise InvalidConfigError(f"cannot read the token file {str(path)!r}: {exc}") from None
            what = f"token file {str(path)!r}"
        elif os.environ.get(TOKENS_ENV):
            text, what = os.environ[TOKENS_ENV], f"${TOKENS_ENV}"
        else:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidConfigError(f"{what} is not valid JSON ({exc.msg} at character {exc.pos})") from None
        return cls.from_json(data, what=what)
