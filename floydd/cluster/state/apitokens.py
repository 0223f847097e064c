"""Replicated personal API tokens: what a person's laptop sends to a box's TLS API.

Part of the replicated state (:class:`~floydd.cluster.state.machine.ClusterState` holds one
:class:`ApiTokens` and hands it these commands), in the shape of
:mod:`floydd.cluster.state.credentials`'s join tokens: pure, no clock (time is each command's ``ts``),
no I/O. Because the records are replicated, any box checks a token with a local lookup
(:meth:`ApiTokens.person_for`), and a ``apitoken.revoke`` applied on a box refuses the
token there at once: nothing is cached.

    tokens   id -> {id, person, secret_sha256, created, expires (None: never), label,
                    made_on, revoked, revoked_by, public_key (from cluster level 3)}

A token's text is ``FLP1.<16 hex id>.<32 hex secret>``; only a salted sha256 of the secret is
replicated (:func:`floydd.security.tokens.secret_digest`), compared in constant time. The
secret is printed once by ``floyd token create`` and kept by its person (``floyd login``).

From cluster level 3 a token also records ``public_key``: the public half of the Ed25519 key
its secret derives (:mod:`floydd.security.token_keys`). A box that acts for the token's
person because the token was presented to it signs the command with the private half, and
every box checks the signature on apply (:mod:`floydd.cluster.state.signin`). A token made before
has no key: it still opens the TLS API, but backs no change on a box where its person is
not signed in otherwise.

Removing a person revokes their tokens (from level 3: :meth:`ApiTokens.revoke_person`), so
adding the person again does not bring old tokens back.

Who may say what (:mod:`floydd.cluster.state.authz`): a person makes and revokes their own tokens,
an admin anyone's. Revoked and expired tokens are forgotten a week later (on the next
``apitoken.create``), so the records stay small.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping

from floydd.cluster.state.credentials import matching_record
from floydd.errors import Conflict, InvalidSpec, NotFound, Unauthorized

__all__ = ["ApiTokens", "APITOKEN_OPS", "NewApiToken", "new_api_token", "parse_api_token", "api_token_state",
           "MAX_TOKENS_PER_PERSON", "PREFIX", "REMOVED_WITH_PERSON"]

APITOKEN_OPS = ("apitoken.create", "apitoken.revoke")
PREFIX = "FLP1"
MAX_TOKENS_PER_PERSON = 100
"""Live tokens one person may hold (a laptop each, a few scripts)."""
KEEP_SPENT_S = 7 * 86400.0
MAX_LABEL = 200
_TEXT_RE = re.compile(r"FLP1\.(?P<id>[0-9a-f]{16})\.(?P<secret>[0-9a-f]{32})")
_HEX = re.compile(r"[0-9a-f]+")
REMOVED_WITH_PERSON = "(person removed)"
"""``revoked_by`` of the tokens revoked because their person was removed, when nobody is named."""


@dataclass(frozen=True)
class NewApiToken:
    text: str = field(repr=False)
    token_id: str
    secret_sha256: str
    public_key: str = ""
    """The public half of the key its secret derives (recorded from cluster level 3)."""


def new_api_token() -> NewApiToken:
    """A fresh token: its text (shown once) and what the cluster keeps of it."""
    from floydd.security.token_keys import public_key_hex, signing_key
    from floydd.security.tokens import secret_digest
    token_id, secret = secrets.token_hex(8), secrets.token_hex(16)
    return NewApiToken(f"{PREFIX}.{token_id}.{secret}", token_id, secret_digest(token_id, secret),
                       public_key_hex(signing_key(token_id, secret)))


def parse_api_token(text: str) -> tuple[str, str]:
    """``(id, secret)`` of a token's text; Unauthorized (never the text itself) if malformed."""
    match = _TEXT_RE.fullmatch(str(text).strip())
    if match is None:
        raise Unauthorized("the API token is malformed", code="api_token_invalid",
                           hint="a personal token looks like FLP1.<16 hex>.<32 hex>; make one with floyd token create")
    return match["id"], match["secret"]


def api_token_state(record: Mapping[str, Any], now: float) -> str:
    """One of ``revoked``, ``expired``, ``valid`` (what ``floyd token list`` shows)."""
    if record.get("revoked") is not None:
        return "revoked"
    expires = record.get("expires")
    return "expired" if expires is not None and now >= expires else "valid"


def _public(record: Mapping[str, Any]) -> dict:
    return {k: v for k, v in record.items() if k != "secret_sha256"}


