"""Replicated trust records: join tokens and each member's current node certificate.

Part of the replicated state (:class:`~floydd.cluster.state.machine.ClusterState` holds one
:class:`TrustState` and hands it these commands); pure like the rest of it: no clock (time is
each command's ``ts``), no I/O. Keeping tokens here rather than in a file on the box that ran
``floydd init`` is what lets any voter make a token and any voter redeem one: a token is used
up by committing ``token.use``, so two voters that receive the same token at once cannot both
accept it (the second ``token.use`` applied is refused, on every box alike).

    tokens   id -> {id, secret_sha256, created, expires, made_by, made_on,
                    used, used_by, revoked, revoked_by, sign_in (from cluster level 3)}
    certs    node id -> {serial, not_after, since, previous: {serial, not_after} | None}

From cluster level 3 (the state hands these handlers the lab's ``people``, or the node
tables, only then):

- a token names the people it signs in on the box it admits (``sign_in``; by default its
  maker, the admin who ran ``floydd token create``): once ``token.use`` is applied their login
  name acts as them on the new box (:mod:`floydd.cluster.state.people`), so the same person can use
  both boxes, and nobody else is signed in there until an admin says so;
- revoking a token that was already used cancels the join it made while the box is not a
  member yet (``floydd token revoke``): the box is tombstoned and the certificate the join
  issued revoked, so it can never become a member with it (:mod:`floydd.cluster.state.authz`
  refuses its ``node.upsert``, every box its connections). A box that is a member already is
  removed with ``floydd remove`` instead.

Only a sha256 of a token's secret is replicated (:func:`floydd.security.tokens.secret_digest`,
salted with the token id); the secret itself is printed once and never leaves the operator.

``certs`` names the certificate each member currently presents (hex serial, expiry) and the
one before it (a renewed node's connections opened with the old certificate finish
normally): the membership check on connections can accept exactly these, and ``floydd
members`` shows the expiry. ``token.use`` records the certificate a join issued; a node
reports its renewed certificate itself (``node.cert``) before it starts presenting it.

Tokens that can no longer be used are forgotten a week after they were used, revoked or
expired (on the next ``token.create``), so the records stay small.
"""

from __future__ import annotations

import hmac
from typing import Any, Mapping

from floydd.cluster.state import people as people_
from floydd.errors import Conflict, InvalidSpec, NotFound, Unauthorized

__all__ = ["TrustState", "TOKEN_OPS", "MAX_LIVE_TOKENS", "KEEP_SPENT_S", "token_state", "matching_record"]

TOKEN_OPS = ("token.create", "token.use", "token.revoke", "node.cert")
MAX_LIVE_TOKENS = 1000
"""Tokens that may still be used, at most; a join token is for one box, not a mailing list."""
KEEP_SPENT_S = 7 * 86400.0
"""How long a used, revoked or expired token stays listed."""
MAX_TTL_S = 30 * 86400.0
MAX_SIGN_IN = 64
"""The most people one join token signs in on the box it admits."""


def matching_record(records: Mapping[str, dict], token_id: str, digest: str) -> dict | None:
    """The record of ``token_id`` when ``digest`` is its secret's ``secret_sha256``, else None.
    The digests are compared in constant time, also for an unknown id, so the time a guess
    takes says nothing of which ids exist (join tokens here, personal API tokens too)."""
    record = records.get(token_id)
    stored = record["secret_sha256"] if record else "0" * 64
    return record if hmac.compare_digest(stored.encode(), str(digest).encode()) and record is not None else None


def token_state(record: Mapping[str, Any], now: float) -> str:
    """One of ``revoked``, ``used``, ``expired``, ``valid`` (what ``floydd token list`` shows)."""
    if record.get("revoked") is not None:
        return "revoked"
    if record.get("used") is not None:
        return "used"
    return "expired" if now >= record["expires"] else "valid"


