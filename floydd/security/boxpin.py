"""Which box a laptop's login is pinned to, and whether a server may be sent a token (pure).

``floyd login HOST`` pins two things, as SSH pins a host key: the cluster CA (checked in the
TLS handshake, :func:`floydd.security.pinning.pinned_context`) and the node id that the
certificate of the box at that address names (:class:`Pin`). The CA alone is not enough: it
signed every box the lab ever had, removed ones included, so anyone holding a removed box's
key could answer at the address and be sent the person's token. Every later connection,
after the handshake and before a byte of the request (its ``Authorization`` header
included) is written, asks :func:`admit`: the certificate must name the pinned node and its
serial must not be revoked. A renewed certificate of the same node (a new serial) passes;
another box of the lab, a removed one, or the pinned box's own revoked certificate does not,
and the refusal says which and what to do (:class:`~floydd.errors.Unauthorized`, code
:data:`WRONG_BOX` or :data:`REVOKED`).

The laptop also keeps what the lab told it (:class:`Trust`): the current members (node id ->
name), the serials of the certificates the lab revoked (a removed box's, with its node id),
and every box name it has heard of, so that a refusal can name a removed box. It learns them
from the box it is pinned to (``GET /v1/ca`` asked for JSON) at login, and again whenever an
answer's :data:`TRUST_HEADER` (:func:`digest_of` the box's current lists) differs from the one
it holds: a removal reaches the laptop with its next command after the box applied it.
Revocations learnt are never forgotten (a box that answers an older list cannot undo one).

A login saved by a floyd older than this pinned only the CA (``node_id`` None): its first
connection pins the box that answers then (:func:`admit` returns the adopted pin), which the
CLI says once. That is the same trust ``floyd login`` itself gives the box it first meets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from floydd.errors import Unauthorized
from floydd.security._x509 import NODE_ID_RE, node_id_of_cert

__all__ = ["Trust", "Pin", "Presented", "presented", "admit", "digest_of", "TRUST_HEADER", "WRONG_BOX",
           "REVOKED"]

TRUST_HEADER = "Floydd-Trust"
"""Sent with every authenticated answer of the TLS API: :func:`digest_of` the box's members and
revoked serials, so that a laptop knows when to ask for them again."""
WRONG_BOX = "wrong_box"
"""The code of the refusal of a server whose certificate names another node than the pinned one."""
REVOKED = "certificate_revoked"
"""The code of the refusal of a certificate whose serial the lab revoked."""

_MAX_ENTRIES = 4096
_SERIAL_CHARS = frozenset("0123456789abcdef")


def digest_of(members: Mapping[str, str], revoked: Mapping[str, str]) -> str:
    """A short digest of a box's view of the lab (members: node id -> name; revoked: serial ->
    node id); what :data:`TRUST_HEADER` carries. The same lists give the same digest everywhere."""
    text = json.dumps({"members": sorted(members.items()), "revoked": sorted(revoked.items())},
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trust:
    """What a laptop knows of the lab (module docstring); saved with the login."""

    digest: str = ""
    members: Mapping[str, str] = field(default_factory=dict)
    """Current members as the box last said: node id -> name."""
    revoked: Mapping[str, str] = field(default_factory=dict)
    """Revoked certificate serials (lowercase hex) -> the node id they were issued to."""
    names: Mapping[str, str] = field(default_factory=dict)
    """Every node id heard of -> its last known name (members and boxes since removed)."""

    def name(self, node_id: str | None) -> str:
        """How a refusal names a box: its name, else ``node <id>``."""
        if not node_id:
            return "no box"
        return self.members.get(node_id) or self.names.get(node_id) or f"node {node_id}"

    def removed(self, node_id: str) -> bool:
        """Whether the lab removed ``node_id`` (a certificate of it was revoked, or it was a member
        and is no more) and it has not come back."""
        if node_id in self.members:
            return False
        return node_id in self.revoked.values() or (bool(self.members) and node_id in self.names)

    def merged(self, newer: Trust) -> Trust:
        """``newer``'s members and digest; revocations and names of both (none forgotten)."""
        names = {**self.names, **self.members, **newer.names, **newer.members}
        return Trust(digest=newer.digest, members=dict(newer.members), revoked={**self.revoked, **newer.revoked},
                     names=dict(list(names.items())[-_MAX_ENTRIES:]))

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "members": dict(self.members), "revoked": dict(self.revoked),
                "names": dict(self.names)}

    @classmethod
    def from_json(cls, raw: Any) -> Trust:
        """From a saved login (:meth:`to_json`) or a box's ``/v1/ca`` answer (``members`` and
        ``revoked`` as lists of objects); ValueError when it is not that shape."""
        if not isinstance(raw, Mapping):
            raise ValueError("not an object")
        members = _pairs(raw.get("members"), "id", "name", key_check=_node_id)
        revoked = _pairs(raw.get("revoked"), "serial", "node", key_check=_serial)
        names = _pairs(raw.get("names"), "id", "name", key_check=_node_id)
        digest = raw.get("digest", raw.get("trust", ""))
        if not isinstance(digest, str) or len(digest) > 128:
            raise ValueError("digest is not a short string")
        return cls(digest=digest, members=members, revoked=revoked, names={**names, **members})


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """The box a login is pinned to: the address logged in to, the node id its certificate
    named then (None: a login of an older floyd, pinned on first use), what the lab said."""

    address: str
    node_id: str | None
    trust: Trust = field(default_factory=Trust)

    @property
    def box(self) -> str:
        return self.trust.name(self.node_id)

    def learned(self, trust: Trust) -> Pin:
        return replace(self, trust=self.trust.merged(trust))