class ApiTokens:
    def __init__(self) -> None:
        self.tokens: dict[str, dict] = {}

    def snapshot(self) -> dict:
        return {"apitokens": self.tokens}

    def restore(self, raw: Mapping[str, Any]) -> None:
        """From a snapshot's fields (one made before personal tokens existed has none)."""
        self.tokens = dict(raw.get("apitokens") or {})

    # -- reads --------------------------------------------------------------------------------

    def list(self, person: str | None = None) -> list[dict]:
        """Tokens (of ``person``, or everyone's), oldest first, without their digests."""
        return [_public(t) for t in sorted(self.tokens.values(), key=lambda t: (t["created"], t["id"]))
                if person is None or t["person"] == person]

    def person_for(self, token_id: str, digest: str, now: float) -> str:
        """The person a token speaks for, if valid at ``now``; else Unauthorized saying why.
        The digest is compared in constant time, also for an unknown id."""
        record = matching_record(self.tokens, token_id, digest)
        if record is None:
            raise Unauthorized("API token not recognised", code="api_token_invalid",
                               hint="log in again with a new token: floyd token create on a box, then floyd login")
        state = api_token_state(record, now)
        if state != "valid":
            raise Unauthorized(f"API token {token_id} was {state}", code=f"api_token_{state}",
                               hint="make a new one with floyd token create on a box, then floyd login again")
        return record["person"]

    # -- commands -------------------------------------------------------------------------------

    def create(self, cmd: dict) -> dict:
        ts, token_id, person = cmd["ts"], cmd["id"], cmd["person"]
        _check_hex(token_id, 16, "apitoken.create: id")
        _check_hex(cmd["secret_sha256"], 64, "apitoken.create: secret_sha256")
        if not person:
            raise InvalidSpec("apitoken.create: person is required", hint="a token speaks for one person")
        expires = cmd.get("expires")
        if expires is not None and expires <= ts:
            raise InvalidSpec("apitoken.create: expires must be after ts", hint="give a positive --ttl")
        if len(cmd.get("label") or "") > MAX_LABEL:
            raise InvalidSpec(f"apitoken.create: label is longer than {MAX_LABEL} characters")
        if "public_key" in cmd:
            _check_hex(cmd["public_key"], 64, "apitoken.create: public_key")
        if token_id in self.tokens:
            raise Conflict(f"API token {token_id} exists", code="token_exists", hint="make a new token")
        self._forget_spent(ts)
        live = sum(t["person"] == person and api_token_state(t, ts) == "valid" for t in self.tokens.values())
        if live >= MAX_TOKENS_PER_PERSON:
            raise Conflict(f"{person} already has {live} valid API tokens", code="too_many_tokens",
                           hint="revoke the ones not needed (floyd token list, floyd token revoke ID)")
        record = {"id": token_id, "person": person, "secret_sha256": cmd["secret_sha256"], "created": ts,
                  "expires": expires, "label": cmd.get("label") or "", "made_on": cmd.get("proposer") or "",
                  "revoked": None, "revoked_by": None}
        if "public_key" in cmd:
            record["public_key"] = cmd["public_key"]
        self.tokens[token_id] = record
        return _public(record)

    def revoke(self, cmd: dict) -> dict:
        """Refuse a token from now on, on every box; NotFound for an unknown id; twice: a no-op."""
        record = self.tokens.get(cmd["id"])
        if record is None:
            raise NotFound(f"no API token {cmd['id'][:20]!r}", code="token_not_found",
                           hint="floyd token list shows your tokens")
        if record["revoked"] is None:
            record.update(revoked=cmd["ts"], revoked_by=cmd.get("user") or "")
        return _public(record)

    def revoke_person(self, person: str, ts: float, by: str) -> list[str]:
        """Revoke every token of ``person`` not revoked yet (they were removed); the ids."""
        gone = sorted(t["id"] for t in self.tokens.values() if t["person"] == person and t["revoked"] is None)
        for token_id in gone:
            self.tokens[token_id].update(revoked=ts, revoked_by=by or REMOVED_WITH_PERSON)
        return gone

    def revoke_orphans(self, people: Mapping[str, Any], ts: float) -> list[str]:
        """Revoke the tokens of anyone who has no account (removed before removal revoked
        tokens: cluster level 3 switching on), so adding them again does not revive those."""
        gone = []
        for person in sorted({t["person"] for t in self.tokens.values()} - set(people)):
            gone += self.revoke_person(person, ts, REMOVED_WITH_PERSON)
        return gone

    def owner(self, token_id: str) -> str | None:
        record = self.tokens.get(token_id)
        return record["person"] if record else None

    def _forget_spent(self, now: float) -> None:
        for token_id, t in list(self.tokens.items()):
            ended = t["revoked"] if t["revoked"] is not None else t["expires"]
            if ended is not None and now - ended > KEEP_SPENT_S and api_token_state(t, now) != "valid":
                del self.tokens[token_id]


def _check_hex(value: Any, length: int, what: str) -> None:
    if not isinstance(value, str) or len(value) != length or not _HEX.fullmatch(value):
        raise InvalidSpec(f"{what} must be {length} lowercase hex digits")