class TrustState:
    def __init__(self) -> None:
        self.tokens: dict[str, dict] = {}
        self.certs: dict[str, dict] = {}

    def snapshot(self) -> dict:
        return {"tokens": self.tokens, "certs": self.certs}

    def restore(self, raw: Mapping[str, Any]) -> None:
        """From a snapshot's fields (a snapshot made before these records existed has none)."""
        self.tokens = dict(raw.get("tokens") or {})
        self.certs = dict(raw.get("certs") or {})

    # -- reads --------------------------------------------------------------------------------

    def list_tokens(self) -> list[dict]:
        """Every token, oldest first, without its digest."""
        return [{k: v for k, v in t.items() if k != "secret_sha256"}
                for t in sorted(self.tokens.values(), key=lambda t: (t["created"], t["id"]))]

    def check_token(self, token_id: str, digest: str, now: float) -> dict:
        """The token's record if it could be redeemed at ``now`` with this digest, else
        Unauthorized saying why (the same checks ``token.use`` makes when it is applied)."""
        record = matching_record(self.tokens, token_id, digest)
        if record is None:
            raise Unauthorized("join token not recognised", code="join_token_invalid",
                               hint="copy the whole token, or make a new one with floydd token create")
        state = token_state(record, now)
        if state == "revoked":
            raise Unauthorized("join token was revoked", code="join_token_revoked",
                               hint="make a new one with floydd token create")
        if state == "used":
            raise Unauthorized("join token already used", code="join_token_used",
                               hint="a join token works once; make a new one with floydd token create")
        if state == "expired":
            raise Unauthorized("join token expired", code="join_token_expired",
                               hint="make a new one with floydd token create")
        return record

    def cert_accepted(self, node_id: str, serial: str) -> bool | None:
        """Whether ``serial`` (hex) is ``node_id``'s current or previous certificate; None when
        nothing is recorded for that node (a cluster made before these records existed)."""
        record = self.certs.get(node_id)
        if record is None:
            return None
        previous = record.get("previous") or {}
        return serial in (record["serial"], previous.get("serial"))

    # -- commands -------------------------------------------------------------------------------

    def token_create(self, cmd: dict, *, people: Mapping[str, Any] | None = None) -> dict:
        """A new join token; with ``people`` (cluster level 3) it records whom it signs in on
        the box it admits: ``sign_in``, or by default its maker (if they have an account)."""
        ts, token_id = cmd["ts"], cmd["id"]
        _check_hex(token_id, 16, "token.create: id")
        _check_hex(cmd["secret_sha256"], 64, "token.create: secret_sha256")
        if not ts < cmd["expires"] <= ts + MAX_TTL_S:
            raise InvalidSpec("token.create: expires must be after ts and at most 30 days later",
                              hint="use a --ttl between 1 second and 30 days")
        if token_id in self.tokens:
            raise Conflict(f"join token {token_id} exists", code="token_exists", hint="make a new token")
        self._forget_spent(ts)
        if sum(token_state(t, ts) == "valid" for t in self.tokens.values()) >= MAX_LIVE_TOKENS:
            raise Conflict(f"{MAX_LIVE_TOKENS} join tokens are still valid", code="too_many_tokens",
                           hint="revoke the ones not needed (floydd token list, floydd token revoke ID)")
        sign_in = _sign_in(cmd, people) if people is not None else None
        record = {"id": token_id, "secret_sha256": cmd["secret_sha256"], "created": ts, "expires": cmd["expires"],
                  "made_by": cmd.get("made_by", ""), "made_on": cmd.get("made_on", ""), "used": None,
                  "used_by": None, "revoked": None, "revoked_by": None}
        if sign_in is not None:
            record["sign_in"] = sign_in
        self.tokens[token_id] = record
        return {k: v for k, v in record.items() if k != "secret_sha256"}

    def token_use(self, cmd: dict, *, members: Mapping[str, Any], removed: Mapping[str, Any],
                  people: dict | None = None) -> dict:
        """Redeem a token for ``node`` and record the certificate the join issued it; with
        ``people`` (level 3), sign in the people the token names on the new box."""
        node = cmd["node"]
        _check_hex(cmd["serial"], 1, "token.use: serial")
        record = self.check_token(cmd["id"], cmd["secret_sha256"], cmd["ts"])
        if node in members or (node in self.certs and node not in removed):
            raise Conflict(f"node id {node} already has a certificate from this cluster", code="node_id_taken",
                           hint="a new box gets a fresh node id; remove the old node first to reuse one")
        for name in record.get("sign_in") or () if people is not None else ():
            try:
                people_.add_box(people, name, node)     # gone since the token was made: nobody to sign in
            except Conflict:
                pass                                   # listed on too many boxes: they stay as they are
        record.update(used=cmd["ts"], used_by=node)
        self.certs[node] = {"serial": cmd["serial"], "not_after": cmd["not_after"], "since": cmd["ts"],
                            "previous": None}
        return {k: v for k, v in record.items() if k != "secret_sha256"}

    def token_revoke(self, cmd: dict, *, members: Mapping[str, Any] | None = None, removed: dict | None = None,
                     revoked: dict | None = None) -> dict:
        """Make a token unusable; NotFound for an unknown id; revoking twice is a no-op.

        A used token: Conflict, unless the node tables are given (cluster level 3) and the box
        it admitted is not a member yet, whose join is then cancelled (:meth:`cancel_join`;
        the answer names it as ``cancelled_join``)."""
        record = self.tokens.get(cmd["id"])
        if record is None:
            raise NotFound(f"no join token {cmd['id'][:20]!r}", code="token_not_found",
                           hint="floydd token list shows the tokens (a spent one is forgotten after a week)")
        node = record["used_by"]
        if record["used"] is not None and (members is None or removed is None or revoked is None or node in members):
            raise Conflict(f"join token {cmd['id']} was already used by node {node}"
                           + (", a member now" if members is not None and node in members else ""),
                           code="join_token_used",
                           hint=f"to shut that node out, remove it: floydd remove {node}")
        if record["revoked"] is None:
            record.update(revoked=cmd["ts"], revoked_by=cmd.get("by", ""))
        answer = {k: v for k, v in record.items() if k != "secret_sha256"}
        if record["used"] is not None:
            self.cancel_join(node, cmd["ts"], removed=removed, revoked=revoked)
            answer["cancelled_join"] = node
        return answer

    def cancel_join(self, node: str, ts: float, *, removed: dict, revoked: dict) -> None:
        """The join of ``node`` (redeemed, the box not a member) will never complete: the node
        is tombstoned and the certificates recorded for it revoked (as ``node.remove`` does)."""
        removed.setdefault(node, ts)
        record = self.certs.get(node) or {}
        for serial in (record.get("serial"), (record.get("previous") or {}).get("serial")):
            if serial:
                revoked.setdefault(serial, {"node": node, "ts": ts})

    def join_cancelled(self, node: str, revoked: Mapping[str, Any]) -> bool:
        """Whether the certificate recorded for ``node`` is revoked: its join was cancelled
        (or it was removed) and no new join recorded another since."""
        record = self.certs.get(node)
        return record is not None and record["serial"] in revoked

    def node_cert(self, cmd: dict, *, members: Mapping[str, Any], removed: Mapping[str, Any]) -> dict:
        """A member's new certificate (renewed, or first reported): the old one stays accepted
        as ``previous`` so connections it opened finish."""
        node = cmd["id"]
        _check_hex(cmd["serial"], 1, "node.cert: serial")
        if node in removed or node not in members:
            raise NotFound(f"node {node} is not a member of the cluster", code="node_not_found",
                           hint="only a member's certificate is recorded; join first")
        old = self.certs.get(node)
        if old is not None and old["serial"] == cmd["serial"]:
            return dict(old)
        previous = {"serial": old["serial"], "not_after": old["not_after"]} if old else None
        self.certs[node] = {"serial": cmd["serial"], "not_after": cmd["not_after"], "since": cmd["ts"],
                            "previous": previous}
        return dict(self.certs[node])

    def _forget_spent(self, now: float) -> None:
        for token_id, t in list(self.tokens.items()):
            ended = t["revoked"] if t["revoked"] is not None else t["used"] if t["used"] is not None else t["expires"]
            if now - ended > KEEP_SPENT_S:
                del self.tokens[token_id]


def _sign_in(cmd: dict, people: Mapping[str, Any]) -> list[str]:
    """Whom a new join token signs in on the box it admits: the names it lists, each with an
    account; by default its maker, if they have one."""
    if "sign_in" not in cmd:
        made_by = cmd.get("made_by") or ""
        return [made_by] if made_by in people else []
    names = cmd["sign_in"]
    if not isinstance(names, (list, tuple)) or len(names) > MAX_SIGN_IN or not all(isinstance(n, str) for n in names):
        raise InvalidSpec(f"token.create: sign_in lists at most {MAX_SIGN_IN} people's names")
    missing = sorted(set(names) - set(people))
    if missing:
        raise NotFound(f"{', '.join(missing[:5])} {'has' if len(missing) == 1 else 'have'} no account in this lab: "
                       "a join token signs in only people of the lab", code="person_not_found",
                       hint="floydd user list shows the lab's people")
    return sorted(set(names))


def _check_hex(value: str, length: int, what: str) -> None:
    ok = value and all(c in "0123456789abcdef" for c in value) and (len(value) == length if length > 1
                                                                    else len(value) <= 40)
    if not ok:
        raise InvalidSpec(f"{what} must be lowercase hex" + (f" ({length} digits)" if length > 1 else ""))