@dataclass(frozen=True, slots=True, kw_only=True)
class Presented:
    """What a server's (CA-verified) certificate says: the node it names and its serial."""

    node_id: str | None
    serial: str


def presented(der: bytes) -> Presented:
    """The node id and serial (lowercase hex, as revocations name it) of a DER certificate."""
    from cryptography import x509      # here, not at the top: the daemon's API imports this module (issue 23)
    cert = x509.load_der_x509_certificate(der)
    return Presented(node_id=node_id_of_cert(cert), serial=f"{cert.serial_number:x}")


def admit(pin: Pin, cert: Presented) -> Pin:
    """The pin to keep if a token may be sent to the server that presented ``cert`` at
    ``pin.address`` (``pin`` itself, or with a login of an older floyd, ``pin`` with the node
    adopted); Unauthorized saying who answered and what to do otherwise."""
    where, trust = pin.address, pin.trust
    wanted = pin.box if pin.node_id else "a box of your lab"
    if cert.node_id is None:
        raise Unauthorized(f"the server at {where} is not {wanted} (its certificate, from your lab's CA, names no "
                           "box); no token was sent", code=WRONG_BOX,
                           hint="tell the lab's admin: someone may be answering in the box's place")
    if cert.node_id != pin.node_id and pin.node_id is not None:
        other = trust.name(cert.node_id)
        if cert.serial in trust.revoked or trust.removed(cert.node_id):
            what = f"{other}'s certificate, removed from the lab"
        elif cert.node_id in trust.members:
            what = f"{other}'s certificate, another box of the lab"
        else:
            what = f"the certificate of {other}, a box this laptop has not heard of"
        raise Unauthorized(f"the server at {where} is not {pin.box} (it presented {what}); no token was sent",
                           code=WRONG_BOX,
                           hint=f"if the lab moved {pin.box}, floyd login again at its new address (floydd members "
                                "on a box lists them); if not, someone is answering in its place: tell the lab's admin")
    if cert.serial in trust.revoked:
        box = trust.name(cert.node_id)
        raise Unauthorized(f"the server at {where} presented a certificate of {box} that the lab revoked (when "
                           f"{box} was removed); no token was sent", code=REVOKED,
                           hint="someone may hold that box's old key: tell the lab's admin; if the box joined the "
                                "lab again, it has a new certificate: floyd login again")
    return pin if pin.node_id is not None else replace(pin, node_id=cert.node_id)


def _pairs(raw: Any, key: str, value: str, *, key_check) -> dict[str, str]:
    """``{k: v}`` or ``[{key: k, value: v}, ...]`` -> ``{k: v}``, every key checked."""
    if raw is None:
        return {}
    items = raw.items() if isinstance(raw, Mapping) else (
        ((e.get(key), e.get(value)) if isinstance(e, Mapping) else (None, None)) for e in raw) \
        if isinstance(raw, list) else None
    if items is None:
        raise ValueError(f"{key}s are not a list")
    out: dict[str, str] = {}
    for k, v in items:
        if not key_check(k) or not isinstance(v, str) or len(v) > 256:
            raise ValueError(f"bad entry {str(k)[:40]!r}")
        out[k] = v
        if len(out) > _MAX_ENTRIES:
            raise ValueError("too many entries")
    return out


def _node_id(value: Any) -> bool:
    return isinstance(value, str) and NODE_ID_RE.fullmatch(value) is not None


def _serial(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= _SERIAL_CHARS
