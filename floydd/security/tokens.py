"""One-time join tokens that pin the cluster CA (in the manner of k3s's ``K10<ca-hash>::...``).

A token printed by ``floydd token create`` reads::

    FLD1.<CA fingerprint: 64 hex>.<token id: 16 hex>.<secret: 32 hex>[@<host:port>]

The fingerprint lets the joining box check it reached the right cluster before it sends
anything; the id names the token (in ``floydd token list``, ``revoke``, logs); the secret
(128 random bits) proves the holder was given the token. Only a sha256 of each secret
(:func:`secret_digest`, salted with the id) is ever kept.

Where tokens live: in the cluster's replicated state (:mod:`floydd.cluster.state.credentials`), so any
voter can make one and any voter can redeem one, exactly once (``token.use`` goes through
raft). :func:`new_token` makes the printable token and the record to replicate.

:class:`TokenStore` is the owner-only SQLite file (``STATE/ca/tokens.db``) that held tokens
before they were replicated. It is kept to import from: on its first start with replicated
tokens the CA holder copies every token of that file that could still be used into the
cluster (same id, digest and expiry, so printed tokens keep working) and renames the file
``tokens.db.imported`` (:mod:`floydd.daemon.joining`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from floydd.errors import FloyddError, InvalidSpec, NotFound, Unauthorized
from floydd.security._x509 import FINGERPRINT_RE

__all__ = ["TokenStore", "TokenInfo", "ParsedToken", "NewToken", "parse_token", "new_token", "secret_digest",
           "DEFAULT_TTL_S", "MAX_TTL_S", "TOKEN_SHAPE"]

log = logging.getLogger("floydd.security")

DEFAULT_TTL_S = 24 * 3600.0
MAX_TTL_S = 30 * 24 * 3600.0
PREFIX = "FLD1"
TOKEN_SHAPE = "FLD1.<64 hex CA fingerprint>.<16 hex token id>.<32 hex secret>, optionally followed by @HOST:PORT"

_TOKEN_RE = re.compile(r"FLD1\.(?P<fp>[0-9a-f]{64})\.(?P<id>[0-9a-f]{16})\.(?P<secret>[0-9a-f]{32})"
                       r"(?:@(?P<addr>[A-Za-z0-9.\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}))?")
_ID_RE = re.compile(r"[0-9a-f]{16}")
_SCHEMA = """CREATE TABLE IF NOT EXISTS join_tokens (
    id TEXT PRIMARY KEY, secret_sha256 TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL,
    used_at REAL, used_by TEXT, revoked_at REAL)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedToken:
    """A join token taken apart; the secret never shows in its repr."""
    ca_fingerprint: str
    token_id: str
    secret: str = field(repr=False)
    address: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenInfo:
    """What ``floydd token list`` shows of a token (never its secret)."""
    token_id: str
    created_at: float
    expires_at: float
    used_at: float | None = None
    used_by: str | None = None
    revoked_at: float | None = None

    def state(self, now: float) -> str:
        """One of ``revoked``, ``used``, ``expired``, ``valid``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.used_at is not None:
            return "used"
        return "expired" if now >= self.expires_at else "valid"


@dataclass(frozen=True, slots=True, kw_only=True)
class NewToken:
    """A token just made: ``text`` is shown once; the rest is what the cluster keeps."""
    text: str = field(repr=False)
    token_id: str
    secret_sha256: str
    expires_at: float


def secret_digest(token_id: str, secret: str) -> str:
    """What is kept of a token's secret: sha256 over a label, the id and the secret."""
    return _digest(str(token_id), str(secret))


def new_token(ca_fingerprint: str, ttl_s: float, now: float, *, address: str | None = None) -> NewToken:
    """A fresh token for the CA ``ca_fingerprint`` valid ``ttl_s`` seconds from ``now``."""
    if not FINGERPRINT_RE.fullmatch(ca_fingerprint):
        raise InvalidSpec("the CA fingerprint must be 64 lowercase hex digits", hint="pass ClusterCA.fingerprint")
    if not 0 < ttl_s <= MAX_TTL_S:
        raise InvalidSpec(f"token lifetime {ttl_s:g}s is out of range",
                          hint=f"use a --ttl between 1 second and {MAX_TTL_S / 86400:g} days")
    token_id, secret = secrets.token_hex(8), secrets.token_hex(16)
    text = f"{PREFIX}.{ca_fingerprint}.{token_id}.{secret}" + (f"@{address}" if address else "")
    parse_token(text)  # the address hint must keep the token parseable
    return NewToken(text=text, token_id=token_id, secret_sha256=_digest(token_id, secret), expires_at=now + ttl_s)


def parse_token(text: str) -> ParsedToken:
    """Take a printed join token apart; InvalidSpec naming the expected shape if it is malformed."""
    cleaned = "".join(str(text).split())  # tolerate line breaks picked up when copying
    match = _TOKEN_RE.fullmatch(cleaned)
    if match is None:
        why = "it does not start with FLD1." if not cleaned.startswith(PREFIX + ".") else "a part is missing or garbled"
        raise InvalidSpec(f"the join token is malformed: {why}",
                          hint=f"a join token looks like {TOKEN_SHAPE}; copy it whole from 'floydd token create'")
    return ParsedToken(ca_fingerprint=match["fp"], token_id=match["id"], secret=match["secret"],
                       address=match["addr"])


class TokenStore:
    """Join tokens of this cluster, kept in an owner-only SQLite file at ``path``."""

    def __init__(self, path: Path, *, ca_fingerprint: str, clock: Callable[[], float] = time.time) -> None:
        if not FINGERPRINT_RE.fullmatch(ca_fingerprint):
            raise InvalidSpec("the CA fingerprint must be 64 lowercase hex digits", hint="pass ClusterCA.fingerprint")
        self.path = Path(path)
        self.ca_fingerprint = ca_fingerprint
        self._clock = clock
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
        if mode & 0o077:
            raise FloyddError(f"the token store {self.path} is readable by others (mode {mode:o})",
                              hint=f"chmod 600 {self.path}", code="insecure_permissions")
        with self._db() as db:
            db.execute(_SCHEMA)

    def create(self, ttl_s: float = DEFAULT_TTL_S, *, address: str | None = None) -> str:
        """Make a token valid for ``ttl_s`` seconds; returns the printable token (shown once)."""
        if not 0 < ttl_s <= MAX_TTL_S:
            raise InvalidSpec(f"token lifetime {ttl_s:g}s is out of range",
                              hint=f"use a --ttl between 1 second and {MAX_TTL_S / 86400:g} days")
        token_id, secret = secrets.token_hex(8), secrets.token_hex(16)
        text = f"{PREFIX}.{self.ca_fingerprint}.{token_id}.{secret}" + (f"@{address}" if address else "")
        parse_token(text)  # the address hint must keep the token parseable
        now = self._clock()
        with self._db() as db:
            db.execute("INSERT INTO join_tokens (id, secret_sha256, created_at, expires_at) VALUES (?, ?, ?, ?)",
                       (token_id, _digest(token_id, secret), now, now + ttl_s))
        log.info("created join token %s, valid for %gs", token_id, ttl_s)
        return text

    def check(self, token_id: str, secret: str) -> None:
        """Unauthorized unless :meth:`redeem` would accept the token now; uses nothing up."""
        self.redeem(token_id, secret, use=False)

    def redeem(self, token_id: str, secret: str, *, node_id: str | None = None, use: bool = True) -> None:
        """Use a token up: Unauthorized unless it exists, matches, is unused, unrevoked and unexpired."""
        token_id, secret = str(token_id), str(secret)
        now = self._clock()
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT secret_sha256, expires_at, used_at, revoked_at FROM join_tokens WHERE id = ?",
                             (token_id,)).fetchone() if _ID_RE.fullmatch(token_id) else None
            stored = row[0] if row else "0" * 64
            if not hmac.compare_digest(stored, _digest(token_id, secret)) or row is None:
                log.warning("refused a join with an unknown or wrong token")
                raise Unauthorized("join token not recognised", code="join_token_invalid",
                                   hint="copy the whole token, or make a new one with floydd token create")
            _, expires_at, used_at, revoked_at = row
            if revoked_at is not None:
                raise Unauthorized("join token was revoked", code="join_token_revoked",
                                   hint="make a new one with floydd token create")
            if used_at is not None:
                log.warning("refused a second use of join token %s", token_id)
                raise Unauthorized("join token already used", code="join_token_used",
                                   hint="a join token works once; make a new one with floydd token create")
            if now >= expires_at:
                raise Unauthorized("join token expired", code="join_token_expired",
                                   hint="make a new one with floydd token create")
            if not use:
                return
            db.execute("UPDATE join_tokens SET used_at = ?, used_by = ? WHERE id = ?", (now, node_id, token_id))
        log.info("join token %s redeemed%s", token_id, f" by node {node_id}" if node_id else "")

    def list(self) -> list[TokenInfo]:
        """Every token, oldest first."""
        with self._db() as db:
            rows = db.execute("SELECT id, created_at, expires_at, used_at, used_by, revoked_at FROM join_tokens "
                              "ORDER BY created_at, id").fetchall()
        return [TokenInfo(token_id=r[0], created_at=r[1], expires_at=r[2], used_at=r[3], used_by=r[4],
                          revoked_at=r[5]) for r in rows]

    def revoke(self, token_id: str) -> None:
        """Make a token unusable; NotFound if there is no such token."""
        with self._db() as db:
            cur = db.execute("UPDATE join_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                             (self._clock(), str(token_id)))
        if cur.rowcount == 0:
            raise NotFound(f"no join token {str(token_id)[:20]!r}", hint="see floydd token list")
        log.info("revoked join token %s", token_id)

    def usable(self) -> list[tuple[TokenInfo, str]]:
        """Tokens that could still be redeemed, with their secret's digest (to import them)."""
        now = self._clock()
        with self._db() as db:
            rows = db.execute("SELECT id, created_at, expires_at, secret_sha256 FROM join_tokens WHERE used_at IS NULL "
                              "AND revoked_at IS NULL AND expires_at > ? ORDER BY created_at, id", (now,)).fetchall()
        return [(TokenInfo(token_id=r[0], created_at=r[1], expires_at=r[2]), r[3]) for r in rows]

    def prune(self) -> int:
        """Forget tokens that can no longer be used; returns how many."""
        with self._db() as db:
            cur = db.execute("DELETE FROM join_tokens WHERE used_at IS NOT NULL OR revoked_at IS NOT NULL "
                             "OR expires_at <= ?", (self._clock(),))
        return cur.rowcount

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r})"

    def _db(self) -> _Connection:
        return _Connection(self.path)


class _Connection:
    """A short-lived connection (one per call, so any thread may use the store); commits on success."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, timeout=10.0)

    def __enter__(self) -> sqlite3.Connection:
        return self._db

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._db.close()


def _digest(token_id: str, secret: str) -> str:
    return hashlib.sha256(f"floydd join token\0{token_id}\0{secret}".encode()).hexdigest()
